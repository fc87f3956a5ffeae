"""Raw output tensors and their int8/uint8 quantisation (`Quant`).

Dequantising, and a threshold moved into a tensor's own (quantised) domain so candidates are
filtered before any conversion."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ..._errors import UsageError

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
Tensor = npt.NDArray[Any]
"""A raw model output: float32/float16, or int8/uint8/int16 with a `Quant`."""


class Quant(NamedTuple):
    """Affine int8/uint8 quantisation of one output tensor: real = (q - zero_point) * scale."""

    zero_point: int
    scale: float


def dequantise(values: Tensor, quant: Quant | None) -> FloatArray:
    if quant is None:
        if not np.issubdtype(values.dtype, np.floating):
            raise UsageError(
                f"an output is {values.dtype} but no zero point/scale was given for it",
                "pass quant=[Quant(zero_point, scale), ...] (one per output) or request float outputs",
            )
        return np.asarray(values, np.float32)
    return (values.astype(np.float32) - np.float32(quant.zero_point)) * np.float32(quant.scale)


def quantised_floor(threshold: float, quant: Quant | None, dtype: np.dtype[np.generic]) -> float:
    """A threshold in the tensor's own domain that lets through everything >= ``threshold`` after
    dequantisation (one step lower to be safe; exact filtering happens later in float)."""
    if quant is None or np.issubdtype(dtype, np.floating) or not math.isfinite(threshold):
        return threshold
    return math.floor(threshold / quant.scale + quant.zero_point) - 1
