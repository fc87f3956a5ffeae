"""YOLO output decoding for every layout in `_layouts` (float or int8/uint8), into `Detections`.

`make_decoder` is the one factory: shapes (+ metadata) -> a `Decoder` whose call turns one
frame's raw outputs into detections in source-image pixels; `YoloDecoder` (what the SDK and CLI
use) makes one per set of output shapes it sees. Thresholds are ``conf`` and ``iou`` everywhere.
They are applied before anything per anchor is computed (in the quantised domain for integer
outputs), box/keypoint/angle/mask work is done only for the survivors, masks only for the boxes
NMS kept. Nothing above the threshold gives an empty `Detections` with the task's fields.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from .._errors import ModelError, UsageError
from ._layouts import (
    LAYOUTS,
    Layout,
    Plan,
    Task,
    class_count,
    class_names,
    detect_layout,
    parse_layout,
    plan_layout,
)
from ._masks import MaskResolution, Protos, image_masks, proto_masks, source_region
from ._nms import nms
from ._rotated import nms_rotated
from ._types import Detections, LetterboxInfo

__all__ = [
    "LAYOUTS",
    "Decoder",
    "Layout",
    "Quant",
    "YoloDecoder",
    "class_count",
    "detect_layout",
    "dfl_distances",
    "make_decoder",
    "postprocess",
]

log = logging.getLogger("rknnlaunch.yolo")

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
Tensor = npt.NDArray[Any]
"""A raw model output: float32/float16, or int8/uint8/int16 with a `Quant`."""


class Quant(NamedTuple):
    """Affine int8/uint8 quantisation of one output tensor: real = (q - zero_point) * scale."""

    zero_point: int
    scale: float


def _dequantise(values: Tensor, quant: Quant | None) -> FloatArray:
    if quant is None:
        if not np.issubdtype(values.dtype, np.floating):
            raise UsageError(
                f"an output is {values.dtype} but no zero point/scale was given for it",
                "pass quant=[Quant(zero_point, scale), ...] (one per output) or request float outputs",
            )
        return np.asarray(values, np.float32)
    return (values.astype(np.float32) - np.float32(quant.zero_point)) * np.float32(quant.scale)


def _quantised_floor(threshold: float, quant: Quant | None, dtype: np.dtype[np.generic]) -> float:
    """A threshold in the tensor's own domain that lets through everything >= ``threshold`` after
    dequantisation (one step lower to be safe; exact filtering happens later in float)."""
    if quant is None or np.issubdtype(dtype, np.floating) or not math.isfinite(threshold):
        return threshold
    return math.floor(threshold / quant.scale + quant.zero_point) - 1


def _logit(p: float) -> float:
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return math.log(p / (1.0 - p))


def _sigmoid(x: FloatArray) -> FloatArray:
    with np.errstate(over="ignore"):
        return np.asarray(1.0 / (1.0 + np.exp(-x)), np.float32)


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


@dataclass
class _Found:
    """Candidates above the threshold, in model-input pixels."""

    boxes: FloatArray  # K x 4 xyxy (obb: the unrotated box)
    scores: FloatArray
    class_ids: npt.NDArray[np.int64]
    anchors: IntArray  # global anchor index (stride order) or table column
    angles: FloatArray | None = None
    keypoints: FloatArray | None = None  # K x kpts x 3
    coefficients: FloatArray | None = None  # K x nm

    def take(self, index: IntArray | npt.NDArray[np.bool_]) -> _Found:
        def pick(a: Any) -> Any:
            return None if a is None else a[index]

        return _Found(
            self.boxes[index],
            self.scores[index],
            self.class_ids[index],
            self.anchors[index],
            pick(self.angles),
            pick(self.keypoints),
            pick(self.coefficients),
        )


def _empty_found(plan: Plan) -> _Found:
    """No candidates, with the plan's task extras present and empty (masks/keypoints/angles are
    then empty arrays in the result, as for a frame whose candidates NMS removed)."""
    found = _Found(
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
        found.coefficients = np.zeros((0, _mask_channels(plan)), np.float32)
    return found


def _mask_channels(plan: Plan) -> int:
    """Mask coefficients per detection: the protos' channel count."""
    if plan.protos is None:
        return plan.mask_channels
    return int(plan.shapes[plan.protos][-3])


