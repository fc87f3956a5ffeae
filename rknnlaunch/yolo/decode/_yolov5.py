"""Candidates of rknn_model_zoo YOLOv5 heads: anchor-based, objectness x class, per stride."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..layouts import Plan
from ._candidates import Found, empty_found
from ._quant import Quant, Tensor, dequantise, quantised_floor


def decode_yolov5(
    plan: Plan, outputs: Sequence[Tensor], quant: Sequence[Quant | None], conf: float, size: tuple[int, int]
) -> Found:
    """rknn_model_zoo YOLOv5: per stride [1, A*(5+nc), H, W], already sigmoid-ed; score = obj x class."""
    parts: list[Found] = []
    nc = plan.num_classes
    for rank, branch in enumerate(plan.branches):
        tensor, q = outputs[branch.box], quant[branch.box]
        cells = branch.height * branch.width
        anchors_wh = plan.anchors[rank]
        per = tensor.reshape(len(anchors_wh), 5 + nc, cells)
        objectness = per[:, 4, :]  # A x cells
        # score = objectness x class <= objectness: anchors below the threshold are skipped first.
        a_idx, cell = np.nonzero(objectness >= quantised_floor(conf, q, tensor.dtype))
        if a_idx.size == 0:
            continue
        obj = dequantise(objectness[a_idx, cell], q)
        cls = dequantise(per[a_idx, 5:, cell], q)  # K x nc
        best = cls.argmax(axis=1)
        score = obj * cls[np.arange(a_idx.size), best]
        keep = score >= conf
        a_idx, cell, best, score = a_idx[keep], cell[keep], best[keep], score[keep]
        if a_idx.size == 0:
            continue
        xywh = dequantise(per[a_idx, :4, cell], q)  # K x 4
        stride_x, stride_y = size[0] / branch.width, size[1] / branch.height
        gx = (cell % branch.width).astype(np.float32)
        gy = (cell // branch.width).astype(np.float32)
        cx = (xywh[:, 0] * 2 - np.float32(0.5) + gx) * np.float32(stride_x)
        cy = (xywh[:, 1] * 2 - np.float32(0.5) + gy) * np.float32(stride_y)
        wh = np.asarray(anchors_wh, np.float32)[a_idx]
        w = (xywh[:, 2] * 2) ** 2 * wh[:, 0]
        h = (xywh[:, 3] * 2) ** 2 * wh[:, 1]
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float32)
        global_anchor = (branch.offset + cell) * len(anchors_wh) + a_idx
        parts.append(Found(boxes, score.astype(np.float32), best.astype(np.int64), global_anchor))
    if not parts:
        return empty_found(plan)
    return Found(
        np.concatenate([p.boxes for p in parts]),
        np.concatenate([p.scores for p in parts]),
        np.concatenate([p.class_ids for p in parts]),
        np.concatenate([p.anchors for p in parts]),
    )
