"""Frames: what a model takes (`InputSpec`, one per input) and `check_frame`, the check every backend runs.

A frame is one array (a one-input model) or a list of arrays, one per model input in the model's
order. Each array is checked against its input's runtime shape (the layout the runtime exchanges,
e.g. NHWC for an image input whose .rknn header records the NCHW graph shape) and dtype, before any
worker or runtime sees it; a batch dimension of 1 may be left out. No pydantic here: worker
processes import this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import UsageError

if TYPE_CHECKING:
    from ..model._rknnfile import TensorInfo

Frame = Any
"""What a caller passes: an array, or a list/tuple of arrays (one per model input)."""

CONVERTIBLE = ("uint8", "int8", "float16", "float32")
"""Types RKNNLite converts between for an input of any of them (librknnrt's uint8/int8/float16/float32
tensor types, pass-through off): the toolkit's examples feed uint8 pixels to int8 and float16 image
models, and rknn-toolkit2 records an ONNX float32 input as float16 (our tiny_multi.rknn,
tests/data/tiny_rknn), which callers feed float32."""


@dataclass(frozen=True)
class InputSpec:
    """One model input as the runtime exchanges it."""

    name: str
    shape: tuple[int | None, ...]
    """Runtime dims (None: any size), batch first when the model has one."""
    dtype: str | None
    """The dtype the model declares (``int8``, ``float16``, ``int64``...); None: not said."""
    image: bool = False
    """An NHWC image input (pixels as uint8 are the usual frame)."""

    def accepted(self) -> tuple[str, ...] | None:
        """Dtypes a frame's array may have for this input (None: any)."""
        if self.dtype is None:
            return None
        if self.dtype in CONVERTIBLE:
            return CONVERTIBLE
        return (self.dtype,)

    def describe(self) -> str:
        """``'images' uint8 1x640x640x3 NHWC (batch dim of 1 optional; dtypes uint8/int8/...)``."""
        dims = "x".join("?" if d is None else str(d) for d in self.shape) or "scalar"
        usual = "uint8" if self.image else (self.dtype or "any dtype")
        notes = ["batch dim of 1 optional"] if self._batch_optional() else []
        accepted = self.accepted()
        if accepted is not None and len(accepted) > 1:
            notes.append("dtypes " + "/".join(accepted))
        layout = " NHWC" if self.image else ""
        return f"{self.name!r} {usual} {dims}{layout}" + (f" ({'; '.join(notes)})" if notes else "")

    def _batch_optional(self) -> bool:
        return len(self.shape) >= 2 and self.shape[0] in (1, None)

    def matches(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.shape) and all(
            want is None or want == got for want, got in zip(self.shape, shape, strict=True)
        )


def _dim(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def input_specs(tensors: Sequence[TensorInfo]) -> tuple[InputSpec, ...]:
    """`InputSpec` per input from an .rknn header's `TensorInfo` (runtime layout, declared dtype)."""
    return tuple(
        InputSpec(
            tensor.name,
            tuple(_dim(d) for d in tensor.runtime_shape()),
            tensor.dtype,
            image=tensor.layout == "NHWC" and len(tensor.shape) == 4,
        )
        for tensor in tensors
    )


def _as_arrays(x: Frame, count: int) -> list[np.ndarray[Any, Any]]:
    if isinstance(x, (list, tuple)) and (count > 1 or all(isinstance(a, np.ndarray) for a in x)):
        return [a if isinstance(a, np.ndarray) else np.asarray(a) for a in x]
    return [x if isinstance(x, np.ndarray) else np.asarray(x)]


def _summary(specs: Sequence[InputSpec]) -> str:
    return "; ".join(spec.describe() for spec in specs)


def _fix(specs: Sequence[InputSpec]) -> str:
    if len(specs) == 1 and specs[0].image:
        _, height, width, _ = specs[0].shape
        size = f" ({width}x{height}, width x height)" if height and width else ""
        return (
            f"letterbox each frame to the model input{size} with rknnlaunch.yolo.Letterboxer, or use "
            "rknnlaunch.Detector, which letterboxes and decodes for you"
        )
    return (
        "pass one array per model input, in the model's order, with the shapes and dtypes "
        "`rknnlaunch model inspect MODEL` lists"
    )


def check_frame(x: Frame, specs: Sequence[InputSpec]) -> list[np.ndarray[Any, Any]]:
    """The frame's arrays, one per input, each with its batch dimension; `UsageError` naming the
    input, what it takes and what was given. Without specs (a header that says nothing), arrays
    pass as given (a 3-dim one gets a batch dimension)."""
    arrays = _as_arrays(x, len(specs))
    if not specs:
        return [a[np.newaxis] if a.ndim == 3 else a for a in arrays]
    if len(arrays) != len(specs):
        given = f"{len(arrays)} array{'s' if len(arrays) != 1 else ''}"
        raise UsageError(
            f"the frame has {given}; this model takes {len(specs)} input"
            f"{'s' if len(specs) != 1 else ''} ({_summary(specs)})",
            _fix(specs),
        )
    checked: list[np.ndarray[Any, Any]] = []
    for spec, array in zip(specs, arrays, strict=True):
        accepted = spec.accepted()
        shape = tuple(array.shape)
        if spec.matches(shape):
            batched = array
        elif spec._batch_optional() and len(shape) == len(spec.shape) - 1 and spec.matches((1, *shape)):
            batched = array[np.newaxis]
        else:
            batched = None
        if batched is None or (accepted is not None and array.dtype.name not in accepted):
            where = f"input {spec.name!r}" if len(specs) > 1 else f"the frame (input {spec.name!r})"
            fix = _fix(specs)
            if batched is not None and array.dtype.name == "float64" and "float32" in (accepted or ()):
                fix = "convert it with .astype(np.float32) (numpy makes float64 by default)"
            elif batched is not None and spec.dtype is not None:
                fix = f"convert it with .astype(np.{'uint8' if spec.image else spec.dtype})"
            raise UsageError(
                f"{where} is {array.dtype} of shape {shape}; this model takes {spec.describe()}",
                fix,
            )
        checked.append(batched)
    return checked