def _best_class(
    cls2d: Tensor,
    anchors: IntArray,
    quant: Quant | None,
    conf: float,
    logits: bool,
    raw: Tensor | None = None,
) -> tuple[IntArray, npt.NDArray[np.int64], FloatArray]:
    """The best class and its score per anchor, keeping anchors whose score reaches ``conf``
    (``raw``: the anchors' class scores when already gathered)."""
    picked = _dequantise(cls2d[:, anchors] if raw is None else raw, quant)
    best_class = picked.argmax(axis=0)
    best_score = picked[best_class, np.arange(anchors.size)]
    if logits:
        best_score = _sigmoid(best_score)
    passed = best_score >= conf
    if not passed.all():
        anchors, best_class, best_score = anchors[passed], best_class[passed], best_score[passed]
    return anchors, best_class.astype(np.int64, copy=False), best_score.astype(np.float32, copy=False)


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


def _decode_split(
    plan: Plan, outputs: Sequence[Tensor], quant: Sequence[Quant | None], conf: float, size: tuple[int, int]
) -> _Found:
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
        cls_floor = _quantised_floor(threshold, cls_q, cls2d.dtype)
        if branch.score_sum is not None and plan.layout != "rknn-yolov10":
            # score_sum >= every single class score, so anchors below the threshold are skipped
            # without looking at their class scores at all.
            sum_t, sum_q = outputs[branch.score_sum], quant[branch.score_sum]
            anchors = np.flatnonzero(sum_t.reshape(-1) >= _quantised_floor(threshold, sum_q, sum_t.dtype))
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
        anchors, classes, scores = _best_class(cls2d, anchors, cls_q, conf, plan.class_logits, raw)
        if anchors.size == 0:
            continue
        dist = dfl_distances(_dequantise(box2d.reshape(4, plan.bins, cells)[:, :, anchors], box_q))
        angles = None
        if angle_t is not None:
            raw = _dequantise(angle_t[anchors + branch.offset], quant[plan.angles or 0])
            angles = (raw - np.float32(0.25)) * np.float32(math.pi)
        stride_x, stride_y = size[0] / branch.width, size[1] / branch.height
        boxes = _branch_boxes(dist, anchors, branch.width, stride_x, stride_y, angles)
        parts.append((boxes, scores, classes, anchors + branch.offset, angles))
    if not parts:
        return _empty_found(plan)
    if len(parts) == 1:
        boxes, scores, classes, anchors, angles = parts[0]
        found = _Found(boxes, scores, classes, anchors, angles)
    else:
        found = _Found(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
            np.concatenate([p[3] for p in parts]),
            None if angle_t is None else np.concatenate([p[4] for p in parts if p[4] is not None]),
        )
    if plan.keypoints is not None:
        kpt_t = outputs[plan.keypoints]
        raw = _dequantise(
            kpt_t.reshape(kpt_t.shape[1], kpt_t.shape[2], -1)[:, :, found.anchors], quant[plan.keypoints]
        )
        found.keypoints = _keypoint_triples(raw.transpose(2, 0, 1))
    if plan.protos is not None:
        found.coefficients = _gather_coefficients(plan, outputs, quant, found.anchors)
    return found


def _keypoint_triples(raw: FloatArray) -> FloatArray:
    """K x kpts x (2 or 3) -> K x kpts x 3 (visibility 1 when the model gives only x, y)."""
    if raw.shape[2] == 3:
        return np.ascontiguousarray(raw, np.float32)
    out = np.ones((*raw.shape[:2], 3), np.float32)
    out[:, :, :2] = raw
    return out


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
            out[inside] = _dequantise(coef_t[:, local], quant[branch.coefficients]).T
    return out


def _table_view(plan: Plan, output: Tensor) -> Tensor:
    table = output.reshape(output.shape[-2], output.shape[-1])
    return table.T if plan.channels_last else table


