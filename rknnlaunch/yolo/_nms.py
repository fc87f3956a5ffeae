"""Class-aware greedy non-maximum suppression, vectorised with numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

_PAIR_LIMIT = 4_000_000
"""Above this many same-class candidate pairs (~100 MB of temporaries), NMS falls back to one IoU
row per kept box instead of all pairs at once (only for pathological outputs: thousands of boxes
of one class)."""


def iou_row(box: npt.NDArray[np.float32], boxes: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """IoU of one xyxy box with each of N xyxy boxes."""
    width = np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])
    height = np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])
    inter = np.clip(width, 0, None) * np.clip(height, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = area + areas - inter
    return np.asarray(np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0), np.float32)


def iou_matrix(boxes: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Pairwise IoU of N xyxy boxes (N x N), same formula as `iou_row`."""
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    width = np.minimum(x2[:, None], x2[None, :]) - np.maximum(x1[:, None], x1[None, :])
    height = np.minimum(y2[:, None], y2[None, :]) - np.maximum(y1[:, None], y1[None, :])
    np.clip(width, 0, None, out=width)
    np.clip(height, 0, None, out=height)
    inter = width * height
    areas = (x2 - x1) * (y2 - y1)
    union = areas[:, None] + areas[None, :] - inter
    return np.asarray(np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0), np.float32)


def _same_class_pairs(
    classes: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]] | None:
    """Index pairs (i, j), i < j, of equal class; ``classes`` is in score order. None if too many."""
    by_class = np.argsort(classes, kind="stable")  # keeps score order inside each class
    _, starts, counts = np.unique(classes[by_class], return_index=True, return_counts=True)
    total = int((counts.astype(np.int64) ** 2).sum())
    if total > _PAIR_LIMIT:
        return None
    # For every member: one pair with each member of its class (a x b within each group).
    member_counts = np.repeat(counts, counts)
    member_starts = np.repeat(starts, counts)
    first = np.repeat(np.arange(classes.size), member_counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(member_counts) - member_counts, member_counts)
    second = np.repeat(member_starts, member_counts) + offsets
    upper = first < second
    return by_class[first[upper]], by_class[second[upper]]


_SEQUENTIAL_LIMIT = 20_000
"""Up to this many overlapping pairs, the greedy answer is read off in one Python pass over them;
above, "kept = not suppressed by a kept higher box" is iterated to its fixed point in numpy."""

PairIou = Callable[[npt.NDArray[np.float32], npt.NDArray[np.float32]], npt.NDArray[np.float32]]
"""IoU of a[k] with b[k] for each k (axis-aligned xyxy here; rotated boxes in `_rotated`)."""


def nms(
    boxes: npt.NDArray[np.float32],
    scores: npt.NDArray[np.float32],
    class_ids: npt.NDArray[np.int64],
    iou_threshold: float = 0.45,
    max_detections: int = 300,
) -> npt.NDArray[np.intp]:
    """Indices of the boxes greedy NMS keeps, highest score first.

    Class-aware: a box only suppresses lower-scored boxes of the same class whose IoU with it is
    above ``iou_threshold``. Equal scores keep their input order (stable sort). The result is
    exactly greedy NMS's, computed without a Python loop per box: IoU only for same-class pairs,
    then "kept = not suppressed by any kept higher-scored box" iterated to its fixed point (the
    greedy answer is the unique one; it takes as many rounds as the longest suppression chain), or
    for the usual few hundred overlapping pairs, one pass over them in order.
    """
    # Boxes near float32's limit (a broken model's output) overflow their areas: their IoU is then
    # NaN or 0 and suppresses nothing, which is what such a box deserves, without a warning.
    with np.errstate(over="ignore", invalid="ignore"):
        return nms_with(boxes, scores, class_ids, iou_threshold, max_detections, _pair_iou, iou_matrix)


def nms_with(
    boxes: npt.NDArray[np.float32],
    scores: npt.NDArray[np.float32],
    class_ids: npt.NDArray[np.int64],
    iou_threshold: float,
    max_detections: int,
    pair_iou: PairIou,
    matrix_iou: Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float32]] | None = None,
) -> npt.NDArray[np.intp]:
    """`nms` with any pairwise IoU (``boxes`` rows are whatever ``pair_iou`` reads).

    ``matrix_iou`` (all pairs at once), when given, is used when most pairs are same-class pairs
    anyway (few classes): a dense N x N IoU is cheaper than gathering the pairs.
    """
    count = int(scores.shape[0])
    if count == 0 or max_detections <= 0:
        return np.zeros((0,), np.intp)
    order = np.argsort(-scores, kind="stable")
    sorted_boxes = boxes[order]
    sorted_classes = class_ids[order]
    if matrix_iou is not None and count * count <= _PAIR_LIMIT and sorted_classes.min() >= 0:
        per_class = np.bincount(sorted_classes)
        dense = int((per_class.astype(np.int64) ** 2).sum()) * 3 > count * count
    else:
        dense = False
    if dense and matrix_iou is not None:
        overlapping = matrix_iou(sorted_boxes) > iou_threshold
        overlapping &= sorted_classes[:, None] == sorted_classes[None, :]
        higher, lower = np.nonzero(np.triu(overlapping, 1))
    else:
        pairs = _same_class_pairs(sorted_classes)
        if pairs is None:
            kept = _greedy_rows(sorted_boxes, sorted_classes, iou_threshold, max_detections, pair_iou)
            return np.asarray(order[kept])
        higher, lower = pairs
        overlap = pair_iou(sorted_boxes[higher], sorted_boxes[lower]) > iou_threshold
        higher, lower = higher[overlap], lower[overlap]
    if higher.size <= _SEQUENTIAL_LIMIT:
        # Greedy in one pass over the overlapping pairs, by the lower-scored box: when a pair is
        # reached, its higher-scored box's fate is already final (all pairs below it came first).
        by_lower = np.argsort(lower, kind="stable")
        keep_list = [True] * count
        for high, low in zip(higher[by_lower].tolist(), lower[by_lower].tolist(), strict=True):
            if keep_list[high] and keep_list[low]:
                keep_list[low] = False
        keep = np.array(keep_list, bool)
    else:
        keep = np.ones(count, bool)
        while True:
            suppressed = np.zeros(count, bool)
            suppressed[lower[keep[higher]]] = True
            if np.array_equal(suppressed, ~keep):
                break
            keep = ~suppressed
    return np.asarray(order[np.flatnonzero(keep)[:max_detections]], np.intp)


def _pair_iou(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """IoU of a[k] with b[k] for each k (same formula as `iou_row`)."""
    width = np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0])
    height = np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1])
    inter = np.clip(width, 0, None) * np.clip(height, 0, None)
    union = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter
    return np.asarray(np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0), np.float32)


def _greedy_rows(
    boxes: npt.NDArray[np.float32],
    classes: npt.NDArray[np.int64],
    iou_threshold: float,
    limit: int,
    pair_iou: PairIou,
) -> npt.NDArray[np.intp]:
    """Plain greedy NMS over score-sorted boxes, one IoU row per kept box (for huge inputs)."""
    keep: list[int] = []
    remaining = np.arange(classes.size)
    while remaining.size and len(keep) < limit:
        best = int(remaining[0])
        keep.append(best)
        rest = remaining[1:]
        same = classes[rest] == classes[best]
        over = np.zeros(rest.shape, bool)
        if same.any():
            others = boxes[rest[same]]
            over[same] = pair_iou(np.repeat(boxes[best][None], len(others), axis=0), others) > iou_threshold
        remaining = rest[~over]
    return np.asarray(keep, np.intp)
