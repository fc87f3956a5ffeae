"""`rknnlaunch validate` on the board: the .rknn on the (fake) NPU through the runtime seam, the real
YOLOv8s ONNX on the CPU as the reference. The fake RKNNLite runs that same ONNX (optionally with a
preparation mistake baked in), so agreement and the likely-cause diagnosis are exercised for real."""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rknnlaunch import UsageError
from rknnlaunch.cli import _validate as _cmd_validate
from rknnlaunch.model import ModelFacts, encode_custom_string
from rknnlaunch.npu import HostRoot, soc_by_name
from rknnlaunch.settings._env import load_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))
from rknnfile_builder import flatbuffer_block, write_rknn
from rknnlite_fake import FakeNpu, FakeRKNNLite

cv2 = pytest.importorskip("cv2")
ort = pytest.importorskip("onnxruntime")


def default_onnx() -> Path:
    from testmodels import fall_detector_or_skip

    return fall_detector_or_skip()


def photo() -> Path:
    import matplotlib

    path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    if not path.is_file():
        pytest.skip("matplotlib's sample photo is not installed")
    return path


class OnnxBackedLite(FakeRKNNLite):
    """The fake RKNNLite whose inference runs the real ONNX on what an .rknn built with ``mistake``
    would compute: "" (faithful), "layout" (NHWC bytes read as NCHW), "scale" (no /255)."""

    session: Any = None
    mistake = ""

    def inference(self, inputs: list[Any], *args: Any, **kwargs: Any) -> list[np.ndarray] | None:
        if super().inference(inputs, *args, **kwargs) is None:
            return None
        x = np.asarray(inputs[0])
        if self.mistake == "layout":
            nchw = x.reshape(x.shape[0], x.shape[3], x.shape[1], x.shape[2]).astype(np.float32) / 255
        elif self.mistake == "scale":
            nchw = x.transpose(0, 3, 1, 2).astype(np.float32)
        else:
            nchw = x.transpose(0, 3, 1, 2).astype(np.float32) / 255
        outputs = self.session.run(None, {"images": nchw})
        return [np.asarray(o, np.float16).astype(np.float32) for o in outputs]  # float16 outputs


def factory(mistake: str) -> Callable[[], FakeRKNNLite]:
    soc = soc_by_name("rk3588")
    assert soc is not None
    npu = FakeNpu(soc)
    session = ort.InferenceSession(str(default_onnx()), providers=["CPUExecutionProvider"])

    def make() -> FakeRKNNLite:
        lite = OnnxBackedLite(npu)
        lite.session, lite.mistake = session, mistake
        return lite

    return make


def converted_model(path: Path) -> Path:
    facts = ModelFacts.model_validate(
        {
            "class_names": ["Normal", "Fall"],
            "input_size": (640, 640),
            "pad_value": 114,
            "output_layout": "ultralytics",
            "quantization": "int8-hybrid",
            "source_onnx_sha256": "0" * 64,
        }
    )
    block = flatbuffer_block(
        {
            11: encode_custom_string(facts),
            12: json.dumps({"images": {"dtype": "int8", "layout": "NHWC"}}),
            13: json.dumps({"output0": {"dtype": "float16", "layout": "NCHW"}}),
        }
    )
    return write_rknn(path, version="2.3.2", block=block, inputs=(("images", (1, 3, 640, 640)),))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _cmd_validate.configure(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "hopper.jpg").write_bytes(photo().read_bytes())
    cv2.imwrite(str(folder / "grey.png"), np.full((360, 480, 3), 90, np.uint8))
    return folder


def test_a_faithful_model_agrees_on_the_npu(
    host_factory: Callable[[str], HostRoot], tmp_path: Path, images: Path
) -> None:
    host = host_factory("rk3588-drm")
    model = converted_model(tmp_path / "m.rknn")
    out = io.StringIO()
    report, plot = tmp_path / "v.json", tmp_path / "v.png"
    args = parse(
        *(str(model), "--reference", str(default_onnx()), "--images", str(images)),
        *("--json", str(report), "--plot", str(plot), "--min-agreement", "0.9"),
    )
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    assert _cmd_validate.execute(args, settings, factory(""), out) == 0
    text = out.getvalue()
    assert "on NPU rk3588 cores 0,1,2 (mask 7)" in text and "PASS: agreement 1.000 >= 0.9" in text
    doc = json.loads(report.read_text())
    assert doc["schema"] == "rknnlaunch.validate/1" and doc["passed"] is True
    assert (
        doc["settings"]["layout"] == "ultralytics" and doc["settings"]["pad_value"] == 114
    )  # from the facts
    assert doc["total"]["reference_detections"] >= 1 and doc["total"]["agreement"] == 1.0
    assert doc["total"]["outputs"][0]["cosine_min"] > 0.9999
    assert [i["image"] for i in doc["images"]] == ["grey.png", "hopper.jpg"]
    assert plot.stat().st_size > 1000


