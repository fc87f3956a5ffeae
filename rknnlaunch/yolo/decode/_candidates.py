"""Candidate detections before NMS (`Found`, in model-input pixels) and the helpers every head shares.

The best class per anchor, keypoint triples, the empty set with the task's fields, and dropping
non-finite candidates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..layouts import Plan
from ._quant import FloatArray, IntArray, Quant, Tensor, dequantise


def _sigmoid(x: FloatArray) -> FloatArray:
    with np.errstate(over="ignore"):
        return np.asarray(1.0 / (1.0 + np.exp(-x)), np.float32)


@dataclass
class Found:
    """Candidates above the threshold, in model-input pixels."""

    boxes: FloatArray  # K x 4 xyxy (obb: the unrotated box)
    scores: FloatArray
    class_ids: npt.NDArray[np.int64]
    anchors: IntArray  # global anchor index (stride order) or table column
    angles: FloatArray | None = None
    keypoints: FloatArray | None = None  # K x kpts x 3
    coefficients: FloatArray | None = None  # K x nm

    def take(self, index: IntArray | npt.NDArray[np.bool_]) -> Found:
        def pick(a: Any) -> Any:
            return None if a is None else a[index]

        return Found(
            self.boxes[index],
            self.scores[index],
            self.class_ids[index],
            self.anchors[index],
            pick(self.angles),
            pick(self.keypoints),
            pick(self.coefficients),
        )


def empty_found(plan: Plan) -> Found:
    """No candidates, with the plan's task extras present and empty (masks/keypoints/angles are
    then empty arrays in the result, as for a frame whose candidates NMS removed)."""
    found = Found(
        np.zeros((0, 4), np.float32),
        np.zeros((0,), np.float32),
        np.zeros((0,), np.int64),
        np.zeros((0,), np.intp),
    )
    if plan.task == "obb":
        found.angles = np.zeros((0,), np.float32)
    elif plan.task == "pose":
        found.keypoints = np.zeros((0, plan.keypoint_shape[0], 3), np.float32)
    elif plan.task == "segment":
        found.coefficients = np.zeros((0, mask_channels(plan)), np.float32)
    return found


def mask_channels(plan: Plan) -> int:
    """Mask coefficients per detection: the protos' channel count."""
    if plan.protos is None:
        return plan.mask_channels
    return int(plan.shapes[plan.protos][-3])


def best_classes(
    cls2d: Tensor,
    anchors: IntArray,
    quant: Quant | None,
    conf: float,
    logits: bool,
    raw: Tensor | None = None,
) -> tuple[IntArray, npt.NDArray[np.int64], FloatArray]:
    """The best class and its score per anchor, keeping anchors whose score reaches ``conf``
    (``raw``: the anchors' class scores when already gathered)."""
    picked = dequantise(cls2d[:, anchors] if raw is None else raw, quant)
    best_class = picked.argmax(axis=0)
    best_score = picked[best_class, np.arange(anchors.size)]
    if logits:
        best_score = _sigmoid(best_score)
    passed = best_score >= conf
    if not passed.all():
        anchors, best_class, best_score = anchors[passed], best_class[passed], best_score[passed]
    return anchors, best_class.astype(np.int64, copy=False), best_score.astype(np.float32, copy=False)


def keypoint_triples(raw: FloatArray) -> FloatArray:
    """K x kpts x (2 or 3) -> K x kpts x 3 (visibility 1 when the model gives only x, y)."""
    if raw.shape[2] == 3:
        return np.ascontiguousarray(raw, np.float32)
    out = np.ones((*raw.shape[:2], 3), np.float32)
    out[:, :, :2] = raw
    return out


def keep_finite(found: Found, num_classes: int) -> tuple[Found, int]:
    """Drop candidates with a non-finite box/score/angle/keypoint or an impossible class id."""
    ok = np.isfinite(found.boxes).all(axis=1) & np.isfinite(found.scores)
    if found.angles is not None:
        ok &= np.isfinite(found.angles)
    if found.keypoints is not None:
        ok &= np.isfinite(found.keypoints).all(axis=(1, 2))
    if found.coefficients is not None:
        ok &= np.isfinite(found.coefficients).all(axis=1)
    ok &= found.class_ids >= 0
    if num_classes:
        ok &= found.class_ids < num_classes
    dropped = int(ok.size - np.count_nonzero(ok))
    return (found if dropped == 0 else found.take(ok)), dropped
