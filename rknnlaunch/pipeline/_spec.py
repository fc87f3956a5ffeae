"""`ModelPipeline`: a YOLO model file and the pre/post-processing that fits it (bench, detect, Detector)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import UsageError
from ..model import decoder_facts, embedded_pad_and_names, input_size, model_metadata, pad_for
from ..yolo import LAYOUTS, TASKS, Letterboxer, MaskResolution, YoloDecoder


def make_decoder(
    conf_threshold: float,
    iou_threshold: float,
    facts: dict[str, Any] | None = None,
    task: str | None = None,
    layout: str | None = None,
    masks: MaskResolution = "proto",
) -> YoloDecoder:
    """The one place the pipeline builds its YOLO decoder: the model file's facts (task, class
    names, input size, ...) plus what the user forced; the layout itself is read from the output
    shapes on the first frame (docs/yolo.md)."""
    return YoloDecoder(
        conf_threshold,
        iou_threshold,
        layout=layout,  # type: ignore[arg-type]  # checked against LAYOUTS in ModelPipeline
        metadata=facts,
        task=task,
        masks=masks,
    )


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
    conf_threshold: float
    iou_threshold: float
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
        conf_threshold: float = 0.25,
        iou_threshold: float = 0.45,
        *,
        task: str | None = None,
        layout: str | None = None,
        masks: MaskResolution = "proto",
    ) -> ModelPipeline:
        """Read the file's metadata once; ``pad_value`` None = the default for its format (`pad_for`).

        Raises `UsageError` for a bad pad value or thresholds before any runtime is opened.
        """
        metadata = model_metadata(path)
        width, height = input_size(metadata)
        embedded_pad, _ = embedded_pad_and_names(metadata)  # the pad `rknnlaunch convert` recorded
        if pad_value is not None:
            pad = pad_value
        else:
            pad = embedded_pad if embedded_pad is not None else pad_for(path)
        check_decoder_options(task, layout, masks)
        pipeline = cls(path, metadata, width, height, pad, conf_threshold, iou_threshold, task, layout, masks)
        pipeline.stages()  # validates pad and thresholds now
        return pipeline

    def stages(self) -> tuple[Letterboxer, YoloDecoder]:
        """A fresh letterboxer and decoder (one pair per thread: the letterbox buffer is reused)."""
        return (
            Letterboxer((self.input_width, self.input_height), pad_value=self.pad_value),
            make_decoder(
                self.conf_threshold,
                self.iou_threshold,
                decoder_facts(self.metadata),
                self.task,
                self.layout,
                self.masks,
            ),
        )
