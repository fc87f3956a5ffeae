"""The CPU backend: an ONNX model on onnxruntime behind the same interface as the NPU runtime."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import BackendUnavailableError, InferenceError, ModelError
from ..model._files import require_file
from ._closing import ClosesOnExit
from ._frames import Frame, InputSpec, check_frame

_ONNX_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(uint8)": "uint8",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(bool)": "bool",
}


def _dim(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def onnx_input_specs(inputs: Sequence[Any]) -> tuple[tuple[InputSpec, ...], bool]:
    """Frame specs for an onnxruntime session's inputs, and whether it is an image model.

    One float NCHW input with 1, 3 or 4 channels is an image model: it takes NHWC pixels as its
    .rknn export does (rknn-toolkit2 folds mean/std into the model; here the CPU divides by 255).
    Every other model takes its inputs as the ONNX graph declares them.
    """
    dtypes = [_ONNX_TYPES.get(str(i.type)) for i in inputs]
    shapes = [tuple(_dim(d) for d in i.shape) for i in inputs]
    if (
        len(inputs) == 1
        and dtypes[0] in ("float32", "float16")
        and len(shapes[0]) == 4
        and shapes[0][1] in (1, 3, 4)
    ):
        n, c, h, w = shapes[0]
        return (InputSpec(str(inputs[0].name), (n, h, w, c), dtypes[0], image=True),), True
    specs = tuple(
        InputSpec(str(i.name), shape, dtype) for i, shape, dtype in zip(inputs, shapes, dtypes, strict=True)
    )
    return specs, False


class CpuRuntime(ClosesOnExit):
    """One onnxruntime session; ``infer`` takes NHWC uint8 and feeds the model NCHW float /255."""

    backend = "cpu"
    cores: frozenset[int] = frozenset()

    def __init__(
        self,
        model: str | os.PathLike[str],
        reason: str,
        threads: int | None = None,
        detail: str | None = None,
    ) -> None:
        path = Path(model)
        if path.suffix.lower() != ".onnx":
            raise ModelError(
                f"the CPU backend runs ONNX models; {path} is not an .onnx file",
                "pass the .onnx export of the model (next to the .rknn file it is found automatically)",
            )
        require_file(path, "model file", "pass the path of an existing .onnx file", ModelError)
        try:
            import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]
        except ImportError as exc:
            raise BackendUnavailableError(
                f"onnxruntime is not importable ({exc})", "pip install 'rknnlaunch[cpu]'"
            ) from None
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise ModelError(
                f"onnxruntime cannot load {path}: {exc}", "check that the file is a valid ONNX model"
            ) from None
        self.inputs, self.image_model = onnx_input_specs(self._session.get_inputs())
        self.model = path
        self.label = f"CPU (onnxruntime): {reason}"
        self.reason = reason
        self.detail = detail
        """Why the CPU was chosen in full (e.g. what discovery looked at), or None."""
        self._closed = False

    @property
    def input_size(self) -> tuple[int, int] | None:
        """(height, width) an image model expects, when its input shape is static."""
        if not self.image_model:
            return None
        _, height, width, _ = self.inputs[0].shape
        return (height, width) if height is not None and width is not None else None

    def preprocess(self, x: Frame) -> dict[str, np.ndarray[Any, Any]]:
        """The session's feed for frame ``x`` (checked as on the NPU): an image model's NHWC
        pixels become its NCHW float input scaled to [0, 1]; other inputs take the ONNX dtypes."""
        arrays = check_frame(x, self.inputs)
        if self.image_model:
            dtype = np.dtype(self.inputs[0].dtype or "float32")
            nchw: np.ndarray[Any, Any] = np.ascontiguousarray(arrays[0].transpose(0, 3, 1, 2), dtype=dtype)
            np.divide(nchw, dtype.type(255), out=nchw)
            return {self.inputs[0].name: nchw}
        return {
            spec.name: array if spec.dtype is None else np.ascontiguousarray(array, dtype=spec.dtype)
            for spec, array in zip(self.inputs, arrays, strict=True)
        }

    def infer(self, x: Frame) -> list[np.ndarray[Any, Any]]:
        """Run the model on frame ``x``; returns its raw outputs."""
        if self._closed:
            raise InferenceError("this runtime is closed", "open a new one with rknnlaunch.open()")
        outputs = self._session.run(None, self.preprocess(x))
        return [np.asarray(output) for output in outputs]

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"<CpuRuntime {self.label!r}>"
