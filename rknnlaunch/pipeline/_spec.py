"""`ModelPipeline`: a YOLO model file and the pre/post-processing that fits it (bench, detect, Detector)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import RknnLaunchError, UsageError
from ..model._facts import embedded_pad_and_names
from ..model._metadata import decoder_facts, input_size, model_metadata
from ..yolo._decode import YoloDecoder
from ..yolo._draw import COCO_NAMES
from ..yolo._layouts import LAYOUTS, TASKS, Plan, plan_layout
from ..yolo._letterbox import PAD_RKNN_MODEL_ZOO, PAD_ULTRALYTICS, Letterboxer
from ..yolo._masks import MaskResolution

DEFAULT_PAD = PAD_ULTRALYTICS
"""Letterbox pad when neither the converted facts nor the head layout say (most YOLO models are
trained with Ultralytics, which pads with grey 114)."""

ZOO_LAYOUT_PREFIX = "rknn-"
"""rknn_model_zoo heads (`rknn-9`, `rknn-seg`, ...): the zoo's demos letterbox with black (0)."""


@dataclass(frozen=True)
class PadChoice:
    """The letterbox pad for a model and why (`model inspect` prints the reason)."""

    value: int
    reason: str


def output_shapes(metadata: Mapping[str, Any]) -> list[tuple[int, ...]] | None:
    """The output shapes in a `model_metadata` dict, None when there are none or a shape is unknown.

    A dynamic dimension (an ONNX ``"batch"`` or ``"anchors"``) is filled as the exporter meant it:
    the batch (first) as 1, any other with the anchor count of strides 8/16/32 for the input size.
    """
    outputs = metadata.get("outputs")
    if not isinstance(outputs, list) or not outputs:
        return None
    width, height = input_size(metadata)
    anchors = sum((width // s) * (height // s) for s in (8, 16, 32))
    shapes: list[tuple[int, ...]] = []
    for tensor in outputs:
        shape = tensor.get("shape") if isinstance(tensor, dict) else None
        if not isinstance(shape, list) or not shape:
            return None
        dims = [
            d if isinstance(d, int) and d > 0 else (1 if i == 0 else anchors) for i, d in enumerate(shape)
        ]
        shapes.append(tuple(dims))
    return shapes


def head_plan(metadata: Mapping[str, Any]) -> Plan | None:
    """The YOLO decode plan of a model file from its recorded output shapes and metadata (None if
    the file records no shapes or they are no layout we decode)."""
    shapes = output_shapes(metadata)
    if shapes is None:
        return None
    try:
        return plan_layout(shapes, decoder_facts(metadata))
    except RknnLaunchError:
        return None


def head_layout(metadata: Mapping[str, Any]) -> str | None:
    """The YOLO output layout of a model file (`head_plan`), None if not known."""
    plan = head_plan(metadata)
    return None if plan is None else plan.layout


def choose_pad(metadata: Mapping[str, Any], forced: int | None = None) -> PadChoice:
    """One pad rule for .onnx and .rknn alike, by the model's origin (docs/yolo.md#letterbox-pad):
    ``--pad``/``pad=`` when given; else the pad `rknnlaunch convert` embedded; else the head
    layout (Ultralytics heads 114, rknn_model_zoo heads 0); else `DEFAULT_PAD`. The file suffix
    plays no part: the same network as .onnx and as .rknn letterboxes to the same tensor."""
    if forced is not None:
        return PadChoice(forced, "given (--pad)")
    embedded, _ = embedded_pad_and_names(metadata)
    if embedded is not None:
        return PadChoice(embedded, "embedded by rknnlaunch convert")
    layout = head_layout(metadata)
    if layout is not None and layout.startswith(ZOO_LAYOUT_PREFIX):
        return PadChoice(PAD_RKNN_MODEL_ZOO, f"{layout} head (rknn_model_zoo pads with black)")
    if layout is not None:
        return PadChoice(PAD_ULTRALYTICS, f"{layout} head (Ultralytics pads with grey 114)")
    return PadChoice(DEFAULT_PAD, "default (no embedded pad, head layout not recognised)")


def shown_names(model_names: Sequence[str] | None, classes: int | None) -> tuple[str, ...] | None:
    """The class names results carry (one rule for `Detector`, `detect` and the sample app): the
    model's own (its metadata, or the facts `rknnlaunch convert` embedded); else COCO's 80 names
    when the outputs carry exactly 80 classes; else None (results show class ids)."""
    if model_names is not None:
        return tuple(model_names)
    if classes == len(COCO_NAMES):
        return COCO_NAMES
    return None


def check_decoder_options(task: str | None, layout: str | None, masks: str) -> None:
    """`UsageError` for a task, layout or mask resolution we do not know, before any runtime opens."""
    if task is not None and task not in TASKS:
        raise UsageError(
            f"unknown task {task!r}", f"use one of {', '.join(TASKS)} (or leave it to the model)"
        )
    if layout is not None and layout not in LAYOUTS:
        raise UsageError(
            f"unknown YOLO output layout {layout!r}",
            f"use one of {', '.join(LAYOUTS)} (docs/yolo.md), or leave it to the output shapes",
        )
    if masks not in ("proto", "image"):
        raise UsageError(f"unknown mask resolution {masks!r}", "use 'proto' or 'image'")


@dataclass(frozen=True)
class ModelPipeline:
    """A YOLO model file and the pre/post-processing that fits it (what `bench` and `detect` share)."""

    path: Path
    metadata: dict[str, Any]
    """`model_metadata` of the file."""
    input_width: int
    input_height: int
    pad_value: int
    conf: float
    iou: float
    task: str | None = None
    """Forced task (detect/segment/pose/obb); None = from the metadata or the output shapes."""
    layout: str | None = None
    """Forced output layout (docs/yolo.md); None = detected from the output shapes."""
    masks: MaskResolution = "proto"
    """Segmentation masks at the protos' resolution or the image's."""

    @classmethod
    def for_model(
        cls,
        path: Path,
        pad_value: int | None = None,
        conf: float = 0.25,
        iou: float = 0.45,
        *,
        task: str | None = None,
        layout: str | None = None,
        masks: MaskResolution = "proto",
    ) -> ModelPipeline:
        """Read the file's metadata once; ``pad_value`` None = the model's pad (`choose_pad`).

        Raises `UsageError` for a bad pad value or thresholds before any runtime is opened.
        """
        metadata = model_metadata(path)
        width, height = input_size(metadata)
        pad = choose_pad(metadata, pad_value).value
        check_decoder_options(task, layout, masks)
        pipeline = cls(path, metadata, width, height, pad, conf, iou, task, layout, masks)
        pipeline.stages()  # validates pad and thresholds now
        return pipeline

    @property
    def conf_threshold(self) -> float:
        """Deprecated spelling of ``conf`` (kept for callers not yet moved)."""
        return self.conf

    @property
    def iou_threshold(self) -> float:
        """Deprecated spelling of ``iou``."""
        return self.iou

    def decoder(self) -> YoloDecoder:
        """The model's decoder: its file's facts (task, class names, input size, ...) plus what the
        user forced; the layout itself is read from the output shapes on the first frame."""
        return YoloDecoder(
            self.conf,
            self.iou,
            layout=self.layout,  # type: ignore[arg-type]  # checked against LAYOUTS in for_model
            metadata=decoder_facts(self.metadata),
            task=self.task,
            masks=self.masks,
        )

    def stages(self) -> tuple[Letterboxer, YoloDecoder]:
        """A fresh letterboxer and decoder (one pair per thread: the letterbox buffer is reused)."""
        return Letterboxer((self.input_width, self.input_height), pad_value=self.pad_value), self.decoder()