def _decode_table(
    plan: Plan, outputs: Sequence[Tensor], quant: Sequence[Quant | None], conf: float
) -> _Found:
    """Ultralytics single table [4 + nc + extras, N]: cx, cy, w, h (input pixels), class scores."""
    table, table_q = _table_view(plan, outputs[plan.table]), quant[plan.table]
    nc = plan.num_classes
    class_scores = table[4 : 4 + nc]
    floor = _quantised_floor(conf, table_q, table.dtype)
    anchors = np.flatnonzero(class_scores.max(axis=0) >= floor)
    if anchors.size == 0:
        return _empty_found(plan)
    anchors, classes, scores = _best_class(class_scores, anchors, table_q, conf, False)
    cxcywh = _dequantise(table[:4, anchors], table_q)
    boxes = np.empty((anchors.size, 4), np.float32)
    half_w, half_h = cxcywh[2] * np.float32(0.5), cxcywh[3] * np.float32(0.5)
    boxes[:, 0] = cxcywh[0] - half_w
    boxes[:, 1] = cxcywh[1] - half_h
    boxes[:, 2] = cxcywh[0] + half_w
    boxes[:, 3] = cxcywh[1] + half_h
    found = _Found(boxes, scores, classes, anchors)
    extra = table[4 + nc :, anchors]
    if plan.task == "obb":
        found.angles = _dequantise(extra[0], table_q)
    elif plan.task == "pose":
        count, per = plan.keypoint_shape
        raw = _dequantise(extra, table_q).reshape(count, per, anchors.size)
        found.keypoints = _keypoint_triples(raw.transpose(2, 0, 1))
    elif plan.task == "segment":
        found.coefficients = np.ascontiguousarray(_dequantise(extra, table_q).T)
    return found


def _decode_yolov5(
    plan: Plan, outputs: Sequence[Tensor], quant: Sequence[Quant | None], conf: float, size: tuple[int, int]
) -> _Found:
    """rknn_model_zoo YOLOv5: per stride [1, A*(5+nc), H, W], already sigmoid-ed; score = obj x class."""
    parts: list[_Found] = []
    nc = plan.num_classes
    for rank, branch in enumerate(plan.branches):
        tensor, q = outputs[branch.box], quant[branch.box]
        cells = branch.height * branch.width
        anchors_wh = plan.anchors[rank]
        per = tensor.reshape(len(anchors_wh), 5 + nc, cells)
        objectness = per[:, 4, :]  # A x cells
        # score = objectness x class <= objectness: anchors below the threshold are skipped first.
        a_idx, cell = np.nonzero(objectness >= _quantised_floor(conf, q, tensor.dtype))
        if a_idx.size == 0:
            continue
        obj = _dequantise(objectness[a_idx, cell], q)
        cls = _dequantise(per[a_idx, 5:, cell], q)  # K x nc
        best = cls.argmax(axis=1)
        score = obj * cls[np.arange(a_idx.size), best]
        keep = score >= conf
        a_idx, cell, best, score = a_idx[keep], cell[keep], best[keep], score[keep]
        if a_idx.size == 0:
            continue
        xywh = _dequantise(per[a_idx, :4, cell], q)  # K x 4
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
        parts.append(_Found(boxes, score.astype(np.float32), best.astype(np.int64), global_anchor))
    if not parts:
        return _empty_found(plan)
    return _Found(
        np.concatenate([p.boxes for p in parts]),
        np.concatenate([p.scores for p in parts]),
        np.concatenate([p.class_ids for p in parts]),
        np.concatenate([p.anchors for p in parts]),
    )


