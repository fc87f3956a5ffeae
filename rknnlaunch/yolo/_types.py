"""The values the YOLO pipeline passes around: letterbox geometry and detections (any task)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Detections:
    """Detections in original-image pixels, highest score first; one result type for every task.

    ``boxes`` is N x 4 float32 (x1, y1, x2, y2), ``scores`` N float32, ``class_ids`` N int64.
    Task extras (None when the model does not predict them):

    - ``masks`` (segment): N x H x W bool. At proto resolution (default) they cover the model
      input (letterbox included) at the protos' size; ``mask_region`` (x1, y1, x2, y2, in mask
      pixels) is where the source image lies in them. At image resolution they are source-sized
      and ``mask_region`` is the whole image.
    - ``keypoints`` (pose): N x K x 3 float32 (x, y in source pixels, visibility 0..1; 1 when the
      model predicts only x, y).
    - ``angles`` (obb): N float32 radians, clockwise in image coordinates (y down); ``boxes``
      then hold the box before rotation about its centre (see `corners`), not clipped.

    ``names`` are the class names from the model's metadata, when known.
    """

    boxes: npt.NDArray[np.float32]
    scores: npt.NDArray[np.float32]
    class_ids: npt.NDArray[np.int64]
    masks: npt.NDArray[np.bool_] | None = None
    keypoints: npt.NDArray[np.float32] | None = None
    angles: npt.NDArray[np.float32] | None = None
    mask_region: tuple[float, float, float, float] | None = None
    names: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    @classmethod
    def empty(cls) -> Detections:
        return cls(np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0,), np.int64))

    @property
    def task(self) -> str:
        if self.masks is not None:
            return "segment"
        if self.keypoints is not None:
            return "pose"
        if self.angles is not None:
            return "obb"
        return "detect"

    def class_name(self, class_id: int) -> str:
        if self.names is not None and 0 <= class_id < len(self.names):
            return self.names[class_id]
        return f"class {class_id}"

    def corners(self) -> npt.NDArray[np.float32]:
        """N x 4 x 2 corner points of each box, rotated by its angle (axis-aligned without angles)."""
        x1, y1, x2, y2 = (self.boxes[:, i] for i in range(4))
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        dx = np.stack([x1 - cx, x2 - cx, x2 - cx, x1 - cx], axis=1)
        dy = np.stack([y1 - cy, y1 - cy, y2 - cy, y2 - cy], axis=1)
        angles = self.angles if self.angles is not None else np.zeros(len(self), np.float32)
        cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
        points = np.stack([cx[:, None] + dx * cos - dy * sin, cy[:, None] + dx * sin + dy * cos], axis=2)
        return np.asarray(points, np.float32)

    def to_json(self, decimals: int = 2) -> dict[str, Any]:
        """A JSON-ready dict: ``task`` and one entry per detection (masks as run-length counts)."""
        rows: list[dict[str, Any]] = []
        for i in range(len(self)):
            class_id = int(self.class_ids[i])
            row: dict[str, Any] = {
                "class_id": class_id,
                "name": self.class_name(class_id),
                "score": round(float(self.scores[i]), 4),
                "box": [round(float(v), decimals) for v in self.boxes[i]],
            }
            if self.angles is not None:
                row["angle"] = round(float(self.angles[i]), 4)
                row["corners"] = [[round(float(v), decimals) for v in p] for p in self.corners()[i]]
            if self.keypoints is not None:
                row["keypoints"] = [
                    [round(float(x), decimals), round(float(y), decimals), round(float(v), 3)]
                    for x, y, v in self.keypoints[i]
                ]
            if self.masks is not None:
                row["mask"] = mask_rle(self.masks[i])
            rows.append(row)
        out: dict[str, Any] = {"task": self.task, "count": len(self), "detections": rows}
        if self.masks is not None:
            out["mask_size"] = [int(self.masks.shape[2]), int(self.masks.shape[1])]
            out["mask_region"] = None if self.mask_region is None else [float(v) for v in self.mask_region]
        return out


def mask_rle(mask: npt.NDArray[np.bool_]) -> dict[str, Any]:
    """Uncompressed COCO-style run lengths of a H x W mask (column-major, starting with a 0-run)."""
    flat = np.asarray(mask, bool).ravel(order="F")
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate(([0], changes, [flat.size]))
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0]:
        counts = [0, *counts]
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": counts, "area": int(flat.sum())}


def rle_decode(rle: dict[str, Any]) -> npt.NDArray[np.bool_]:
    """The mask back from `mask_rle` (for consumers and tests)."""
    height, width = rle["size"]
    counts: Sequence[int] = rle["counts"]
    values = np.zeros(len(counts), bool)
    values[1::2] = True
    flat = np.repeat(values, counts)
    return np.asarray(flat.reshape((width, height)).T, bool)


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

    def points_to_source(self, xy: npt.NDArray[np.float32], clip: bool = True) -> npt.NDArray[np.float32]:
        """Map ... x 2 input-pixel points to source pixels (in place), clipped unless ``clip`` False."""
        xy[..., 0] -= self.pad_x
        xy[..., 1] -= self.pad_y
        xy[..., 0] *= np.float32(1.0 / self.scale_x)
        xy[..., 1] *= np.float32(1.0 / self.scale_y)
        if clip:
            np.clip(xy[..., 0], 0, self.source_width, out=xy[..., 0])
            np.clip(xy[..., 1], 0, self.source_height, out=xy[..., 1])
        return xy
