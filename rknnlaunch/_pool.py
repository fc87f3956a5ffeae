"""`rknnlaunch.Pool`: one runtime per runnable core group, one worker thread each, ordered map.

RKNNLite's inference releases the GIL, so one thread per context scales across NPU cores. A core
set the runtime cannot run as one context ({0,2} on RK3588) becomes one context per group.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from ._closing import ClosesOnExit
from ._errors import InferenceError
from ._rknnlite import RknnLiteFactory
from ._runtime import Runtime, open_plan, plan
from ._settings import NpuSettings, load_settings
from .npu import format_cores

_Job = tuple[Any, "Future[list[np.ndarray[Any, Any]]]"]


class Pool(ClosesOnExit):
    """Runtimes on every allocated core group, fed by a shared queue.

    ``infer(x)`` blocks for one result; ``submit(x)`` returns a Future; ``map(frames)`` yields
    results in input order while keeping every worker busy. Use as a context manager or call
    ``close()``. Arguments as for `rknnlaunch.open`, plus ``per_core``: by default the cores form
    the fewest contexts RKNNLite can run (all of RK3588's cores = one 3-core context; {0,2} = two);
    ``per_core=True`` opens one single-core context per core instead, which is what multi-instance
    throughput figures use (one thread per core).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        cores: Iterable[int] | str | None = None,
        backend: str = "auto",
        *,
        settings: NpuSettings | None = None,
        rknnlite: RknnLiteFactory | None = None,
        per_core: bool = False,
    ) -> None:
        settings = settings if settings is not None else load_settings()
        the_plan = plan(model, cores, backend, settings, split=True, per_core=per_core)
        self.runtimes: tuple[Runtime, ...] = tuple(open_plan(the_plan, settings, rknnlite))
        self.backend: str = self.runtimes[0].backend
        self.cores: frozenset[int] = frozenset().union(*(runtime.cores for runtime in self.runtimes))
        if self.backend == "npu":
            target = the_plan.target
            soc = target.info.soc.name if target is not None else "?"
            parts = " + ".join(f"{{{format_cores(r.cores)}}}" for r in self.runtimes)
            count = len(self.runtimes)
            self.label = f"NPU {soc} cores {format_cores(self.cores)}: {count} runtime(s) {parts}"
        else:
            self.label = self.runtimes[0].label
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closed = False
        self._close_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._work, args=(runtime,), name=f"rknnlaunch-pool-{index}", daemon=True)
            for index, runtime in enumerate(self.runtimes)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def size(self) -> int:
        """Number of runtimes (and worker threads)."""
        return len(self.runtimes)

    def _work(self, runtime: Runtime) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            frame, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(runtime.infer(frame))
            except BaseException as exc:
                future.set_exception(exc)

    def submit(self, x: Any) -> Future[list[np.ndarray[Any, Any]]]:
        """Queue one frame; the Future resolves to the model's raw outputs."""
        future: Future[list[np.ndarray[Any, Any]]] = Future()
        # Under the close lock: a job queued after close()'s stop markers would never run, and its
        # caller would wait forever.
        with self._close_lock:
            if self._closed:
                raise InferenceError("this pool is closed", "create a new rknnlaunch.Pool")
            self._jobs.put((x, future))
        return future

    def infer(self, x: Any) -> list[np.ndarray[Any, Any]]:
        """Run one frame on whichever runtime is free; blocks for its outputs."""
        return self.submit(x).result()

    def map(
        self, frames: Iterable[Any], in_flight: int | None = None
    ) -> Iterator[list[np.ndarray[Any, Any]]]:
        """Outputs for ``frames`` in input order; at most ``in_flight`` queued (default 2 per runtime)."""
        limit = max(1, in_flight if in_flight is not None else 2 * self.size)
        pending: deque[Future[list[np.ndarray[Any, Any]]]] = deque()
        try:
            for frame in frames:
                pending.append(self.submit(frame))
                if len(pending) >= limit:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()

    def close(self) -> None:
        """Finish queued frames, stop the workers and release every runtime (idempotent)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            for _ in self._threads:
                self._jobs.put(None)
        for thread in self._threads:
            thread.join()
        for runtime in self.runtimes:
            runtime.close()

    def __repr__(self) -> str:
        return f"<Pool {self.label!r}>"
