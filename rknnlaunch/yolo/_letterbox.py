"""Letterbox pre-processing: fit a BGR image into the model's square input, RGB NHWC uint8."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import UsageError
from ._image import opencv
from ._types import LetterboxInfo

PAD_RKNN_MODEL_ZOO = 0
"""rknn_model_zoo's YOLOv8 demos pad with black."""
PAD_ULTRALYTICS = 114
"""Ultralytics pads with grey (114, 114, 114)."""


def _size_pair(size: int | tuple[int, int]) -> tuple[int, int]:
    width, height = (size, size) if isinstance(size, int) else size
    if width <= 0 or height <= 0:
        raise UsageError(f"model input size {width}x{height} is not positive", "use e.g. 640")
    return int(width), int(height)


def geometry(source_width: int, source_height: int, input_width: int, input_height: int) -> LetterboxInfo:
    """Where a source image of this size goes in the input: scaled to fit, centred."""
    ratio = min(input_width / source_width, input_height / source_height)
    new_width = min(input_width, max(1, round(source_width * ratio)))
    new_height = min(input_height, max(1, round(source_height * ratio)))
    return LetterboxInfo(
        scale_x=new_width / source_width,
        scale_y=new_height / source_height,
        pad_x=(input_width - new_width) // 2,
        pad_y=(input_height - new_height) // 2,
        source_width=source_width,
        source_height=source_height,
        input_width=input_width,
        input_height=input_height,
    )


class Letterboxer:
    """Letterboxes frames into ONE reused 1 x H x W x 3 uint8 buffer (no allocation per frame).

    The array a call returns is that buffer: the next call overwrites it. Copy it if you keep frames
    in flight (e.g. several queued in a `Pool`), or use one Letterboxer per in-flight frame.
    ``pad_value`` 0 matches rknn_model_zoo's demos, 114 Ultralytics'. ``bgr_to_rgb`` swaps channels
    (OpenCV decodes to BGR; YOLO models are trained on RGB).
    """

    def __init__(
        self,
        size: int | tuple[int, int] = 640,
        pad_value: int = PAD_RKNN_MODEL_ZOO,
        bgr_to_rgb: bool = True,
    ) -> None:
        self.input_width, self.input_height = _size_pair(size)
        if not 0 <= pad_value <= 255:
            raise UsageError(f"pad value {pad_value} is outside 0..255", "use 0 (rknn_model_zoo) or 114")
        self.pad_value = pad_value
        self.bgr_to_rgb = bgr_to_rgb
        self.buffer: npt.NDArray[np.uint8] = np.full(
            (1, self.input_height, self.input_width, 3), pad_value, np.uint8
        )
        self._last: LetterboxInfo | None = None

    def __call__(self, image: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.uint8], LetterboxInfo]:
        """Letterbox ``image`` (H x W x 3 BGR uint8; H x W grey is accepted) into the buffer."""
        cv2 = opencv()
        image = _as_bgr(image, cv2)
        height, width = image.shape[:2]
        info = geometry(width, height, self.input_width, self.input_height)
        new_width = round(width * info.scale_x)
        new_height = round(height * info.scale_y)
        canvas = self.buffer[0]
        if info != self._last:
            # Geometry changed (or first frame): the pad strips must be repainted; otherwise they
            # still hold the pad colour from last time (RGB swap maps a grey pad onto itself).
            canvas[...] = self.pad_value
            self._last = info
        region = canvas[info.pad_y : info.pad_y + new_height, info.pad_x : info.pad_x + new_width]
        if (new_width, new_height) == (width, height):
            region[...] = image
        else:
            out = cv2.resize(image, (new_width, new_height), dst=region, interpolation=cv2.INTER_LINEAR)
            if out is not region and not np.shares_memory(out, region):
                region[...] = out  # OpenCV allocated instead of writing in place (strided view)
        if self.bgr_to_rgb:
            swapped = cv2.cvtColor(region, cv2.COLOR_BGR2RGB, dst=region)
            if not np.shares_memory(swapped, region):
                region[...] = swapped
        return self.buffer, info


def letterbox(
    image: npt.NDArray[np.uint8],
    size: int | tuple[int, int] = 640,
    pad_value: int = PAD_RKNN_MODEL_ZOO,
    bgr_to_rgb: bool = True,
) -> tuple[npt.NDArray[np.uint8], LetterboxInfo]:
    """One-shot letterbox into a fresh array (use a `Letterboxer` in loops)."""
    return Letterboxer(size, pad_value, bgr_to_rgb)(image)


def _as_bgr(image: Any, cv2: Any) -> npt.NDArray[np.uint8]:
    if not isinstance(image, np.ndarray):
        raise UsageError(
            f"expected an image as a numpy array, got {type(image).__name__}",
            "decode it first, e.g. cv2.imread(path)",
        )
    if image.dtype != np.uint8:
        raise UsageError(f"image has dtype {image.dtype}, expected uint8", "pass an 8-bit image")
    if image.ndim == 2:
        return np.asarray(cv2.cvtColor(image, cv2.COLOR_GRAY2BGR))
    if image.ndim == 3 and image.shape[2] == 4:
        return np.asarray(cv2.cvtColor(image, cv2.COLOR_BGRA2BGR))
    if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] == 0 or image.shape[1] == 0:
        raise UsageError(
            f"image has shape {image.shape}, expected H x W x 3 (BGR)",
            "pass one decoded colour image (no batch dimension)",
        )
    return image