def _decode_end2end(
    plan: Plan, outputs: Sequence[Tensor], quant: Sequence[Quant | None], conf: float
) -> _Found:
    """[1, N, 6 + extras]: x1, y1, x2, y2 (obb: cx, cy, w, h) in input pixels, score, class, then
    mask coefficients / keypoints / the angle; already NMS-ed by the model."""
    table, q = outputs[plan.table], quant[plan.table]
    rows = table.reshape(-1, table.shape[-1])
    rows_at = np.flatnonzero(rows[:, 4] >= _quantised_floor(conf, q, rows.dtype))
    # No early return when nothing passes: the empty arrays below still carry the task's extras
    # (mask coefficients, keypoints, angles), which the result stage expects for seg/pose/obb.
    values = _dequantise(rows[rows_at], q)
    keep = values[:, 4] >= conf
    values, rows_at = values[keep], rows_at[keep]
    classes = np.where(np.isfinite(values[:, 5]), np.rint(values[:, 5]), -1).astype(np.int64)
    boxes = np.ascontiguousarray(values[:, :4])
    found = _Found(boxes, np.ascontiguousarray(values[:, 4]), classes, rows_at)
    extra = values[:, 6:]
    if plan.task == "obb":
        centre, half = values[:, :2], values[:, 2:4] / 2
        found.boxes = np.concatenate([centre - half, centre + half], axis=1).astype(np.float32)
        found.angles = np.ascontiguousarray(extra[:, 0])
    elif plan.task == "pose":
        found.keypoints = _keypoint_triples(extra.reshape(len(values), *plan.keypoint_shape))
    elif plan.task == "segment":
        found.coefficients = np.ascontiguousarray(extra)
    return found


def _finite(found: _Found, num_classes: int) -> tuple[_Found, int]:
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


