"""The values the YOLO pipeline passes around: letterbox geometry and detections."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Detections:
    """Detections in original-image pixels, highest score first.

    ``boxes`` is N x 4 float32 (x1, y1, x2, y2), ``scores`` N float32, ``class_ids`` N int64.
    """

    boxes: npt.NDArray[np.float32]
    scores: npt.NDArray[np.float32]
    class_ids: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    @classmethod
    def empty(cls) -> Detections:
        return cls(np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0,), np.int64))


@dataclass(frozen=True)
class LetterboxInfo:
    """How an image was fitted into the model input, so boxes can be mapped back.

    A source pixel (x, y) lands at (x * scale_x + pad_x, y * scale_y + pad_y) in the input. The two
    scales differ (slightly) only because the resized size is rounded to whole pixels.
    """

    scale_x: float
    scale_y: float
    pad_x: int
    pad_y: int
    source_width: int
    source_height: int
    input_width: int
    input_height: int

    @classmethod
    def identity(cls, width: int, height: int) -> LetterboxInfo:
        """Geometry for an input that was not letterboxed (boxes stay in input pixels)."""
        return cls(1.0, 1.0, 0, 0, width, height, width, height)

    def to_source(self, boxes: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Map N x 4 xyxy input-pixel boxes to source-image pixels, clipped to the image (in place)."""
        boxes[:, 0::2] -= self.pad_x
        boxes[:, 1::2] -= self.pad_y
        boxes[:, 0::2] *= np.float32(1.0 / self.scale_x)
        boxes[:, 1::2] *= np.float32(1.0 / self.scale_y)
        np.clip(boxes[:, 0::2], 0, self.source_width, out=boxes[:, 0::2])
        np.clip(boxes[:, 1::2], 0, self.source_height, out=boxes[:, 1::2])
        return boxes
