"""A frame with nothing above the threshold: every task x layout x (float, int8) gives an empty
`Detections` with the task's fields present and empty (issue 19: ultralytics-seg raised a bare
AssertionError here, float and int8)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from test_yolo_properties import small_layout_shapes

from rknnlaunch.yolo import LAYOUTS, Detections, LetterboxInfo, Quant, YoloDecoder, make_decoder

INFO = LetterboxInfo(0.5, 0.5, 0, 8, 128, 96, 64, 64)


def task_of(layout: str) -> str:
    for task in ("seg", "pose", "obb"):
        if task in layout:
            return {"seg": "segment"}.get(task, task)
    return "detect"


def below_threshold(
    shapes: list[tuple[int, ...]], quantised: bool
) -> tuple[list[npt.NDArray[np.generic]], list[Quant | None] | None]:
    """Outputs whose every value is far below any score threshold (logits, probabilities, int8)."""
    if quantised:
        return [np.full(s, -128, np.int8) for s in shapes], [Quant(0, 0.05) for _ in shapes]
    return [np.full(s, -8.0, np.float32) for s in shapes], None


def assert_empty_with_task_fields(found: Detections, task: str, nkpt: int) -> None:
    assert len(found) == 0
    assert found.task == task
    assert found.boxes.shape == (0, 4) and found.boxes.dtype == np.float32
    assert found.scores.shape == (0,) and found.class_ids.shape == (0,)
    if task == "segment":
        assert found.masks is not None and found.masks.shape[0] == 0 and found.masks.ndim == 3
        assert found.mask_region is not None
    else:
        assert found.masks is None
    if task == "pose":
        assert found.keypoints is not None and found.keypoints.shape == (0, nkpt, 3)
    else:
        assert found.keypoints is None
    if task == "obb":
        assert found.angles is not None and found.angles.shape == (0,)
    else:
        assert found.angles is None
    doc = found.to_json()
    assert doc["task"] == task and doc["count"] == 0 and doc["detections"] == []


@pytest.mark.parametrize("masks", ["proto", "image"])
@pytest.mark.parametrize("quantised", [False, True], ids=["float", "int8"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_nothing_above_the_threshold_is_an_empty_result_with_the_task_fields(
    layout: str, quantised: bool, masks: str
) -> None:
    shapes, meta = small_layout_shapes(layout, nc=2, extra=3)
    outputs, quant = below_threshold(shapes, quantised)
    task = task_of(layout)
    decoder = make_decoder(shapes, meta, layout=layout, conf=0.3, quant=quant, masks=masks)  # type: ignore[arg-type]
    assert decoder.task == task
    assert_empty_with_task_fields(decoder(outputs, INFO), task, 3)
    assert_empty_with_task_fields(decoder(outputs), task, 3)  # without letterbox geometry too
    wrapper = YoloDecoder(conf=0.3, layout=layout, quant=quant, metadata=meta, masks=masks)  # type: ignore[arg-type]
    assert_empty_with_task_fields(wrapper(outputs, INFO), task, 3)