class Decoder:
    """Raw outputs of one model -> `Detections` in source-image pixels, for one fixed layout.

    Made by `make_decoder` for a set of output shapes; calling it with outputs of other shapes is
    a `ModelError`. ``note`` says which other layouts fit the same shapes (None if none).
    Stateless across frames apart from counting dropped non-finite candidates, so one decoder
    may be shared by threads.
    """

    def __init__(
        self,
        plan: Plan,
        *,
        conf: float = 0.25,
        iou: float = 0.45,
        max_detections: int = 300,
        quant: Sequence[Quant | None] | None = None,
        masks: MaskResolution = "proto",
        names: Sequence[str] | None = None,
    ) -> None:
        _check_thresholds(conf, iou)
        if masks not in ("proto", "image"):
            raise UsageError(f"unknown mask resolution {masks!r}", "use 'proto' or 'image'")
        if quant is not None and len(quant) != len(plan.shapes):
            raise UsageError(
                f"{len(quant)} quantisation entries for {len(plan.shapes)} outputs",
                "give one Quant (or None) per output, in output order",
            )
        for entry in quant or ():
            if entry is not None and not (entry.scale > 0 and math.isfinite(entry.scale)):
                raise UsageError(
                    f"quantisation scale {entry.scale} is not positive", "pass the model's output scale"
                )
        self.plan = plan
        self.layout: Layout = plan.layout
        self.task: Task = plan.task
        self.note = plan.note
        self.conf = conf
        self.iou = iou
        self.max_detections = max_detections
        self.quant: tuple[Quant | None, ...] = (
            tuple(quant) if quant is not None else (None,) * len(plan.shapes)
        )
        self.masks: MaskResolution = masks
        self.names = tuple(names) if names is not None else None
        self.dropped_non_finite = 0
        self._end2end_float = plan.layout == "end2end" and all(q is None for q in self.quant)
        if plan.note:
            log.info("%s", plan.note)

    def _check(self, outputs: Sequence[Tensor]) -> None:
        expected = self.plan.shapes
        if len(outputs) != len(expected):
            raise ModelError(
                f"the model gave {len(outputs)} outputs; this {self.layout} decoder was made for "
                f"{len(expected)} ({', '.join(str(list(s)) for s in expected)})",
                "make a decoder for this model's outputs (make_decoder with its output shapes)",
            )
        for index, output in enumerate(outputs):
            if output.shape != expected[index]:
                raise ModelError(
                    f"output {index} has shape {list(output.shape)}; "
                    f"the {self.layout} decoder expects {list(expected[index])}",
                    "make a decoder for this model's outputs (make_decoder with its output shapes)",
                )
            if output.dtype.kind != "f" and self.quant[index] is None:
                _dequantise(output[:0], None)  # raises the "no zero point/scale" UsageError

    def _input_size(self, outputs: Sequence[Tensor], info: LetterboxInfo | None) -> tuple[int, int]:
        if info is not None:
            return info.input_width, info.input_height
        if self.plan.input_size is not None:
            return self.plan.input_size
        if self.plan.branches:  # the largest grid is stride 8
            first = self.plan.branches[0]
            return first.width * 8, first.height * 8
        if self.plan.protos is not None:  # Ultralytics protos are a quarter of the input
            shape = self.plan.shapes[self.plan.protos]
            return shape[3] * 4, shape[2] * 4
        return 640, 640

    def candidates(self, outputs: Sequence[Tensor], info: LetterboxInfo | None = None) -> _Found:
        """Threshold-passing candidates in model-input pixels, before NMS (for tests/benchmarks)."""
        self._check(outputs)
        plan, quant, conf = self.plan, self.quant, self.conf
        size = self._input_size(outputs, info)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # NaN/Inf: dropped below
            if plan.layout.startswith("end2end"):
                found = _decode_end2end(plan, outputs, quant, conf)
            elif plan.layout == "rknn-yolov5":
                found = _decode_yolov5(plan, outputs, quant, conf, size)
            elif plan.branches:
                found = _decode_split(plan, outputs, quant, conf, size)
            else:
                found = _decode_table(plan, outputs, quant, conf)
        found, dropped = _finite(found, plan.num_classes)
        if dropped:
            self._note_dropped(dropped)
        return found

    def __call__(self, outputs: Sequence[Tensor], info: LetterboxInfo | None = None) -> Detections:
        if self._end2end_float:
            fast = self._end2end(outputs, info)
            if fast is not None:
                return fast
        return self._decode(outputs, info)

    def _decode(self, outputs: Sequence[Tensor], info: LetterboxInfo | None) -> Detections:
        outputs = list(outputs)
        found = self.candidates(outputs, info)
        plan = self.plan
        if plan.layout.startswith("end2end") or plan.layout == "rknn-yolov10":  # NMS-free: top-k
            keep = np.argsort(-found.scores, kind="stable")[: self.max_detections]
        elif found.angles is not None:
            rboxes = np.empty((len(found.scores), 5), np.float32)
            rboxes[:, 0] = (found.boxes[:, 0] + found.boxes[:, 2]) / 2
            rboxes[:, 1] = (found.boxes[:, 1] + found.boxes[:, 3]) / 2
            rboxes[:, 2] = found.boxes[:, 2] - found.boxes[:, 0]
            rboxes[:, 3] = found.boxes[:, 3] - found.boxes[:, 1]
            rboxes[:, 4] = found.angles
            keep = nms_rotated(rboxes, found.scores, found.class_ids, self.iou, self.max_detections)
        else:
            keep = nms(found.boxes, found.scores, found.class_ids, self.iou, self.max_detections)
        kept = found.take(keep)
        return self._result(kept, outputs, info)

    def _end2end(self, outputs: Sequence[Tensor], info: LetterboxInfo | None) -> Detections | None:
        """The NMS-free float [1, N, 6] head with as few numpy calls as possible (it is tiny).

        None when anything is unusual (wrong shape, NaN/Inf, impossible class ids): the general
        path then decodes (or raises) as for every other layout.
        """
        if len(outputs) != 1 or outputs[0].shape != self.plan.shapes[0] or outputs[0].dtype.kind != "f":
            return None
        rows = outputs[0][0]
        picked = rows[rows[:, 4] >= self.conf]  # NaN scores fail the comparison
        count = picked.shape[0]
        if not np.isfinite(picked).all():
            return None
        classes = picked[:, 5]
        if count and (
            classes.min() < 0 or (self.plan.num_classes and classes.max() >= self.plan.num_classes)
        ):
            return None
        if count > 1 and (picked[1:, 4] > picked[:-1, 4]).any():  # heads emit rows sorted; if not:
            picked = picked[np.argsort(-picked[:, 4], kind="stable")]
        if count > self.max_detections:
            picked = picked[: self.max_detections]
        boxes = np.array(picked[:, :4], np.float32)
        if info is not None:
            boxes -= np.array((info.pad_x, info.pad_y, info.pad_x, info.pad_y), np.float32)
            boxes *= np.array((1 / info.scale_x, 1 / info.scale_y) * 2, np.float32)
            np.clip(boxes, 0, np.array((info.source_width, info.source_height) * 2, np.float32), out=boxes)
        return Detections(
            boxes,
            np.array(picked[:, 4], np.float32),
            np.rint(picked[:, 5]).astype(np.int64),
            names=self.names,
        )

    def _note_dropped(self, dropped: int) -> None:
        if self.dropped_non_finite == 0:
            log.warning(
                "%s decoder: dropped %d candidate detection(s) with NaN/Inf values or impossible "
                "class ids in the model outputs (logged once; decoder.dropped_non_finite counts on)",
                self.layout,
                dropped,
            )
        self.dropped_non_finite += dropped

    def _result(self, kept: _Found, outputs: Sequence[Tensor], info: LetterboxInfo | None) -> Detections:
        plan = self.plan
        input_boxes = kept.boxes
        boxes = input_boxes.copy()
        keypoints = kept.keypoints
        if info is not None:
            if kept.angles is not None:  # rotated boxes are not clipped (their corners may stick out)
                points = boxes.reshape(-1, 2, 2)
                info.points_to_source(points, clip=False)
            else:
                info.to_source(boxes)
            if keypoints is not None:
                info.points_to_source(keypoints[:, :, :2])
        masks = None
        region = None
        if plan.protos is not None:
            coefficients = kept.coefficients
            if coefficients is None:  # every decode path gives seg candidates coefficients
                coefficients = np.zeros((len(kept.scores), _mask_channels(plan)), np.float32)
            protos = self._protos(outputs, plan.protos)
            width, height = self._input_size(outputs, info)
            if self.masks == "image" and info is not None:
                masks = image_masks(coefficients, protos, boxes, info)
                region = (0.0, 0.0, float(info.source_width), float(info.source_height))
            else:
                masks = proto_masks(coefficients, protos, input_boxes, width, height)
                proto_h, proto_w = protos.values.shape[1:]
                full = LetterboxInfo.identity(width, height) if info is None else info
                region = source_region(full, proto_w, proto_h)
        return Detections(
            boxes,
            kept.scores,
            kept.class_ids,
            masks=masks,
            keypoints=keypoints,
            angles=kept.angles,
            mask_region=region,
            names=self.names,
        )

    def _protos(self, outputs: Sequence[Tensor], index: int) -> Protos:
        tensor = outputs[index]
        values = tensor.reshape(tensor.shape[-3:])
        entry = self.quant[index]
        if entry is None:
            return Protos(values)
        return Protos(values, float(entry.zero_point), float(entry.scale))


