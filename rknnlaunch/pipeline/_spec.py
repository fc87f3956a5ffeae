"""`ModelPipeline`: a YOLO model file and the pre/post-processing that fits it (bench, detect, Detector)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model._metadata import input_size, model_metadata, pad_for
from ..yolo._decode import YoloDecoder
from ..yolo._letterbox import Letterboxer


def make_decoder(conf_threshold: float, iou_threshold: float) -> YoloDecoder:
    """The one place the pipeline builds its YOLO decoder (switching decoders is a change here only)."""
    return YoloDecoder(conf_threshold, iou_threshold)


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

    @classmethod
    def for_model(
        cls,
        path: Path,
        pad_value: int | None = None,
        conf_threshold: float = 0.25,
        iou_threshold: float = 0.45,
    ) -> ModelPipeline:
        """Read the file's metadata once; ``pad_value`` None = the default for its format (`pad_for`).

        Raises `UsageError` for a bad pad value or thresholds before any runtime is opened.
        """
        metadata = model_metadata(path)
        width, height = input_size(metadata)
        pad = pad_for(path) if pad_value is None else pad_value
        pipeline = cls(path, metadata, width, height, pad, conf_threshold, iou_threshold)
        pipeline.stages()  # validates pad and thresholds now
        return pipeline

    def stages(self) -> tuple[Letterboxer, YoloDecoder]:
        """A fresh letterboxer and decoder (one pair per thread: the letterbox buffer is reused)."""
        return (
            Letterboxer((self.input_width, self.input_height), pad_value=self.pad_value),
            make_decoder(self.conf_threshold, self.iou_threshold),
        )
