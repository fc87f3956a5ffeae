"""One letterbox pad rule by the model's origin (issue 19: the pad followed the file suffix, so the same
Ultralytics network was fed grey borders as .onnx and black ones as .rknn), and one names rule."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sdk.rknnfile_builder import flatbuffer_block, rknn_bytes

from rknnlaunch import ModelError
from rknnlaunch.model._facts import ModelFacts, encode_custom_string
from rknnlaunch.pipeline._spec import DEFAULT_PAD, ModelPipeline, choose_pad, shown_names
from rknnlaunch.yolo import COCO_NAMES

ZOO_9 = tuple(
    (f"o{i}", shape)
    for i, shape in enumerate(
        s for side in (80, 40, 20) for s in ((1, 64, side, side), (1, 80, side, side), (1, 1, side, side))
    )
)


def metadata(outputs: list[list[Any]], facts: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "inputs": [{"name": "images", "shape": [1, 3, 640, 640]}],
        "outputs": [{"name": f"o{i}", "shape": shape} for i, shape in enumerate(outputs)],
        "facts": facts,
    }


@pytest.mark.parametrize(
    ("outputs", "value", "reason"),
    [
        ([[1, 84, 8400]], 114, "ultralytics head"),
        ([["batch", 84, "anchors"]], 114, "ultralytics head"),  # dynamic ONNX dims
        ([[1, 300, 6]], 114, "end2end head"),
        ([list(s) for _, s in ZOO_9], 0, "rknn-9 head (rknn_model_zoo pads with black)"),
        ([[1, 1000]], DEFAULT_PAD, "default"),  # a classifier: no YOLO head
        ([], DEFAULT_PAD, "default"),  # no outputs recorded
    ],
)
def test_the_pad_follows_the_head_layout(outputs: list[list[Any]], value: int, reason: str) -> None:
    choice = choose_pad(metadata(outputs))
    assert choice.value == value and choice.reason.startswith(reason)


def test_the_embedded_pad_wins_over_the_layout_and_a_given_pad_over_both() -> None:
    facts = {
        "class_names": ["a"],
        "input_size": [640, 640],
        "pad_value": 77,
        "output_layout": "rknn-9",
        "quantization": "int8",
        "source_onnx_sha256": "0" * 64,
    }
    zoo = metadata([list(s) for _, s in ZOO_9], facts)
    assert choose_pad(zoo).value == 77 and "rknnlaunch convert" in choose_pad(zoo).reason
    assert choose_pad(zoo, forced=5).value == 5


def test_the_same_network_as_onnx_and_rknn_letterboxes_to_the_same_tensor(tmp_path: Path) -> None:
    """An Ultralytics export and the .rknn rknn-toolkit2 builds from it (no rknnlaunch facts: built
    with the toolkit directly; NCHW input dims and the table output, as 2.5.0 records them)."""
    pytest.importorskip("cv2")
    pytest.importorskip("onnxruntime")
    from testmodels import fall_detector_or_skip

    onnx = Path(shutil.copy(fall_detector_or_skip(), tmp_path / "yolov8s.onnx"))
    rknn = tmp_path / "built" / "yolov8s.rknn"
    rknn.parent.mkdir()
    rknn.write_bytes(
        rknn_bytes(
            version="2.5.0", inputs=(("images", (1, 3, 640, 640)),), outputs=(("output0", (1, 6, 8400)),)
        )
    )
    frame = np.random.default_rng(0).integers(0, 255, (480, 640, 3), np.uint8)  # 4:3: borders
    tensors = []
    for path in (onnx, rknn):
        pipeline = ModelPipeline.for_model(path)
        assert pipeline.pad_value == 114
        boxer, _ = pipeline.stages()
        tensor, _ = boxer(frame)
        tensors.append(tensor.copy())
    np.testing.assert_array_equal(tensors[0], tensors[1])
    assert ModelPipeline.for_model(rknn, pad_value=0).pad_value == 0  # --pad still wins


def test_a_converted_model_keeps_the_pad_it_was_converted_with(tmp_path: Path) -> None:
    facts = ModelFacts.model_validate(
        {
            "class_names": ["a", "b"],
            "input_size": (640, 640),
            "pad_value": 0,
            "output_layout": "ultralytics",
            "quantization": "fp16",
            "source_onnx_sha256": "0" * 64,
        }
    )
    path = tmp_path / "m.rknn"
    path.write_bytes(
        rknn_bytes(
            inputs=(("images", (1, 3, 640, 640)),), block=flatbuffer_block({11: encode_custom_string(facts)})
        )
    )
    assert ModelPipeline.for_model(path).pad_value == 0  # ultralytics head, but convert --pad 0 said so


def test_one_names_rule() -> None:
    assert shown_names(["Normal", "Fall"], 2) == ("Normal", "Fall")
    assert shown_names(None, 80) == COCO_NAMES
    assert shown_names(None, 2) is None


def test_a_text_file_named_rknn_is_named_as_not_an_rknn(tmp_path: Path) -> None:
    from rknnlaunch import Detector

    fake = tmp_path / "fake.rknn"
    fake.write_text("not a model\n")
    with pytest.raises(
        ModelError, match=r"fake\.rknn is not an \.rknn model: it starts with b'not a mo"
    ) as error:
        Detector(fake, backend="cpu")
    assert ".onnx" not in error.value.problem