def _check_thresholds(conf: float, iou: float) -> None:
    if not 0.0 <= conf <= 1.0 or not 0.0 <= iou <= 1.0:
        raise UsageError(
            f"thresholds must lie in 0..1 (confidence {conf}, IoU {iou})",
            "use e.g. --conf 0.25 --iou 0.45",
        )


def make_decoder(
    output_shapes: Sequence[Sequence[int]],
    metadata: Mapping[str, Any] | None = None,
    *,
    layout: Layout | None = None,
    task: Task | str | None = None,
    conf: float = 0.25,
    iou: float = 0.45,
    max_detections: int = 300,
    quant: Sequence[Quant | None] | None = None,
    anchors: Any = None,
    masks: MaskResolution = "proto",
) -> Decoder:
    """The decoder for a model with these output shapes: the one factory every decoder comes from
    (`YoloDecoder`, hence `Detector`, `detect`, `bench` and `validate`, builds one per shape set).

    ``metadata``: the model's metadata (optional keys ``task``, ``names``, ``imgsz``, ``stride``,
    ``layout``, ``kpt_shape``, ``anchors``, ``end2end``). ``layout`` forces a layout, ``task``
    narrows detection to one task. ``quant``: one `Quant` (or None for float outputs) per output.
    ``anchors``: YOLOv5 anchors (3 strides x A x (w, h)) instead of the standard ones.
    ``masks``: "proto" (masks at the protos' resolution, default) or "image" (source size).

    Raises `ModelError` when the shapes are no layout we decode (or not the forced one), naming
    the tensor, its shape and what was expected; `UsageError` for bad settings.
    """
    shapes = [tuple(int(d) for d in s) for s in output_shapes]
    plan = plan_layout(shapes, metadata, layout=layout, task=task, anchors=anchors)
    return Decoder(
        plan,
        conf=conf,
        iou=iou,
        max_detections=max_detections,
        quant=quant,
        masks=masks,
        names=class_names(metadata),
    )


