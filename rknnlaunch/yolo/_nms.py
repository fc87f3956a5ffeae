"""Class-aware greedy non-maximum suppression, vectorised with numpy."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_MATRIX_LIMIT = 2048
"""Up to this many candidates, build the whole IoU matrix at once (K*K floats: 16 MB at 2048)."""


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


def nms(
    boxes: npt.NDArray[np.float32],
    scores: npt.NDArray[np.float32],
    class_ids: npt.NDArray[np.int64],
    iou_threshold: float = 0.45,
    max_detections: int = 300,
) -> npt.NDArray[np.intp]:
    """Indices of the boxes greedy NMS keeps, highest score first.

    Class-aware: a box only suppresses lower-scored boxes of the same class whose IoU with it is
    above ``iou_threshold``. Equal scores keep their input order (stable sort).
    """
    count = int(scores.shape[0])
    if count == 0 or max_detections <= 0:
        return np.zeros((0,), np.intp)
    order = np.argsort(-scores, kind="stable")
    sorted_boxes = boxes[order]
    sorted_classes = class_ids[order]
    keep: list[int] = []
    remaining = np.arange(count)
    if count <= _MATRIX_LIMIT:
        # One matrix of "i suppresses j" for all pairs; the greedy loop then runs once per KEPT box.
        suppresses = iou_matrix(sorted_boxes) > iou_threshold
        suppresses &= sorted_classes[:, None] == sorted_classes[None, :]
        while remaining.size and len(keep) < max_detections:
            best = int(remaining[0])
            keep.append(best)
            rest = remaining[1:]
            remaining = rest[~suppresses[best, rest]]
    else:
        while remaining.size and len(keep) < max_detections:
            best = int(remaining[0])
            keep.append(best)
            rest = remaining[1:]
            same = sorted_classes[rest] == sorted_classes[best]
            over = np.zeros(rest.shape, bool)
            if same.any():
                over[same] = iou_row(sorted_boxes[best], sorted_boxes[rest[same]]) > iou_threshold
            remaining = rest[~over]
    return np.asarray(order[np.asarray(keep, np.intp)], np.intp)
