"""Vectorised class-aware NMS against a plain per-class greedy loop."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlaunch.yolo import _nms as nms_module
from rknnlaunch.yolo import iou_matrix, nms


def plain_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, thr: float) -> list[int]:
    keep: list[int] = []
    iou = iou_matrix(boxes).tolist()
    for i in sorted(range(len(scores)), key=lambda k: -scores[k]):
        if all(classes[i] != classes[j] or iou[i][j] <= thr for j in keep):
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


@pytest.mark.parametrize("sequential_limit", [20_000, 0], ids=["one-pass", "fixed-point"])
@pytest.mark.parametrize("seed", range(5))
def test_matches_plain_greedy_nms_on_dense_single_class_clusters(
    seed: int, sequential_limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nms_module, "_SEQUENTIAL_LIMIT", sequential_limit)
    rng = np.random.default_rng(100 + seed)
    boxes, scores, _ = random_boxes(rng, 200)
    boxes = boxes / 3  # crowd them: long suppression chains
    classes = np.zeros(200, np.int64)
    for threshold in (0.3, 0.5, 0.7):
        assert nms(boxes, scores, classes, threshold).tolist() == plain_nms(boxes, scores, classes, threshold)


def test_a_suppressed_box_suppresses_nothing() -> None:
    # A overlaps B, B overlaps C, A does not overlap C: greedy keeps A and C (Fast-NMS would drop C).
    boxes = np.array([[0, 0, 10, 10], [4, 0, 14, 10], [8, 0, 18, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    assert nms(boxes, scores, np.zeros(3, np.int64), 0.3).tolist() == [0, 2]


def test_huge_candidate_sets_use_the_row_path_with_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    boxes, scores, classes = random_boxes(np.random.default_rng(9), 120)
    want = nms(boxes, scores, classes, 0.5).tolist()
    monkeypatch.setattr(nms_module, "_PAIR_LIMIT", 10)
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


@pytest.mark.parametrize("classes", [1, 2, 80])
def test_dense_matrix_and_gathered_pairs_paths_agree(classes: int) -> None:
    rng = np.random.default_rng(classes)
    boxes, scores, _ = random_boxes(rng, 180)
    labels = rng.integers(0, classes, 180).astype(np.int64)
    pairs_only = nms_module.nms_with(boxes, scores, labels, 0.45, 300, nms_module._pair_iou)
    either = nms_module.nms_with(boxes, scores, labels, 0.45, 300, nms_module._pair_iou, iou_matrix)
    assert pairs_only.tolist() == either.tolist() == plain_nms(boxes, scores, labels, 0.45)
