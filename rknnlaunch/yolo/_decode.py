"""YOLOv8 output decoding for the three layouts in use, float or int8, into `Detections`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from .._errors import UsageError
from ._nms import nms
from ._types import Detections, LetterboxInfo

Layout = Literal["rknn-9", "rknn-6", "ultralytics"]
"""``rknn-9``: rknn_model_zoo export, per stride box (4 x DFL bins), class scores, score_sum.
``rknn-6``: the same without score_sum. ``ultralytics``: one [1, 4 + nc, N] output (cx, cy, w, h,
then class scores, in input pixels)."""

LAYOUTS: tuple[Layout, ...] = ("rknn-9", "rknn-6", "ultralytics")

FloatArray = npt.NDArray[np.float32]
Tensor = npt.NDArray[Any]
"""A raw model output: float32/float16, or int8/uint8/int16 with a `Quant`."""


class Quant(NamedTuple):
    """Affine int8/uint8 quantisation of one output tensor: real = (q - zero_point) * scale."""

    zero_point: int
    scale: float


def detect_layout(shapes: Sequence[tuple[int, ...]]) -> Layout:
    """Which layout a model's output shapes are (raises `UsageError` for anything else)."""
    if len(shapes) == 1 and len(shapes[0]) in (2, 3):
        shape = shapes[0][-2:]
        if min(shape) >= 5:
            return "ultralytics"
    if len(shapes) in (6, 9) and all(len(s) == 4 for s in shapes):
        per_branch = len(shapes) // 3
        heads_ok = all(shapes[i][1] % 4 == 0 for i in range(0, len(shapes), per_branch))
        sums_ok = per_branch == 2 or all(shapes[i][1] == 1 for i in range(2, len(shapes), 3))
        if heads_ok and sums_ok:
            return "rknn-9" if per_branch == 3 else "rknn-6"
    raise UsageError(
        f"model outputs {[list(s) for s in shapes]} are not a YOLOv8 layout we can decode",
        "export with rknn_model_zoo (9 or 6 outputs: box [1,64,H,W], scores [1,nc,H,W], optional "
        "score_sum [1,1,H,W] per stride) or ultralytics (one [1, 4+nc, N] output)",
    )


def class_count(shapes: Sequence[tuple[int, ...]]) -> int:
    """How many classes a YOLOv8 model predicts, from its output shapes (`UsageError` if not YOLOv8)."""
    if detect_layout(shapes) == "ultralytics":  # [1, 4 + nc, N] or [1, N, 4 + nc]
        return int(min(shapes[0][-2:]) - 4)
    return int(shapes[1][1])  # rknn_model_zoo: class scores [1, nc, H, W] follow each box head


@dataclass(frozen=True)
class _Candidates:
    boxes: FloatArray  # K x 4 xyxy, input pixels
    scores: FloatArray
    class_ids: npt.NDArray[np.int64]


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
    if quant is None or np.issubdtype(dtype, np.floating):
        return threshold
    if quant.scale <= 0:
        raise UsageError(f"quantisation scale {quant.scale} is not positive", "pass the model's output scale")
    return math.floor(threshold / quant.scale + quant.zero_point) - 1


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