def test_an_nchw_nhwc_mix_up_fails_and_is_named(
    host_factory: Callable[[str], HostRoot], tmp_path: Path, images: Path
) -> None:
    host = host_factory("rk3588-drm")
    model = converted_model(tmp_path / "m.rknn")
    out = io.StringIO()
    args = parse(str(model), "--reference", str(default_onnx()), "--images", str(images / "hopper.jpg"))
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    assert _cmd_validate.execute(args, settings, factory("layout"), out) == 1
    text = out.getvalue()
    assert "FAIL" in text and "likely cause: the input layout is swapped" in text


def test_labels_beside_the_images_give_map50(
    host_factory: Callable[[str], HostRoot], tmp_path: Path, images: Path
) -> None:
    host = host_factory("rk3588-drm")
    model = converted_model(tmp_path / "m.rknn")
    (images / "hopper.txt").write_text("0 0.5 0.5 0.9 0.98\n")
    (images / "grey.txt").write_text("")
    report = tmp_path / "v.json"
    args = parse(
        str(model), "--reference", str(default_onnx()), "--images", str(images), "--json", str(report)
    )
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    assert _cmd_validate.execute(args, settings, factory(""), io.StringIO()) == 0
    total = json.loads(report.read_text())["total"]
    assert total["map50_reference"] is not None and total["map50_device"] == total["map50_reference"]


def test_without_an_npu_it_points_to_convert_validate(tmp_path: Path, images: Path) -> None:
    model = converted_model(tmp_path / "m.rknn")
    args = parse(str(model), "--reference", str(default_onnx()), "--images", str(images))
    settings = load_settings({"RKNNLAUNCH_ROOT": str(tmp_path / "empty-root")})
    with pytest.raises(UsageError) as caught:
        _cmd_validate.execute(args, settings, factory(""), io.StringIO())
    assert "--validate IMAGES" in (caught.value.fix or "")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["{onnx}", "--reference", "{onnx}", "--images", "{images}"], "is the ONNX"),
        (["{model}", "--reference", "{onnx}", "--images", "{tmp}/nope"], "does not exist"),
        (["{model}", "--reference", "{onnx}", "--images", "{tmp}/emptydir"], "has no images"),
        (["{model}", "--reference", "{onnx}", "--images", "{images}", "--json", "{tmp}/no/x.json"], "--json"),
        (["{model}", "--reference", "{onnx}", "--images", "{images}", "--min-agreement", "2"], "not a ratio"),
    ],
)
def test_bad_input_is_a_usage_error(tmp_path: Path, images: Path, argv: list[str], says: str) -> None:
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "emptydir" / "notes.txt").write_text("x")
    values = {"onnx": str(default_onnx()), "model": str(converted_model(tmp_path / "m.rknn")),
              "images": str(images), "tmp": str(tmp_path)}  # fmt: skip
    args = parse(*(a.format(**values) for a in argv))
    settings = load_settings({"RKNNLAUNCH_ROOT": str(tmp_path)})
    with pytest.raises(UsageError, match=says):
        _cmd_validate.execute(args, settings, factory(""), io.StringIO())


def test_undecodable_images_are_named(
    tmp_path: Path, images: Path, host_factory: Callable[[str], HostRoot]
) -> None:
    (images / "broken.jpg").write_bytes(b"not a jpeg")
    args = parse(
        str(converted_model(tmp_path / "m.rknn")), "--reference", str(default_onnx()), "--images", str(images)
    )
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host_factory("rk3588-drm").root)})
    with pytest.raises(
        UsageError, match=r"1 of 3 images are not images that can be read: .*broken\.jpg is not a JPEG"
    ):
        _cmd_validate.execute(args, settings, factory(""), io.StringIO())
