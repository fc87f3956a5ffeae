"""Candidates of single-table heads: Ultralytics tables and NMS-free end-to-end rows.

Ultralytics' ``[1, 4 + nc + extras, N]`` tables and end-to-end ``[1, N, 6 + extras]`` rows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..layouts import Plan
from ._candidates import Found, best_classes, empty_found, keypoint_triples
from ._quant import Quant, Tensor, dequantise, quantised_floor


def _table_view(plan: Plan, output: Tensor) -> Tensor:
    table = output.reshape(output.shape[-2], output.shape[-1])
    return table.T if plan.channels_last else table


def decode_table(plan: Plan, outputs: Sequence[Tensor], quant: Sequence[Quant | None], conf: float) -> Found:
    """Ultralytics single table [4 + nc + extras, N]: cx, cy, w, h (input pixels), class scores."""
    table, table_q = _table_view(plan, outputs[plan.table]), quant[plan.table]
    nc = plan.num_classes
    class_scores = table[4 : 4 + nc]
    floor = quantised_floor(conf, table_q, table.dtype)
    anchors = np.flatnonzero(class_scores.max(axis=0) >= floor)
    if anchors.size == 0:
        return empty_found(plan)
    anchors, classes, scores = best_classes(class_scores, anchors, table_q, conf, False)
    cxcywh = dequantise(table[:4, anchors], table_q)
    boxes = np.empty((anchors.size, 4), np.float32)
    half_w, half_h = cxcywh[2] * np.float32(0.5), cxcywh[3] * np.float32(0.5)
    boxes[:, 0] = cxcywh[0] - half_w
    boxes[:, 1] = cxcywh[1] - half_h
    boxes[:, 2] = cxcywh[0] + half_w
    boxes[:, 3] = cxcywh[1] + half_h
    found = Found(boxes, scores, classes, anchors)
    extra = table[4 + nc :, anchors]
    if plan.task == "obb":
        found.angles = dequantise(extra[0], table_q)
    elif plan.task == "pose":
        count, per = plan.keypoint_shape
        raw = dequantise(extra, table_q).reshape(count, per, anchors.size)
        found.keypoints = keypoint_triples(raw.transpose(2, 0, 1))
    elif plan.task == "segment":
        found.coefficients = np.ascontiguousarray(dequantise(extra, table_q).T)
    return found


def decode_end2end(
    plan: Plan, outputs: Sequence[Tensor], quant: Sequence[Quant | None], conf: float
) -> Found:
    """[1, N, 6 + extras]: x1, y1, x2, y2 (obb: cx, cy, w, h) in input pixels, score, class, then
    mask coefficients / keypoints / the angle; already NMS-ed by the model."""
    table, q = outputs[plan.table], quant[plan.table]
    rows = table.reshape(-1, table.shape[-1])
    rows_at = np.flatnonzero(rows[:, 4] >= quantised_floor(conf, q, rows.dtype))
    # No early return when nothing passes: the empty arrays below still carry the task's extras
    # (mask coefficients, keypoints, angles), which the result stage expects for seg/pose/obb.
    values = dequantise(rows[rows_at], q)
    keep = values[:, 4] >= conf
    values, rows_at = values[keep], rows_at[keep]
    classes = np.where(np.isfinite(values[:, 5]), np.rint(values[:, 5]), -1).astype(np.int64)
    boxes = np.ascontiguousarray(values[:, :4])
    found = Found(boxes, np.ascontiguousarray(values[:, 4]), classes, rows_at)
    extra = values[:, 6:]
    if plan.task == "obb":
        centre, half = values[:, :2], values[:, 2:4] / 2
        found.boxes = np.concatenate([centre - half, centre + half], axis=1).astype(np.float32)
        found.angles = np.ascontiguousarray(extra[:, 0])
    elif plan.task == "pose":
        found.keypoints = keypoint_triples(extra.reshape(len(values), *plan.keypoint_shape))
    elif plan.task == "segment":
        found.coefficients = np.ascontiguousarray(extra)
    return found
