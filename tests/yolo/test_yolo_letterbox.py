"""Letterbox: geometry, reused buffer, pad colour, RGB order, and that cv2 loads only on use."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rknnlaunch import UsageError
from rknnlaunch.yolo import PAD_ULTRALYTICS, Letterboxer, geometry, letterbox

cv2 = pytest.importorskip("cv2")


@pytest.mark.parametrize(("width", "height"), [(1920, 1080), (1080, 1920), (640, 640), (320, 200), (7, 3000)])
def test_content_is_the_resized_image_in_rgb_and_the_rest_is_pad(width: int, height: int) -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    tensor, info = letterbox(image, 640, pad_value=PAD_ULTRALYTICS)
    assert tensor.shape == (1, 640, 640, 3) and tensor.dtype == np.uint8
    new_w, new_h = round(width * info.scale_x), round(height * info.scale_y)
    assert max(new_w, new_h) == 640
    resized = image if (new_w, new_h) == (width, height) else cv2.resize(image, (new_w, new_h))
    region = tensor[0, info.pad_y : info.pad_y + new_h, info.pad_x : info.pad_x + new_w]
    np.testing.assert_array_equal(region, resized[..., ::-1])
    pad = np.ones((640, 640), bool)
    pad[info.pad_y : info.pad_y + new_h, info.pad_x : info.pad_x + new_w] = False
    assert (tensor[0][pad] == PAD_ULTRALYTICS).all()


def test_buffer_is_reused_and_pad_repainted_when_geometry_changes() -> None:
    boxer = Letterboxer(640, pad_value=0)
    white_wide = np.full((360, 640, 3), 255, np.uint8)
    white_tall = np.full((640, 320, 3), 255, np.uint8)
    first, _ = boxer(np.full((640, 640, 3), 255, np.uint8))
    second, info = boxer(white_wide)
    assert second is first
    assert info.pad_y == 140 and (second[0, :140] == 0).all() and (second[0, 140:500] == 255).all()
    third, info = boxer(white_tall)
    assert third is first and info.pad_x == 160
    assert (third[0, :, :160] == 0).all() and (third[0, :140, 160:480] == 255).all()


def test_geometry_and_mapping_back() -> None:
    info = geometry(1920, 1080, 640, 640)
    assert (info.pad_x, info.pad_y) == (0, 140) and info.scale_x == pytest.approx(1 / 3)
    boxes = np.array([[30.0, 190.0, 330.0, 440.0]], np.float32)
    np.testing.assert_allclose(info.to_source(boxes), [[90.0, 150.0, 990.0, 900.0]], atol=1e-3)


def test_rectangular_input_and_bgr_passthrough() -> None:
    image = np.zeros((100, 100, 3), np.uint8)
    image[..., 0] = 200  # blue in BGR
    tensor, info = Letterboxer((320, 256), bgr_to_rgb=False)(image)
    assert tensor.shape == (1, 256, 320, 3) and info.pad_x == 32
    assert tensor[0, 128, 160, 0] == 200


def test_grey_and_bgra_images_are_accepted() -> None:
    assert letterbox(np.zeros((50, 60), np.uint8))[0].shape == (1, 640, 640, 3)
    assert letterbox(np.zeros((50, 60, 4), np.uint8))[0].shape == (1, 640, 640, 3)


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((10, 10, 3), np.float32),
        np.zeros((1, 10, 10, 3), np.uint8),
        np.zeros((0, 5, 3), np.uint8),
        "x",
    ],
)
def test_bad_images_are_usage_errors(bad: object) -> None:
    with pytest.raises(UsageError):
        letterbox(bad)  # type: ignore[arg-type]


def test_bad_settings_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        Letterboxer(640, pad_value=300)
    with pytest.raises(UsageError):
        Letterboxer(0)


def test_importing_rknnlaunch_and_the_yolo_module_does_not_import_cv2() -> None:
    code = "import sys, rknnlaunch, rknnlaunch.yolo; assert 'cv2' not in sys.modules, 'cv2 imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
