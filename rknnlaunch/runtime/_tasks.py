"""What a pool worker runs: the `FrameTask` protocol, the plain `InferTask`, RKNNLite factory specs
and their resolution, and the periodic garbage collection every worker kind shares."""

from __future__ import annotations

import gc
import importlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._errors import InferenceError
from ._open import Runtime
from ._rknnlite import RknnLiteFactory

GC_EVERY = 200
"""Frames between `gc.collect()` calls: RKNNLite loops are publicly reported to grow through
reference cycles that a periodic collection frees (docs/hardware.md)."""
GC_MIN_INTERVAL_S = 5.0
"""Thread workers share the caller's process, whose full collection can take tens of ms with the GIL
held (every worker stalls): there, collect at most this often. Worker processes freeze the objects
they started with (`gc.freeze`), so their collections only walk what the loop allocated."""
STOP_WAIT_S = 10.0
"""How long closing after a Ctrl-C waits for a worker thread (or a process's reader thread): one
blocked on a lock the interrupted main thread left held (docs/sdk.md#ctrl-c) never ends."""


FactorySpec = RknnLiteFactory | str | None
"""How a worker makes RKNNLite instances: a picklable callable, ``"module:attribute"``, or None
for the real rknn-toolkit-lite2."""


WorkerFrame = np.ndarray[Any, Any] | list[np.ndarray[Any, Any]]
"""What a worker is handed: one array, or a list of them (one per model input, already checked)."""


class FrameTask(Protocol):
    """What a worker does with each frame; picklable, bound once per worker to its runtime."""

    def bind(self, runtime: Runtime) -> Callable[[Any], Any]: ...


@dataclass(frozen=True)
class InferTask:
    """The plain pool's task: the runtime's raw outputs."""

    def bind(self, runtime: Runtime) -> Callable[[Any], Any]:
        return runtime.infer


def resolve_factory(spec: FactorySpec) -> RknnLiteFactory | None:
    """``"module:attribute"`` -> that object; a callable or None as given."""
    if not isinstance(spec, str):
        return spec
    module, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InferenceError(
            f"rknnlite={spec!r} does not name an importable factory ({exc})",
            "pass 'package.module:callable' importable in a fresh interpreter, or a picklable callable",
        ) from None
    factory: RknnLiteFactory = target
    return factory


class GcCounter:
    """Frames done across a process's workers; collects garbage every ``every`` frames, but not
    more often than every ``min_interval`` seconds."""

    def __init__(self, every: int, min_interval: float = 0.0) -> None:
        self.every = every
        self.min_interval = min_interval
        self._count = itertools.count(1)
        self._last = time.monotonic()

    def tick(self) -> None:
        if self.every <= 0 or next(self._count) % self.every != 0:
            return
        now = time.monotonic()
        if now - self._last >= self.min_interval:
            self._last = now
            gc.collect()
