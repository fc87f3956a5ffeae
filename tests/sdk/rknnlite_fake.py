"""A fake `rknnlite.api.RKNNLite` that behaves as rknn-toolkit-lite2 is documented to.

See docs/hardware.md#rknnlite-behaviour and #core-masks:

- every call returns 0 / -1 (or None for inference) and never raises; the reason goes to the log only:
  Python-layer lines through sys.stderr ("E init_runtime: ..."), librknnrt lines straight to fd 2
  ("E RKNN: ..."), as the real layers do;
- core masks per SoC from `rknnlaunch.npu.runtime_effective_mask`: RK3588 rejects 5/6 with "The core
  mode 5 is not supported currently.", RK3576 remaps 4->1 and 7->3 with a warning, single-core NPUs
  reject any non-zero mask with "The core_mask is only supported by ['RK3588', 'RK3576']";
- inputs need the batch dimension (4 dims) or inference logs and returns None;
- a model newer than the runtime fails with "Invalid RKNN model version 6";
- concurrent `init_runtime` calls are detected (the real driver has crashed on them): each init waits
  up to `init_window` seconds for another init to overlap it, and if one does, both fail.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rknnlaunch.npu import SocSpec, models_compatible, runtime_effective_mask


def _log_python(line: str) -> None:
    sys.stderr.write(line + "\n")


def _log_native(line: str) -> None:
    os.write(2, (line + "\n").encode())


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("+")[0].split(".") if part.isdigit())


@dataclass
class FakeNpu:
    """The shared state behind every fake instance: the board's SoC, librknnrt version, the driver."""

    soc: SocSpec
    runtime_version: str = "2.3.2"
    output_shapes: tuple[tuple[int, ...], ...] = ((1, 6, 8400),)
    init_window: float = 0.05
    reads_device_tree: bool = False
    """Like the real Python layer: init_runtime reads /proc/device-tree/compatible to learn the SoC."""
    instances: list[FakeRKNNLite] = field(default_factory=list)
    concurrent_init_detected: bool = False
    max_concurrent_inits: int = 0
    _in_init: set[int] = field(default_factory=set)
    _overlapped: set[int] = field(default_factory=set)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def factory(self) -> FakeRKNNLite:
        instance = FakeRKNNLite(self)
        self.instances.append(instance)
        return instance

    def enter_init(self, instance: object) -> bool:
        """True when another init_runtime overlapped this one (either started first)."""
        with self._cond:
            if self._in_init:
                self._overlapped.update(self._in_init)
                self._overlapped.add(id(instance))
                self.concurrent_init_detected = True
            self._in_init.add(id(instance))
            self.max_concurrent_inits = max(self.max_concurrent_inits, len(self._in_init))
            self._cond.notify_all()
            return self._cond.wait_for(lambda: id(instance) in self._overlapped, timeout=self.init_window)

    def leave_init(self, instance: object) -> None:
        with self._cond:
            self._in_init.discard(id(instance))
            self._overlapped.discard(id(instance))


class FakeRKNNLite:
    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7
    NPU_CORE_ALL = 0xFFFF

    def __init__(self, npu: FakeNpu) -> None:
        self.npu = npu
        self.data: bytes | None = None
        self.initialised = False
        self.released = False
        self.requested_mask: int | None = None
        self.effective_mask: int | None = None
        self.inference_threads: set[int] = set()
        self.inference_count = 0

    def load_rknn(self, path: str) -> int:
        if not os.path.exists(path):
            _log_python(f"E load_rknn: Invalid RKNN model path: {path}")
            return -1
        with open(path, "rb") as handle:
            self.data = handle.read()
        return 0

    def init_runtime(
        self,
        target: str | None = None,
        device_id: str | None = None,
        async_mode: bool = False,
        core_mask: int = 0,
    ) -> int:
        if self.data is None:
            _log_python(
                "E init_runtime: Model is not loaded yet, this interface should be called after load_rknn!"
            )
            return -1
        overlapped = self.npu.enter_init(self)
        try:
            if overlapped:
                _log_native(
                    "E RKNN: [fake] rknn_init: another context is initialising concurrently (driver crash)"
                )
                return -1
            self.requested_mask = core_mask
            if self.npu.reads_device_tree:
                try:
                    with open("/proc/device-tree/compatible", "rb") as handle:
                        compatible = handle.read()
                except OSError:
                    _log_python("E init_runtime: Please specify the target in init_runtime!")
                    return -1
                if f"rockchip,{self.npu.soc.name}".encode() not in compatible:
                    _log_python("E init_runtime: Unsupported run platform")
                    return -1
            if self.data[:4] != b"RKNN":
                _log_native("E RKNN: [fake] Invalid RKNN model file, please check the model!")
                return -1
            meta = _metadata(self.data)
            model_version = str(meta.get("version", "0"))
            if _version(model_version) > _version(self.npu.runtime_version):
                _log_native(
                    f"E RKNN: [fake] The model version {model_version} is newer than librknnrt "
                    f"{self.npu.runtime_version}"
                )
                _log_native("E RKNN: [fake] Invalid RKNN model version 6")
                return -1
            targets = [str(t).lower() for t in meta.get("target_platform", [])]
            if targets and not any(models_compatible(t, self.npu.soc) for t in targets):
                _log_native(
                    f"E RKNN: [fake] The model is built for {targets[0]}, but the current platform "
                    f"is {self.npu.soc.name}"
                )
                return -1
            effective = runtime_effective_mask(self.npu.soc, core_mask)
            if effective is None:
                if not self.npu.soc.core_mask_settable:
                    _log_python("E init_runtime: The core_mask is only supported by ['RK3588', 'RK3576']")
                else:
                    _log_python(f"E init_runtime: The core mode {core_mask} is not supported currently.")
                return -1
            if effective != core_mask and core_mask != self.NPU_CORE_ALL:
                _log_python(
                    f"W init_runtime: core mode {core_mask} is not supported, use {effective} instead"
                )
            self.effective_mask = effective
            self.initialised = True
            return 0
        finally:
            self.npu.leave_init(self)

    def inference(
        self,
        inputs: list[Any],
        data_type: Any = None,
        data_format: Any = None,
        inputs_pass_through: Any = None,
        get_frame_id: bool = False,
    ) -> list[np.ndarray] | None:
        if not self.initialised or self.released:
            _log_python(
                "E inference: Runtime environment is not inited, please call init_runtime to init it first!"
            )
            return None
        x = np.asarray(inputs[0])
        if x.ndim != 4:
            _log_python("E inference: Catch exception when setting inputs.")
            _log_python(
                f"E inference: The input shape {x.shape} is wrong, expect 4 dims like (1, 640, 640, 3)"
            )
            return None
        self.inference_threads.add(threading.get_ident())
        self.inference_count += 1
        # Outputs carry the input's mean, so tests can check which frame produced which result.
        value = float(x.mean())
        return [np.full(shape, value, dtype=np.float32) for shape in self.npu.output_shapes]

    def release(self) -> None:
        self.released = True
        self.initialised = False


def _metadata(data: bytes) -> dict[str, Any]:
    try:
        version = struct.unpack_from("<Q", data, 8)[0]
        header = 24 if version <= 1 else 64
        block = struct.unpack_from("<Q", data, 16)[0]
        length = struct.unpack_from("<Q", data, header + block)[0]
        start = header + block + 8
        parsed = json.loads(data[start : start + length])
        return parsed if isinstance(parsed, dict) else {}
    except (struct.error, ValueError):
        return {}
