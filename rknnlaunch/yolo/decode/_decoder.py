"""The decoder of one fixed layout (`Decoder`) and `make_decoder`, the factory every decoder comes from.

A call checks the outputs, runs the layout's candidate stage, NMS (or top-k), and maps the kept
detections (boxes, keypoints, masks) into source-image pixels."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..._errors import ModelError, UsageError
from .._nms import nms
from .._rotated import nms_rotated
from .._types import Detections, LetterboxInfo
from ..layouts import Layout, Plan, Task, class_names, plan_layout
from ._candidates import Found, keep_finite, mask_channels
from ._dfl import decode_split
from ._masks import MaskResolution, Protos, proto_masks, source_masks, source_region
from ._quant import Quant, Tensor, dequantise
from ._tables import decode_end2end, decode_table
from ._yolov5 import decode_yolov5

log = logging.getLogger("rknnlaunch.yolo")


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
        check_thresholds(conf, iou)
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
                dequantise(output[:0], None)  # raises the "no zero point/scale" UsageError

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

    def candidates(self, outputs: Sequence[Tensor], info: LetterboxInfo | None = None) -> Found:
        """Threshold-passing candidates in model-input pixels, before NMS (for tests/benchmarks)."""
        self._check(outputs)
        plan, quant, conf = self.plan, self.quant, self.conf
        size = self._input_size(outputs, info)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # NaN/Inf: dropped below
            if plan.layout.startswith("end2end"):
                found = decode_end2end(plan, outputs, quant, conf)
            elif plan.layout == "rknn-yolov5":
                found = decode_yolov5(plan, outputs, quant, conf, size)
            elif plan.branches:
                found = decode_split(plan, outputs, quant, conf, size)
            else:
                found = decode_table(plan, outputs, quant, conf)
        found, dropped = keep_finite(found, plan.num_classes)
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

    def _result(self, kept: Found, outputs: Sequence[Tensor], info: LetterboxInfo | None) -> Detections:
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
                coefficients = np.zeros((len(kept.scores), mask_channels(plan)), np.float32)
            protos = self._protos(outputs, plan.protos)
            width, height = self._input_size(outputs, info)
            # A broken model's values near float32's limit overflow the logits to +-Inf (NaN for
            # Inf - Inf): such a pixel is masked by its sign, or not at all. Said once per call, not
            # per box: an errstate costs about as much as one box's matmul.
            with np.errstate(over="ignore", invalid="ignore"):
                if self.masks == "image" and info is not None:
                    masks = source_masks(coefficients, protos, boxes, info)
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


def check_thresholds(conf: float, iou: float) -> None:
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
