"""Fakes for the bench tests: an RKNNLite that behaves like rknn-toolkit-lite2 on an RK3588 (incl.
its failures), an .rknn file the SDK can parse, and a plain runtime for the engine tests."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sdk.rknnfile_builder import write_rknn as write_rknn_file

from rknnlaunch.npu import runtime_effective_mask, soc_by_name
from rknnlaunch.yolo.testing import SynthObject, encode_rknn

# What the fake model "sees": two objects, in 640x640 input pixels.
OBJECTS = [
    SynthObject((100.0, 140.0, 300.0, 400.0), 0, 0.9),
    SynthObject((400.0, 300.0, 460.0, 380.0), 2, 0.7),
]
RK3588 = soc_by_name("rk3588")
assert RK3588 is not None


def write_rknn(path: Path, platform: str = "rk3588", size: int = 640) -> Path:
    """A minimal .rknn file (the SDK tests' builder): YOLO input ``size`` x ``size`` and the rknn-9 outputs
    `FakeRknnLite` returns (real files list their outputs; the pad rule reads the head layout from them)."""
    outputs = tuple((f"output{i}", tuple(o.shape)) for i, o in enumerate(encode_rknn([])))
    return write_rknn_file(
        path, targets=(platform,), inputs=(("images", (1, size, size, 3)),), outputs=outputs
    )


class FakeRknnLite:
    """Mimics rknnlite.api.RKNNLite: returns 0/-1, logs the reason, one instance per context."""

    instances: ClassVar[list[FakeRknnLite]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self.mask: int | None = None
        self.loaded = False
        self.released = False
        self.inferences = 0
        self.outputs = encode_rknn(OBJECTS)
        with FakeRknnLite.lock:
            FakeRknnLite.instances.append(self)

    def load_rknn(self, path: str) -> int:
        if not Path(path).is_file():
            print(f"E load_rknn: {path} not found")
            return -1
        self.loaded = True
        return 0

    def init_runtime(self, core_mask: int = 0) -> int:
        if not self.loaded:
            print("E init_runtime: model not loaded")
            return -1
        effective = runtime_effective_mask(RK3588, core_mask)  # 0xffff -> 7; 5 and 6 fail
        if effective is None:
            print(f"E RKNN: The core mode {core_mask} is not supported currently.")
            return -1
        self.mask = effective
        return 0

    def inference(self, inputs: list[Any]) -> list[Any] | None:
        x = inputs[0]
        if self.mask is None or x.shape != (1, 640, 640, 3) or x.dtype != np.uint8:
            print(f"E inference: bad input {getattr(x, 'shape', None)}")
            return None
        with FakeRknnLite.lock:
            self.inferences += 1
        return [o.copy() for o in self.outputs]  # fresh arrays each call, like the runtime

    def release(self) -> None:
        self.released = True


class FakeRuntime:
    """A `rknnlaunch.Runtime` look-alike for the engine tests; counts calls, can fail on demand."""

    def __init__(self, cores: frozenset[int] | None, fail_after: int | None = None) -> None:
        self.cores = cores
        self.label = f"fake {sorted(cores) if cores else 'cpu'}"
        self.calls = 0
        self.closed = False
        self.fail_after = fail_after
        self.outputs = encode_rknn(OBJECTS)

    def infer(self, x: Any) -> list[np.ndarray]:
        assert x.shape == (1, 640, 640, 3) and x.dtype == np.uint8
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            from rknnlaunch import InferenceError

            raise InferenceError("fake runtime failed", "nothing to do")
        return [o.copy() for o in self.outputs]

    def close(self) -> None:
        self.closed = True
