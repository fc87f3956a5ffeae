"""Instance masks from YOLO-seg mask coefficients and protos, only for the boxes NMS kept.

mask = sigmoid(coefficients . protos) > 0.5, i.e. the linear combination > 0 (no sigmoid needed),
cropped to the box. Only each box's own window of the protos is ever multiplied.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from .._types import LetterboxInfo

MaskResolution = Literal["proto", "image"]


class Protos(NamedTuple):
    """The protos tensor as nm x H x W, raw (float, or integer with its zero point and scale)."""

    values: npt.NDArray[np.generic]
    zero_point: float = 0.0
    scale: float = 1.0

    def window_logits(
        self, coefficients: npt.NDArray[np.float32], y0: int, y1: int, x0: int, x1: int
    ) -> npt.NDArray[np.float32]:
        """coefficients . protos over rows y0:y1, cols x0:x1 (sign-exact; scaled by ``scale``)."""
        window = self.values[:, y0:y1, x0:x1]
        channels = window.shape[0]
        flat = np.asarray(window.reshape(channels, -1), np.float32)
        out = coefficients @ flat
        if self.zero_point:
            out -= np.float32(self.zero_point) * coefficients.sum()
        return np.asarray(out.reshape(y1 - y0, x1 - x0), np.float32)


def proto_masks(
    coefficients: npt.NDArray[np.float32],
    protos: Protos,
    boxes: npt.NDArray[np.float32],
    input_width: int,
    input_height: int,
) -> npt.NDArray[np.bool_]:
    """N x H x W masks at proto resolution; ``boxes`` N x 4 xyxy in model-input pixels.

    A proto pixel (i, j) belongs to a box when x1 <= j < x2 and y1 <= i < y2 in proto pixels.
    """
    _, height, width = protos.values.shape
    masks = np.zeros((len(boxes), height, width), bool)
    sx, sy = width / input_width, height / input_height
    for k in range(len(boxes)):
        bx1, by1, bx2, by2 = (float(v) for v in boxes[k])
        x0, x1 = _span(bx1 * sx, bx2 * sx, width)
        y0, y1 = _span(by1 * sy, by2 * sy, height)
        if x0 >= x1 or y0 >= y1:
            continue
        masks[k, y0:y1, x0:x1] = protos.window_logits(coefficients[k], y0, y1, x0, x1) > 0
    return masks


def _span(low: float, high: float, size: int) -> tuple[int, int]:
    """Integer indices j with low <= j < high, clipped to 0..size."""
    return max(0, min(size, math.ceil(low))), max(0, min(size, math.ceil(high)))


def source_region(info: LetterboxInfo, width: int, height: int) -> tuple[float, float, float, float]:
    """Where the source image lies in a width x height mask covering the model input."""
    sx, sy = width / info.input_width, height / info.input_height
    new_w, new_h = info.source_width * info.scale_x, info.source_height * info.scale_y
    return (info.pad_x * sx, info.pad_y * sy, (info.pad_x + new_w) * sx, (info.pad_y + new_h) * sy)


def source_masks(
    coefficients: npt.NDArray[np.float32],
    protos: Protos,
    source_boxes: npt.NDArray[np.float32],
    info: LetterboxInfo,
) -> npt.NDArray[np.bool_]:
    """N x source_height x source_width masks: the mask logits bilinearly sampled at each source
    pixel centre inside its box (through the letterbox), then thresholded."""
    _, height, width = protos.values.shape
    out = np.zeros((len(source_boxes), info.source_height, info.source_width), bool)
    # source pixel centre -> proto coordinate (pixel centres at integer + 0.5 in both spaces)
    ax, bx = info.scale_x * width / info.input_width, info.pad_x * width / info.input_width
    ay, by = info.scale_y * height / info.input_height, info.pad_y * height / info.input_height
    for k in range(len(source_boxes)):
        x1, y1, x2, y2 = (float(v) for v in source_boxes[k])
        c0, c1 = _span(x1 - 0.5, x2 - 0.5, info.source_width)
        r0, r1 = _span(y1 - 0.5, y2 - 0.5, info.source_height)
        if c0 >= c1 or r0 >= r1:
            continue
        u = (np.arange(c0, c1, dtype=np.float32) + 0.5) * ax + bx - 0.5
        v = (np.arange(r0, r1, dtype=np.float32) + 0.5) * ay + by - 0.5
        u0 = np.clip(np.floor(u), 0, width - 1).astype(np.intp)
        v0 = np.clip(np.floor(v), 0, height - 1).astype(np.intp)
        u1, v1 = np.minimum(u0 + 1, width - 1), np.minimum(v0 + 1, height - 1)
        fu = np.clip(u - u0, 0, 1)[None, :]
        fv = np.clip(v - v0, 0, 1)[:, None]
        wx0, wx1 = int(u0.min()), int(u1.max()) + 1
        wy0, wy1 = int(v0.min()), int(v1.max()) + 1
        logits = protos.window_logits(coefficients[k], wy0, wy1, wx0, wx1)
        # Inf logits x weight 0 is NaN: not > 0, so not masked (the caller allows it, once per call)
        top = logits[v0 - wy0][:, u0 - wx0] * (1 - fu) + logits[v0 - wy0][:, u1 - wx0] * fu
        bottom = logits[v1 - wy0][:, u0 - wx0] * (1 - fu) + logits[v1 - wy0][:, u1 - wx0] * fu
        out[k, r0:r1, c0:c1] = (top * (1 - fv) + bottom * fv) > 0
    return out
