"""Thread workers: one thread per opened runtime, all fed from one queue (for runtimes whose calls
release the GIL)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from .._errors import InferenceError
from ._frames import InputSpec
from ._open import Runtime
from ._tasks import (
    GC_EVERY,
    GC_MIN_INTERVAL_S,
    STOP_WAIT_S,
    FrameTask,
    GcCounter,
    WorkerFrame,
)

_ThreadJob = tuple[Any, "Future[Any]"]


class ThreadWorkers:
    """One thread per opened runtime, all fed from one queue (whichever context is free)."""

    kind = "thread"

    def __init__(self, runtimes: Sequence[Runtime], task: FrameTask, gc_every: int = GC_EVERY) -> None:
        self.runtimes = tuple(runtimes)
        self.labels = tuple(runtime.label for runtime in self.runtimes)
        self.inputs: tuple[InputSpec, ...] = self.runtimes[0].inputs if self.runtimes else ()
        """What a frame is (every context runs the same model)."""
        self._jobs: queue.SimpleQueue[_ThreadJob | None] = queue.SimpleQueue()
        self._closed = False
        self._close_lock = threading.Lock()
        self._counter = GcCounter(gc_every, GC_MIN_INTERVAL_S)
        self._threads = [
            threading.Thread(
                target=self._work, args=(task.bind(runtime),), name=f"rknnlaunch-worker-{i}", daemon=True
            )
            for i, runtime in enumerate(self.runtimes)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def size(self) -> int:
        return len(self.runtimes)

    def _work(self, run: Callable[[Any], Any]) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            frame, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(run(frame))
            except BaseException as exc:
                future.set_exception(exc)
            del frame, future, job
            self._counter.tick()

    def submit(self, frame: WorkerFrame) -> Future[Any]:
        future: Future[Any] = Future()
        # Under the close lock: a job queued after close()'s stop markers would never run.
        with self._close_lock:
            if self._closed:
                raise InferenceError("this pool is closed", "create a new rknnlaunch.Pool")
            self._jobs.put((frame, future))
        return future

    def close(self, wait: bool = True) -> None:
        """Run every queued frame (``wait``; else fail them), stop the threads, close the runtimes."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            if not wait:
                _fail_queued(
                    self._jobs, InferenceError("the pool was interrupted before the frame ran", None)
                )
            for _ in self._threads:
                self._jobs.put(None)
        for thread in self._threads:
            thread.join(None if wait else STOP_WAIT_S)
        for runtime, thread in zip(self.runtimes, self._threads, strict=True):
            if not thread.is_alive():  # a thread still running may be inside its runtime
                runtime.close()


def _fail_queued(jobs: queue.SimpleQueue[_ThreadJob | None], error: BaseException) -> None:
    while True:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            return
        if job is not None and job[1].set_running_or_notify_cancel():
            job[1].set_exception(error)
