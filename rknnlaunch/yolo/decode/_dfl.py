"""Candidates of rknn_model_zoo DFL heads split per stride, and the DFL expectation `dfl_distances`.

The heads: rknn-9/6/yolov10/seg/pose/obb; `dfl_distances` turns their box logits into distances."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..layouts import Plan
from ._candidates import Found, best_classes, empty_found, keypoint_triples
from ._quant import FloatArray, IntArray, Quant, Tensor, dequantise, quantised_floor


def _logit(p: float) -> float:
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return math.log(p / (1.0 - p))


class _DflBins:
    """Cached ``arange(bins)`` per bin count (the DFL expectation weights)."""

    def __init__(self) -> None:
        self._cache: dict[int, FloatArray] = {}

    def get(self, bins: int) -> FloatArray:
        weights = self._cache.get(bins)
        if weights is None:
            weights = np.arange(bins, dtype=np.float32)[:, None]
            self._cache[bins] = weights
        return weights


_BINS = _DflBins()


def dfl_distances(logits: FloatArray) -> FloatArray:
    """4 x bins x K DFL logits -> 4 x K distances (expectation of the softmax over the bins)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    np.exp(shifted, out=shifted)
    weights = _BINS.get(logits.shape[1])
    return np.asarray((shifted * weights).sum(axis=1) / shifted.sum(axis=1), np.float32)


def _branch_boxes(
    dist: FloatArray,
    anchors: IntArray,
    width: int,
    stride_x: float,
    stride_y: float,
    angles: FloatArray | None,
) -> FloatArray:
    """xyxy input pixels of one branch's anchors from their DFL distances (obb: unrotated box)."""
    centre_x = (anchors % width).astype(np.float32) + np.float32(0.5)
    centre_y = (anchors // width).astype(np.float32) + np.float32(0.5)
    sx, sy = np.float32(stride_x), np.float32(stride_y)
    boxes = np.empty((anchors.size, 4), np.float32)
    if angles is None:
        boxes[:, 0] = (centre_x - dist[0]) * sx
        boxes[:, 1] = (centre_y - dist[1]) * sy
        boxes[:, 2] = (centre_x + dist[2]) * sx
        boxes[:, 3] = (centre_y + dist[3]) * sy
        return boxes
    # dist2rbox: the box's own frame has sides (left+right) x (top+bottom); its centre is offset
    # from the anchor by half the side differences, rotated by the angle.
    cos, sin = np.cos(angles), np.sin(angles)
    off_x, off_y = (dist[2] - dist[0]) / 2, (dist[3] - dist[1]) / 2
    mid_x = (centre_x + off_x * cos - off_y * sin) * sx
    mid_y = (centre_y + off_x * sin + off_y * cos) * sy
    half_w, half_h = (dist[0] + dist[2]) * (sx / 2), (dist[1] + dist[3]) * (sy / 2)
    boxes[:, 0], boxes[:, 1] = mid_x - half_w, mid_y - half_h
    boxes[:, 2], boxes[:, 3] = mid_x + half_w, mid_y + half_h
    return boxes


def decode_split(
    plan: Plan, outputs: Sequence[Tensor], quant: Sequence[Quant | None], conf: float, size: tuple[int, int]
) -> Found:
    """DFL heads split per stride (rknn-9/6/yolov10/seg/pose/obb): anchors above ``conf``."""
    threshold = _logit(conf) if plan.class_logits else conf
    box_rows = 4 * plan.bins
    parts: list[tuple[FloatArray, FloatArray, npt.NDArray[np.int64], IntArray, FloatArray | None]] = []
    angle_t = None if plan.angles is None else outputs[plan.angles].reshape(-1)
    for branch in plan.branches:
        cells = branch.height * branch.width
        box_t, box_q = outputs[branch.box], quant[branch.box]
        if branch.scores == branch.box:  # pose/obb: one [1, 64 + nc, H, W] tensor
            table = box_t.reshape(-1, cells)
            box2d, cls2d, cls_q = table[:box_rows], table[box_rows:], box_q
        else:
            box2d = box_t.reshape(box_rows, cells)
            cls_t, cls_q = outputs[branch.scores], quant[branch.scores]
            cls2d = cls_t.reshape(-1, cells)
        cls_floor = quantised_floor(threshold, cls_q, cls2d.dtype)
        if branch.score_sum is not None and plan.layout != "rknn-yolov10":
            # score_sum >= every single class score, so anchors below the threshold are skipped
            # without looking at their class scores at all.
            sum_t, sum_q = outputs[branch.score_sum], quant[branch.score_sum]
            anchors = np.flatnonzero(sum_t.reshape(-1) >= quantised_floor(threshold, sum_q, sum_t.dtype))
            if anchors.size == 0:
                continue
            raw = cls2d[:, anchors]
            passing = raw.max(axis=0) >= cls_floor
            anchors, raw = anchors[passing], raw[:, passing]
        else:
            anchors = np.flatnonzero(cls2d.max(axis=0) >= cls_floor)
            raw = None
        if anchors.size == 0:
            continue
        anchors, classes, scores = best_classes(cls2d, anchors, cls_q, conf, plan.class_logits, raw)
        if anchors.size == 0:
            continue
        dist = dfl_distances(dequantise(box2d.reshape(4, plan.bins, cells)[:, :, anchors], box_q))
        angles = None
        if angle_t is not None:
            raw = dequantise(angle_t[anchors + branch.offset], quant[plan.angles or 0])
            angles = (raw - np.float32(0.25)) * np.float32(math.pi)
        stride_x, stride_y = size[0] / branch.width, size[1] / branch.height
        boxes = _branch_boxes(dist, anchors, branch.width, stride_x, stride_y, angles)
        parts.append((boxes, scores, classes, anchors + branch.offset, angles))
    if not parts:
        return empty_found(plan)
    if len(parts) == 1:
        boxes, scores, classes, anchors, angles = parts[0]
        found = Found(boxes, scores, classes, anchors, angles)
    else:
        found = Found(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
            np.concatenate([p[3] for p in parts]),
            None if angle_t is None else np.concatenate([p[4] for p in parts if p[4] is not None]),
        )
    if plan.keypoints is not None:
        kpt_t = outputs[plan.keypoints]
        raw = dequantise(
            kpt_t.reshape(kpt_t.shape[1], kpt_t.shape[2], -1)[:, :, found.anchors], quant[plan.keypoints]
        )
        found.keypoints = keypoint_triples(raw.transpose(2, 0, 1))
    if plan.protos is not None:
        found.coefficients = _gather_coefficients(plan, outputs, quant, found.anchors)
    return found


def _gather_coefficients(
    plan: Plan, outputs: Sequence[Tensor], quant: Sequence[Quant | None], anchors: IntArray
) -> FloatArray:
    out = np.empty((anchors.size, plan.mask_channels), np.float32)
    for branch in plan.branches:
        if branch.coefficients is None:  # every seg branch has one (plan_layout); nothing to gather
            continue
        cells = branch.height * branch.width
        inside = (anchors >= branch.offset) & (anchors < branch.offset + cells)
        if inside.any():
            coef_t = outputs[branch.coefficients].reshape(plan.mask_channels, cells)
            local = anchors[inside] - branch.offset
            out[inside] = dequantise(coef_t[:, local], quant[branch.coefficients]).T
    return out