def _deprecated_threshold(old: str, new: str, value: float | None, current: float) -> float:
    """``value`` of a deprecated keyword (``conf_threshold``/``iou_threshold``), with a warning."""
    if value is None:
        return current
    warnings.warn(
        f"{old}= is deprecated; use {new}= (the name Detector, the CLI and make_decoder use)",
        DeprecationWarning,
        stacklevel=3,
    )
    return value


class YoloDecoder:
    """Turns raw YOLO outputs into `Detections` in original-image pixels (any layout).

    Detects the layout from the outputs' shapes on each call and decodes with the `make_decoder`
    decoder for them (cached per shape set): what `Detector`, `detect`, `bench` and `validate` use.
    ``conf`` / ``iou`` are the score and NMS IoU thresholds (as in `Detector` and ``--conf``/``--iou``).
    ``layout`` forces one; ``quant`` gives one `Quant` (or None for float outputs) per output, in
    output order, for int8/uint8 outputs. ``conf_threshold`` / ``iou_threshold`` are deprecated
    spellings of ``conf`` / ``iou``.
    """

    def __init__(
        self,
        conf: float = 0.25,
        iou: float = 0.45,
        max_detections: int = 300,
        layout: Layout | None = None,
        quant: Sequence[Quant | None] | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        task: Task | str | None = None,
        masks: MaskResolution = "proto",
        conf_threshold: float | None = None,
        iou_threshold: float | None = None,
    ) -> None:
        conf = _deprecated_threshold("conf_threshold", "conf", conf_threshold, conf)
        iou = _deprecated_threshold("iou_threshold", "iou", iou_threshold, iou)
        _check_thresholds(conf, iou)
        if layout is not None:
            parse_layout(layout)
        self.conf = conf
        self.iou = iou
        self.max_detections = max_detections
        self.layout = layout
        self.quant = None if quant is None else tuple(quant)
        self.metadata = metadata
        self.task = task
        self.masks: MaskResolution = masks
        self._decoders: dict[tuple[tuple[int, ...], ...], Decoder] = {}

    @property
    def conf_threshold(self) -> float:
        """Deprecated: ``conf``."""
        return self.conf

    @property
    def iou_threshold(self) -> float:
        """Deprecated: ``iou``."""
        return self.iou

    def decoder_for(self, shapes: Sequence[Sequence[int]]) -> Decoder:
        key = tuple(tuple(int(d) for d in s) for s in shapes)
        decoder = self._decoders.get(key)
        if decoder is None:
            decoder = make_decoder(
                key,
                self.metadata,
                layout=self.layout,
                task=self.task,
                conf=self.conf,
                iou=self.iou,
                max_detections=self.max_detections,
                quant=self.quant,
                masks=self.masks,
            )
            self._decoders[key] = decoder
        return decoder

    def __call__(self, outputs: Sequence[Tensor], info: LetterboxInfo | None = None) -> Detections:
        key = tuple(o.shape for o in outputs)
        decoder = self._decoders.get(key) or self.decoder_for(key)
        return decoder(outputs, info)


def postprocess(
    outputs: Sequence[Tensor],
    info: LetterboxInfo | None = None,
    *,
    conf: float = 0.25,
    iou: float = 0.45,
    max_detections: int = 300,
    layout: Layout | None = None,
    quant: Sequence[Quant | None] | None = None,
    metadata: Mapping[str, Any] | None = None,
    task: Task | str | None = None,
    masks: MaskResolution = "proto",
    conf_threshold: float | None = None,
    iou_threshold: float | None = None,
) -> Detections:
    """``YoloDecoder(...)(outputs, info)`` in one call (one frame; keep a `YoloDecoder` in loops).
    ``conf_threshold`` / ``iou_threshold`` are deprecated spellings of ``conf`` / ``iou``."""
    conf = _deprecated_threshold("conf_threshold", "conf", conf_threshold, conf)
    iou = _deprecated_threshold("iou_threshold", "iou", iou_threshold, iou)
    decoder = YoloDecoder(conf, iou, max_detections, layout, quant, metadata=metadata, task=task, masks=masks)
    return decoder(outputs, info)