def _decode_rknn(
    outputs: Sequence[Tensor],
    per_branch: int,
    input_width: int,
    input_height: int,
    conf_threshold: float,
    quant: Sequence[Quant | None],
) -> _Candidates:
    boxes: list[FloatArray] = []
    scores: list[FloatArray] = []
    classes: list[npt.NDArray[np.int64]] = []
    for first in range(0, len(outputs), per_branch):
        box_t, cls_t = outputs[first], outputs[first + 1]
        box_q, cls_q = quant[first], quant[first + 1]
        channels, height, width = box_t.shape[1], box_t.shape[2], box_t.shape[3]
        classes_count = cls_t.shape[1]
        cls2d = cls_t.reshape(classes_count, height * width)
        cls_floor = _quantised_floor(conf_threshold, cls_q, cls_t.dtype)
        if per_branch == 3:
            # score_sum >= every single class score, so anchors below the threshold are skipped
            # without looking at their class scores at all.
            sum_t, sum_q = outputs[first + 2], quant[first + 2]
            sum_floor = _quantised_floor(conf_threshold, sum_q, sum_t.dtype)
            anchors = np.flatnonzero(sum_t.reshape(-1) >= sum_floor)
            if anchors.size == 0:
                continue
            picked = cls2d[:, anchors]
            anchors = anchors[picked.max(axis=0) >= cls_floor]
            if anchors.size == 0:
                continue
            picked = _dequantise(cls2d[:, anchors], cls_q)
        else:
            anchors = np.flatnonzero(cls2d.max(axis=0) >= cls_floor)
            if anchors.size == 0:
                continue
            picked = _dequantise(cls2d[:, anchors], cls_q)
        best_class = picked.argmax(axis=0)
        best_score = picked[best_class, np.arange(anchors.size)]
        passed = best_score >= conf_threshold
        if not passed.all():
            anchors, best_class, best_score = anchors[passed], best_class[passed], best_score[passed]
            if anchors.size == 0:
                continue
        logits = _dequantise(box_t.reshape(4, channels // 4, height * width)[:, :, anchors], box_q)
        dist = dfl_distances(logits)
        stride_x, stride_y = input_width / width, input_height / height
        centre_x = (anchors % width).astype(np.float32) + np.float32(0.5)
        centre_y = (anchors // width).astype(np.float32) + np.float32(0.5)
        xyxy = np.empty((anchors.size, 4), np.float32)
        xyxy[:, 0] = (centre_x - dist[0]) * np.float32(stride_x)
        xyxy[:, 1] = (centre_y - dist[1]) * np.float32(stride_y)
        xyxy[:, 2] = (centre_x + dist[2]) * np.float32(stride_x)
        xyxy[:, 3] = (centre_y + dist[3]) * np.float32(stride_y)
        boxes.append(xyxy)
        scores.append(best_score.astype(np.float32, copy=False))
        classes.append(best_class.astype(np.int64, copy=False))
    if not boxes:
        empty = Detections.empty()
        return _Candidates(empty.boxes, empty.scores, empty.class_ids)
    return _Candidates(np.concatenate(boxes), np.concatenate(scores), np.concatenate(classes))


def _decode_ultralytics(output: Tensor, conf_threshold: float, quant: Quant | None) -> _Candidates:
    table = output.reshape(output.shape[-2], output.shape[-1])
    if table.shape[0] > table.shape[1]:  # [N, 4 + nc] exports: view it as [4 + nc, N]
        table = table.T
    class_scores = table[4:]
    floor = _quantised_floor(conf_threshold, quant, table.dtype)
    anchors = np.flatnonzero(class_scores.max(axis=0) >= floor)
    if anchors.size == 0:
        empty = Detections.empty()
        return _Candidates(empty.boxes, empty.scores, empty.class_ids)
    picked = _dequantise(class_scores[:, anchors], quant)
    best_class = picked.argmax(axis=0)
    best_score = picked[best_class, np.arange(anchors.size)]
    passed = best_score >= conf_threshold
    anchors, best_class, best_score = anchors[passed], best_class[passed], best_score[passed]
    cxcywh = _dequantise(table[:4, anchors], quant)
    xyxy = np.empty((anchors.size, 4), np.float32)
    half_w, half_h = cxcywh[2] * np.float32(0.5), cxcywh[3] * np.float32(0.5)
    xyxy[:, 0] = cxcywh[0] - half_w
    xyxy[:, 1] = cxcywh[1] - half_h
    xyxy[:, 2] = cxcywh[0] + half_w
    xyxy[:, 3] = cxcywh[1] + half_h
    return _Candidates(xyxy, best_score.astype(np.float32), best_class.astype(np.int64))


class YoloDecoder:
    """Turns raw YOLOv8 outputs into `Detections` in original-image pixels.

    ``layout`` None detects it from the output shapes on each call. ``quant`` gives one `Quant` (or
    None for float outputs) per output, in output order, for int8/uint8 outputs.
    """

    def __init__(
        self,
        conf_threshold: float = 0.25,
        iou_threshold: float = 0.45,
        max_detections: int = 300,
        layout: Layout | None = None,
        quant: Sequence[Quant | None] | None = None,
    ) -> None:
        if not 0.0 <= conf_threshold <= 1.0 or not 0.0 <= iou_threshold <= 1.0:
            raise UsageError(
                f"thresholds must lie in 0..1 (confidence {conf_threshold}, IoU {iou_threshold})",
                "use e.g. --conf 0.25 --iou 0.45",
            )
        if layout is not None and layout not in LAYOUTS:
            raise UsageError(f"unknown YOLO output layout {layout!r}", f"use one of {', '.join(LAYOUTS)}")
        self.conf_threshold = conf_threshold
        self.iou_threshold = iou_threshold
        self.max_detections = max_detections
        self.layout = layout
        self.quant = None if quant is None else tuple(quant)

    def __call__(self, outputs: Sequence[Tensor], info: LetterboxInfo | None = None) -> Detections:
        outputs = list(outputs)
        layout = self.layout or detect_layout([tuple(o.shape) for o in outputs])
        quant: Sequence[Quant | None] = self.quant if self.quant is not None else (None,) * len(outputs)
        if len(quant) != len(outputs):
            raise UsageError(
                f"{len(quant)} quantisation entries for {len(outputs)} outputs",
                "give one Quant (or None) per output, in output order",
            )
        for output, entry in zip(outputs, quant, strict=True):
            if entry is None and not np.issubdtype(output.dtype, np.floating):
                _dequantise(output[:0], None)  # raises the "no zero point/scale" error
        if layout == "ultralytics":
            found = _decode_ultralytics(outputs[0], self.conf_threshold, quant[0])
        else:
            per_branch = 3 if layout == "rknn-9" else 2
            if len(outputs) != 3 * per_branch:
                raise UsageError(
                    f"layout {layout} needs {3 * per_branch} outputs, the model gave {len(outputs)}",
                    "check the model's export or pass the right layout",
                )
            if info is not None:
                input_width, input_height = info.input_width, info.input_height
            else:  # no letterbox info: the largest grid is stride 8
                input_height, input_width = outputs[0].shape[2] * 8, outputs[0].shape[3] * 8
            found = _decode_rknn(outputs, per_branch, input_width, input_height, self.conf_threshold, quant)
        keep = nms(found.boxes, found.scores, found.class_ids, self.iou_threshold, self.max_detections)
        boxes = found.boxes[keep]
        if info is not None:
            info.to_source(boxes)
        return Detections(boxes, found.scores[keep], found.class_ids[keep])


def postprocess(
    outputs: Sequence[Tensor],
    info: LetterboxInfo | None = None,
    *,
    conf_threshold: float = 0.25,
    iou_threshold: float = 0.45,
    max_detections: int = 300,
    layout: Layout | None = None,
    quant: Sequence[Quant | None] | None = None,
) -> Detections:
    """One-shot `YoloDecoder` call."""
    decoder = YoloDecoder(conf_threshold, iou_threshold, max_detections, layout, quant)
    return decoder(outputs, info)
