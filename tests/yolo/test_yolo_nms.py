"""Vectorised class-aware NMS against a plain per-class greedy loop."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlaunch.yolo import _nms as nms_module
from rknnlaunch.yolo import iou_matrix, nms


def plain_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, thr: float) -> list[int]:
    keep: list[int] = []
    for i in sorted(range(len(scores)), key=lambda k: -scores[k]):
        if all(classes[i] != classes[j] or iou_matrix(boxes[[i, j]])[0, 1] <= thr for j in keep):
            keep.append(i)
    return keep


def random_boxes(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xy = rng.uniform(0, 200, (n, 2))
    wh = rng.uniform(5, 80, (n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.permutation(n).astype(np.float32) / n + 0.01  # distinct scores
    return boxes, scores, rng.integers(0, 3, n).astype(np.int64)


@pytest.mark.parametrize("seed", range(5))
def test_matches_plain_greedy_nms(seed: int) -> None:
    boxes, scores, classes = random_boxes(np.random.default_rng(seed), 150)
    assert nms(boxes, scores, classes, 0.45).tolist() == plain_nms(boxes, scores, classes, 0.45)


def test_large_candidate_sets_use_the_row_path_with_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    boxes, scores, classes = random_boxes(np.random.default_rng(9), 120)
    want = nms(boxes, scores, classes, 0.5).tolist()
    monkeypatch.setattr(nms_module, "_MATRIX_LIMIT", 10)
    assert nms(boxes, scores, classes, 0.5).tolist() == want


def test_max_detections_and_empty_input() -> None:
    boxes, scores, classes = random_boxes(np.random.default_rng(3), 50)
    assert len(nms(boxes, scores, classes, 0.45, max_detections=4)) == 4
    assert nms(boxes[:0], scores[:0], classes[:0]).shape == (0,)


def test_iou_matrix_values() -> None:
    boxes = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 0, 0]], np.float32)
    iou = iou_matrix(boxes)
    assert iou[0, 1] == pytest.approx(50 / 150)
    assert iou[0, 2] == 0.0 and iou[3, 3] == 0.0 and iou[0, 0] == pytest.approx(1.0)
