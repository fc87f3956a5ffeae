"""`YoloDecoder` (any layout: a `make_decoder` decoder per set of output shapes) and `postprocess`.

`YoloDecoder` is what `Detector` and the CLI use; `postprocess` is one frame in one call. Both
take the deprecated threshold spellings."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .._types import Detections, LetterboxInfo
from ..layouts import Layout, Task, parse_layout
from ._decoder import Decoder, check_thresholds, make_decoder
from ._masks import MaskResolution
from ._quant import Quant, Tensor


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
        check_thresholds(conf, iou)
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
