"""`rknnlaunch detect`: one image through the NPU path (fixture RK3588 + fake RKNNLite) and the CPU
path with the real YOLOv8s ONNX (skipped when not installed)."""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rknnlaunch import UsageError
from rknnlaunch.cli import _detect as _cmd_detect
from rknnlaunch.cli._main import build_parser
from rknnlaunch.npu import HostRoot
from rknnlaunch.settings._env import load_settings

cv2 = pytest.importorskip("cv2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_fakes import FakeRknnLite, write_rknn  # noqa: E402


def parse(*argv: str) -> argparse.Namespace:
    return build_parser("detect").parse_args(["detect", *argv])


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "frame.png"
    cv2.imwrite(str(path), np.full((720, 1280, 3), 90, np.uint8))
    return path


def test_npu_detect_maps_boxes_to_the_original_image_and_draws_them(
    host_factory: Callable[[str], HostRoot], tmp_path: Path, image: Path
) -> None:
    host = host_factory("rk3588-drm")
    model = write_rknn(tmp_path / "yolov8s.rknn")
    FakeRknnLite.instances.clear()
    out, annotated = io.StringIO(), tmp_path / "annotated.jpg"
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    args = parse(str(image), "--model", str(model), "--out", str(annotated), "--json")
    assert _cmd_detect.execute(args, settings, FakeRknnLite, out) == 0
    doc = json.loads(out.getvalue())
    assert doc["backend"] == "npu" and doc["label"] == "NPU rk3588 cores 0,1,2 (mask 7)"
    # The fake sees (100,140,300,400) class 0 and (400,300,460,380) class 2 in 640x640 input
    # pixels; 1280x720 is scaled by 1/2 with 140 px of pad on top.
    assert [d["name"] for d in doc["detections"]] == ["person", "car"]  # 80 classes -> COCO names
    assert doc["detections"][0]["box"] == [200.0, 0.0, 600.0, 520.0]
    assert doc["detections"][1]["box"] == [800.0, 320.0, 920.0, 480.0]
    drawn = cv2.imread(str(annotated))
    assert drawn.shape == (720, 1280, 3) and (drawn != 90).any()
    assert [lite.released for lite in FakeRknnLite.instances] == [True]


def need_default_model() -> None:
    pytest.importorskip("onnxruntime")
    from testmodels import default_model_or_skip

    default_model_or_skip()


def test_cpu_detect_with_the_default_model(image: Path, tmp_path: Path) -> None:
    need_default_model()
    out = io.StringIO()
    annotated = tmp_path / "out.png"
    code = _cmd_detect.execute(parse(str(image), "--out", str(annotated)), load_settings({}), None, out)
    assert code == 0
    text = out.getvalue()
    assert "yolov8n.onnx on CPU (onnxruntime): no NPU found" in text and "wrote" in text
    assert annotated.is_file()


def test_unreadable_image_and_unwritable_output_are_usage_errors(image: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"image file .*missing\.jpg does not exist"):
        _cmd_detect.execute(parse(str(tmp_path / "missing.jpg")), load_settings({}))
    garbage = tmp_path / "garbage.jpg"
    garbage.write_text("not an image")
    with pytest.raises(UsageError, match=r"garbage\.jpg is not a JPEG, PNG"):
        _cmd_detect.execute(parse(str(garbage)), load_settings({}))
    # The output path is checked before any model is loaded or run.
    out = io.StringIO()
    args = parse(str(image), "--out", str(tmp_path / "no" / "such" / "dir" / "x.jpg"))
    with pytest.raises(UsageError, match=r"--out .*x\.jpg: the folder .*does not exist"):
        _cmd_detect.execute(args, load_settings({}), None, out)
    with pytest.raises(UsageError, match=r"the extension '\.unknownext' is not a format this can write"):
        args = parse(str(image), "--out", str(tmp_path / "x.unknownext"))
        _cmd_detect.execute(args, load_settings({}), None, out)
    assert out.getvalue() == ""


def _pose_outputs() -> list[np.ndarray]:
    from rknnlaunch.yolo.testing import SynthObject, encode_rknn_pose

    keypoints = tuple((200.0 + 5 * k, 200.0 + 8 * k, 0.9) for k in range(17))
    return encode_rknn_pose([SynthObject((150, 180, 330, 400), 0, 0.9, keypoints=keypoints)])


def _obb_outputs() -> list[np.ndarray]:
    from rknnlaunch.yolo.testing import SynthObject, encode_end2end

    return encode_end2end([SynthObject((100, 200, 300, 260), 1, 0.8, angle=0.5)], task="obb")


def _seg_outputs() -> list[np.ndarray]:
    from rknnlaunch.yolo.testing import SynthObject, encode_end2end

    coefficients = tuple(1.0 if i == 0 else 0.0 for i in range(32))
    table = encode_end2end(
        [SynthObject((100, 200, 300, 400), 0, 0.9, coefficients=coefficients)], task="segment"
    )
    protos = np.zeros((1, 32, 160, 160), np.float32)
    protos[0, 0] = 4.0  # proto 0 is "on" everywhere: the mask is the whole box
    return [*table, protos]


@pytest.mark.parametrize(
    ("outputs", "argv", "task", "field"),
    [
        (_pose_outputs, (), "pose", "keypoints"),
        (_obb_outputs, ("--task", "obb"), "obb", "angle"),
        (_seg_outputs, ("--task", "segment"), "segment", "mask"),
    ],
)
def test_detect_reports_every_task_as_json_and_draws_it(
    host_factory: Callable[[str], HostRoot],
    tmp_path: Path,
    image: Path,
    monkeypatch: pytest.MonkeyPatch,
    outputs: Callable[[], list[np.ndarray]],
    argv: tuple[str, ...],
    task: str,
    field: str,
) -> None:
    host = host_factory("rk3588-drm")
    model = write_rknn(tmp_path / f"yolo-{task}.rknn")
    made = outputs()
    original_init = FakeRknnLite.__init__

    def init(self: FakeRknnLite) -> None:
        original_init(self)
        self.outputs = made

    monkeypatch.setattr(FakeRknnLite, "__init__", init)
    out, annotated = io.StringIO(), tmp_path / "annotated.png"
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    args = parse(str(image), "--model", str(model), "--json", "--out", str(annotated), *argv)
    assert _cmd_detect.execute(args, settings, FakeRknnLite, out) == 0
    doc = json.loads(out.getvalue())
    assert doc["task"] == task and doc["count"] == 1
    assert field in doc["detections"][0]
    assert annotated.is_file()


def test_detect_refuses_a_task_the_outputs_do_not_have(
    host_factory: Callable[[str], HostRoot], tmp_path: Path, image: Path
) -> None:
    from rknnlaunch import ModelError

    host = host_factory("rk3588-drm")
    model = write_rknn(tmp_path / "yolov8s.rknn")
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    with pytest.raises(ModelError) as caught:
        _cmd_detect.execute(
            parse(str(image), "--model", str(model), "--task", "pose"), settings, FakeRknnLite
        )
    assert "pose" in str(caught.value)


def test_unknown_task_is_a_usage_error(image: Path) -> None:
    with pytest.raises(UsageError):
        parse(str(image), "--task", "classify")
