"""A stand-in `rknnlite.api.RKNNLite` for x86_64: rknn-toolkit-lite2's Python surface over ctypes
to the simulated librknnrt (tests/kit/librknnrt_sim), so a workload off the board runs its NPU
code path on simulated cores (rknn-toolkit-lite2 itself ships for aarch64 only).

Put tests/kit/rknnlite_sim on PYTHONPATH and name the library with RKNN_SIM_LIBRKNNRT (default
/usr/lib/librknnrt.so, where the real binding loads it from). Never installed, never shipped.

The surface (facts from rknn-toolkit-lite2's documented API, as tests/sdk/rknnlite_fake.py has it):
every call returns 0 / -1 (inference: a list of float32 arrays, or None) and never raises; the
reason goes to the log ("E <call>: ..." on stderr, librknnrt's own lines on fd 2). init_runtime
takes the C core-mask values (NPU_CORE_0 = 1, NPU_CORE_0_1 = 3, ..., NPU_CORE_AUTO = 0).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

import numpy as np

from ._rknn_api import Input as _Input
from ._rknn_api import Output as _Output
from ._rknn_api import TensorAttr as _TensorAttr

_Q_IN_OUT_NUM, _Q_INPUT_ATTR, _Q_OUTPUT_ATTR = 0, 1, 2
_NHWC, _NCHW = 1, 0
_TYPES = {"float32": 0, "float16": 1, "int8": 2, "uint8": 3, "int16": 4, "uint16": 5, "int32": 6}


_library: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _library
    if _library is None:
        _library = ctypes.CDLL(os.environ.get("RKNN_SIM_LIBRKNNRT", "/usr/lib/librknnrt.so"))
        handle, pointer, size = ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint32
        _library.rknn_init.argtypes = [handle, pointer, size, size, pointer]
    return _library


def _log(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class RKNNLite:
    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7
    NPU_CORE_ALL = 0xFFFF

    def __init__(self, verbose: bool = False, verbose_file: str | None = None) -> None:
        self._model: bytes | None = None
        self._ctx: ctypes.c_uint64 | None = None
        self._outputs: list[tuple[int, ...]] = []

    def load_rknn(self, path: str) -> int:
        try:
            with open(path, "rb") as file:
                self._model = file.read()
        except OSError as exc:
            _log(f"E load_rknn: {exc}")
            return -1
        return 0

    def init_runtime(self, target: str | None = None, device_id: str | None = None, async_mode: bool = False,
                     core_mask: int = NPU_CORE_AUTO) -> int:  # fmt: skip
        if self._model is None:
            _log("E init_runtime: load_rknn first")
            return -1
        try:
            lib = _lib()
        except OSError as exc:
            _log(f"E init_runtime: cannot load librknnrt ({exc})")
            return -1
        ctx = ctypes.c_uint64()
        model = ctypes.create_string_buffer(self._model, len(self._model))
        code = lib.rknn_init(ctypes.byref(ctx), model, len(self._model), 0, None)
        if code != 0:
            _log(f"E init_runtime: rknn_init failed ({code})")
            return -1
        if core_mask != self.NPU_CORE_AUTO and lib.rknn_set_core_mask(ctx, ctypes.c_uint32(core_mask)) != 0:
            _log(f"E init_runtime: rknn_set_core_mask({core_mask}) failed")
            lib.rknn_destroy(ctx)
            return -1
        count = (ctypes.c_uint32 * 2)()
        lib.rknn_query(ctx, _Q_IN_OUT_NUM, ctypes.byref(count), ctypes.sizeof(count))
        self._outputs = []
        for index in range(count[1]):
            attr = _TensorAttr(index=index)
            lib.rknn_query(ctx, _Q_OUTPUT_ATTR, ctypes.byref(attr), ctypes.sizeof(attr))
            self._outputs.append(tuple(attr.dims[: attr.n_dims]))
        self._ctx = ctx
        return 0

    def inference(self, inputs: list[Any], data_format: Any = None, inputs_pass_through: Any = None,
                  get_frame_id: bool = False) -> list[Any] | None:  # fmt: skip
        if self._ctx is None:
            _log("E inference: init_runtime first")
            return None
        lib = _lib()
        arrays = [np.ascontiguousarray(item) for item in inputs]
        c_inputs = (_Input * len(arrays))()
        for index, array in enumerate(arrays):
            fmt = _NCHW if data_format in ("nchw", ["nchw"]) else _NHWC
            c_inputs[index] = _Input(
                index=index,
                buf=array.ctypes.data,
                size=array.nbytes,
                type=_TYPES.get(str(array.dtype), 3),
                fmt=fmt,
            )
        if lib.rknn_inputs_set(self._ctx, len(arrays), c_inputs) != 0:
            _log("E inference: rknn_inputs_set failed")
            return None
        lib.rknn_run(self._ctx, None)  # like the binding: its code is not checked, outputs_get fails
        c_outputs = (_Output * len(self._outputs))()
        for index in range(len(self._outputs)):
            c_outputs[index] = _Output(want_float=1, index=index)
        if lib.rknn_outputs_get(self._ctx, len(self._outputs), c_outputs, None) != 0:
            _log("E inference: rknn_outputs_get failed")
            return None
        results = []
        for index, shape in enumerate(self._outputs):
            floats = ctypes.cast(c_outputs[index].buf, ctypes.POINTER(ctypes.c_float))
            count = int(np.prod(shape))
            results.append(np.ctypeslib.as_array(floats, shape=(count,)).copy().reshape(shape))
        lib.rknn_outputs_release(self._ctx, len(self._outputs), c_outputs)
        return results

    def release(self) -> None:
        if self._ctx is not None:
            _lib().rknn_destroy(self._ctx)
            self._ctx = None
