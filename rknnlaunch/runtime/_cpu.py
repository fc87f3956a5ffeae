"""The CPU backend: an ONNX model on onnxruntime behind the same interface as the NPU runtime."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import BackendUnavailableError, InferenceError, ModelError
from .._files import require_file
from ._closing import ClosesOnExit


def as_nhwc_batch(x: Any) -> np.ndarray[Any, Any]:
    """NHWC uint8 frame(s) -> a 4-dim uint8 array with the batch dimension (HWC gets ``[None]``)."""
    array = np.asarray(x)
    if array.ndim == 3:
        array = array[np.newaxis]
    if array.ndim != 4:
        raise InferenceError(
            f"input has shape {array.shape}; expected an NHWC image (H, W, C) or batch (N, H, W, C)",
            "pass a uint8 image as read by cv2.imread after letterboxing, e.g. shape (640, 640, 3)",
        )
    if array.dtype != np.uint8:
        raise InferenceError(
            f"input dtype is {array.dtype}; the runtimes take uint8 NHWC pixels",
            "pass the letterboxed uint8 image (the model's own normalisation is applied for you)",
        )
    return array


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
        model_input = self._session.get_inputs()[0]
        self._input_name: str = model_input.name
        self._input_shape: list[Any] = list(model_input.shape)
        self._input_dtype = np.float16 if "float16" in model_input.type else np.float32
        self.model = path
        self.label = f"CPU (onnxruntime): {reason}"
        self.reason = reason
        self.detail = detail
        """Why the CPU was chosen in full (e.g. what discovery looked at), or None."""
        self._closed = False

    @property
    def input_size(self) -> tuple[int, int] | None:
        """(height, width) the model expects, when its input shape is static."""
        height, width = self._input_shape[2:4] if len(self._input_shape) == 4 else (None, None)
        return (height, width) if isinstance(height, int) and isinstance(width, int) else None

    def preprocess(self, x: Any) -> np.ndarray[Any, Any]:
        """NHWC uint8 -> the model's NCHW float input scaled to [0, 1]."""
        batch = as_nhwc_batch(x)
        size = self.input_size
        if size is not None and batch.shape[1:3] != size:
            raise InferenceError(
                f"input is {batch.shape[2]}x{batch.shape[1]} but the model takes {size[1]}x{size[0]}",
                f"letterbox the image to {size[1]}x{size[0]} first",
            )
        nchw: np.ndarray[Any, Any] = np.ascontiguousarray(
            batch.transpose(0, 3, 1, 2), dtype=self._input_dtype
        )
        np.divide(nchw, self._input_dtype(255), out=nchw)
        return nchw

    def infer(self, x: Any) -> list[np.ndarray[Any, Any]]:
        """Run the model on NHWC uint8 ``x``; returns its raw outputs."""
        if self._closed:
            raise InferenceError("this runtime is closed", "open a new one with rknnlaunch.open()")
        blob = self.preprocess(x)
        outputs = self._session.run(None, {self._input_name: blob})
        return [np.asarray(output) for output in outputs]

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"<CpuRuntime {self.label!r}>"
