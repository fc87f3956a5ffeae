"""Process workers, the parent's side: one process per context, jobs scheduled onto free slots, dead
workers replaced (at most `MAX_RESTARTS` times), closing with or without a Ctrl-C.

The pool's lock is only entered through C: a Ctrl-C can neither be swallowed nor leave the lock held
(docs/sdk.md#ctrl-c)."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import multiprocessing.connection
import signal
import threading
import weakref
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from .._errors import InferenceError, WorkerDiedError
from ..npu import format_cores
from ._child import WorkerSpec, worker_main
from ._choice import LaunchPlan
from ._frames import InputSpec
from ._shm import (
    SHM_FULL_FIX,
    VIEW_SLOTS,
    ArraySlice,
    OutputBlock,
    input_layout,
    views_of,
)
from ._tasks import (
    GC_EVERY,
    STOP_WAIT_S,
    FactorySpec,
    FrameTask,
    WorkerFrame,
)

DEPTH = 2
"""Frames handed to one process worker at a time: one running, one waiting, so it never idles."""
MAX_RESTARTS = 3
"""Replacements of one worker (a core) before the pool stops replacing it."""


def describe_exit(code: int | None) -> str:
    """How a worker process ended, from its exit code (negative: the signal that killed it)."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def describe_cores(cores: frozenset[int]) -> str:
    if not cores:
        return "the CPU"
    return f"NPU core{'s' if len(cores) > 1 else ''} {format_cores(cores)}"


def start_forkserver() -> None:
    """Start (once per program) the server that forks worker processes, with the worker code imported.

    It boots in the background: calling this before other start-up work (discovery, model checks)
    overlaps the two; each worker is then a cheap fork of the server.
    """
    multiprocessing.get_context("forkserver").set_forkserver_preload(["rknnlaunch.runtime._child", __name__])
    from multiprocessing import forkserver

    forkserver.ensure_running()


@dataclass
class _Job:
    frame: WorkerFrame | None
    future: Future[Any]
    in_slot: int = -1
    out_slot: int = -1
    sent: bool = False
    """The job message went to the worker. False while in flight: the send was interrupted (a Ctrl-C
    in the submitting thread), so no reply will come; the worker's exit at close resolves it."""


@dataclass
class _Proc:
    """The parent's view of one worker process."""

    index: int
    cores: frozenset[int]
    restarts: int
    process: Any = None
    conn: Any = None
    state: str = "starting"  # starting -> ready -> dead | stopped
    label: str = ""
    pid: int = 0
    error: BaseException | None = None
    inputs: tuple[InputSpec, ...] = ()
    inflight: dict[int, _Job] = field(default_factory=dict)
    free_in: deque[int] = field(default_factory=lambda: deque(range(DEPTH)))
    in_shm: list[SharedMemory | None] = field(default_factory=lambda: [None] * DEPTH)
    free_out: deque[int] = field(default_factory=deque)
    out_blocks: dict[int, OutputBlock] = field(default_factory=dict)
    out_count: int = 0
    out_layouts: dict[int, list[ArraySlice]] = field(default_factory=dict)
    """Per output slot, where its arrays lie (the worker sends a layout only when it changes)."""
    lent: list[tuple[weakref.ref[np.ndarray[Any, Any]], int]] = field(default_factory=list)
    """Output slots whose arrays a caller may still hold: (the arrays' common base, slot)."""
    reader: threading.Thread | None = None

    def reclaim(self) -> None:
        """Free the output slots whose arrays are all garbage. Pool lock held."""
        if any(ref() is None for ref, _ in self.lent):
            self.free_out.extend(slot for ref, slot in self.lent if ref() is None)
            self.lent = [(ref, slot) for ref, slot in self.lent if ref() is not None]


class ProcessWorkers:
    """One process per context of ``plan``; frames through shared memory; dead workers replaced."""

    kind = "process"

    def __init__(
        self,
        plan: LaunchPlan,
        compatible_file: str | None,
        factory: FactorySpec,
        task: FrameTask,
        cpus: frozenset[int] | None = None,
        gc_every: int = GC_EVERY,
        start_method: str = "forkserver",
    ) -> None:
        self._plan = plan
        self._compatible_file = compatible_file
        self._factory = factory
        self._task = task
        self._cpus = cpus
        self._gc_every = gc_every
        self._context: Any = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            start_forkserver()
        # Entered as ``with self._lock`` (C-level __enter__), never through the Condition's Python
        # __enter__, after which a Ctrl-C can leave the lock held for good (docs/sdk.md#ctrl-c).
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._backlog: deque[_Job] = deque()
        self._ids = itertools.count()
        self._closed = False
        self._retired: list[SharedMemory] = []
        self._retired_out: list[OutputBlock] = []
        groups = plan.groups if plan.backend == "npu" else (frozenset(),)
        self._procs = [_Proc(index, cores, 0) for index, cores in enumerate(groups)]
        try:
            for proc in self._procs:
                self._start(proc)
            with self._lock:
                self._changed.wait_for(lambda: all(p.state != "starting" for p in self._procs))
                failed = [p for p in self._procs if p.state != "ready"]
            if failed:
                raise failed[0].error or InferenceError(
                    f"the worker for {describe_cores(failed[0].cores)} exited while opening its runtime",
                    "run `rknnlaunch doctor`; try workers='thread' to see the runtime's log in this process",
                )
        except BaseException:
            self._shutdown(graceful=False)
            raise
        self.labels = tuple(proc.label for proc in self._procs)
        self.inputs: tuple[InputSpec, ...] = self._procs[0].inputs
        """What a frame is, as the first worker's runtime reported it."""

    @property
    def size(self) -> int:
        return len(self._procs)

    @property
    def pids(self) -> tuple[int, ...]:
        """Process ids of the live workers."""
        with self._lock:
            return tuple(p.pid for p in self._procs if p.state in ("starting", "ready") and p.pid)

    def _start(self, proc: _Proc) -> None:
        plan = self._plan if self._plan.backend == "cpu" else replace(self._plan, groups=(proc.cores,))
        spec = WorkerSpec(plan, self._compatible_file, self._factory, self._task, self._cpus, self._gc_every)
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(
            target=worker_main, args=(child_end, spec), name=f"rknnlaunch-worker-{proc.index}", daemon=True
        )
        process.start()
        child_end.close()  # so the parent sees EOF when the worker dies
        proc.process, proc.conn, proc.pid = process, parent_end, process.pid or 0
        proc.reader = threading.Thread(
            target=self._read, args=(proc,), name=f"rknnlaunch-reader-{proc.index}", daemon=True
        )
        proc.reader.start()

    def _read(self, proc: _Proc) -> None:
        while True:
            try:
                message = proc.conn.recv()
            except (EOFError, OSError):
                self._died(proc)
                return
            kind = message[0]
            if kind == "ready":
                with self._lock:
                    proc.state, proc.label, proc.inputs = "ready", message[1], message[3]
                    self._fill(proc)
                    self._changed.notify_all()
            elif kind == "failed":
                with self._lock:
                    proc.error = message[1]
            elif kind == "done":
                self._done(proc, message[1], message[2], message[3])

    def _done(self, proc: _Proc, job_id: int, kind: str, payload: Any) -> None:
        arrays: list[np.ndarray[Any, Any]] = []
        with self._lock:
            job = proc.inflight.pop(job_id)
            proc.free_in.append(job.in_slot)
            copy = False
            if kind == "arrays":
                slot, name, specs = payload
                if name is not None:
                    old = proc.out_blocks.pop(slot, None)
                    if old is not None:
                        old.unlink()
                    proc.out_blocks[slot] = OutputBlock.open(name)
                if specs is not None:
                    proc.out_layouts[slot] = [ArraySlice.of(spec) for spec in specs]
                proc.reclaim()
                copy = len(proc.lent) >= VIEW_SLOTS
                base, arrays = views_of(proc.out_blocks[slot].memory, proc.out_layouts[slot])
                if not copy:
                    proc.lent.append((weakref.ref(base), slot))
                del base
            else:
                proc.free_out.append(job.out_slot)
            self._fill(proc)
            self._changed.notify_all()
        if copy:
            arrays = [array.copy() for array in arrays]
            proc.free_out.append(payload[0])  # the copies are the caller's: the slot is free now
        if kind == "error":
            job.future.set_exception(payload)
        elif kind == "object":
            job.future.set_result(payload)
        else:
            job.future.set_result(arrays)

    def _died(self, proc: _Proc) -> None:
        process = proc.process
        process.join()
        code = process.exitcode
        how = describe_exit(code)
        replacement: _Proc | None = None
        with self._lock:
            was = proc.state
            proc.state = "dead" if was != "stopped" else "stopped"
            lost = list(proc.inflight.values())
            proc.inflight.clear()
            self._retired.extend(s for s in proc.in_shm if s is not None)
            self._retired_out.extend(proc.out_blocks.values())
            proc.in_shm, proc.out_blocks = [None] * DEPTH, {}
            replace_it = was == "ready" and not self._closed and proc.restarts < MAX_RESTARTS
            if replace_it:
                replacement = _Proc(proc.index, proc.cores, proc.restarts + 1)
                self._procs[self._procs.index(proc)] = replacement
            self._changed.notify_all()
        where = describe_cores(proc.cores)
        what = f"the pool worker for {where} (pid {proc.pid}) {how} while running this frame"
        if code == -signal.SIGBUS:
            fix = SHM_FULL_FIX
        elif replacement is not None:
            fix = "the pool started a replacement; resubmit the frame"
        elif was == "ready" and not self._closed:
            fix = (
                f"the pool stops replacing it after {MAX_RESTARTS} deaths: check the runtime log above "
                "and `rknnlaunch doctor`"
            )
        else:
            fix = "the pool is closing"
        error = WorkerDiedError(what, fix, tuple(sorted(proc.cores)))
        for job in lost:
            job.future.set_exception(error)
        if replacement is not None:
            try:
                self._start(replacement)
            except BaseException as exc:
                with self._lock:
                    replacement.state, replacement.error = "dead", exc
                    self._changed.notify_all()
        with self._lock:
            if was == "starting" and proc.error is None:
                proc.error = InferenceError(
                    f"the worker for {where} (pid {proc.pid}) {how} while opening its runtime",
                    SHM_FULL_FIX
                    if code == -signal.SIGBUS
                    else "if the program starts the pool as its main module is imported, move that "
                    'under `if __name__ == "__main__":` (each worker imports the main module); '
                    "otherwise run `rknnlaunch doctor`; workers='thread' shows the runtime's log in "
                    "this process",
                )
            self._fail_backlog_if_nobody_left()

    def _fail_backlog_if_nobody_left(self) -> None:
        """With no worker ready or starting, queued frames would wait forever: fail them. Lock held."""
        if any(p.state in ("starting", "ready") for p in self._procs):
            return
        error = InferenceError(
            "every worker of this pool has died and none can be replaced",
            "check the runtime log and `rknnlaunch doctor`; the pool replaces a worker at most "
            f"{MAX_RESTARTS} times",
        )
        while self._backlog:
            job = self._backlog.popleft()
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(error)

    def _fill(self, proc: _Proc) -> None:
        """Hand queued frames to ``proc`` while it has room. Lock held."""
        while proc.state == "ready" and proc.free_in and self._backlog:
            job = self._backlog.popleft()
            if job.future.set_running_or_notify_cancel():
                self._dispatch(proc, job)

    def _dispatch(self, proc: _Proc, job: _Job) -> None:
        """Copy the frame into a free input slot and send the job. Lock held, future running."""
        frame = job.frame
        job.frame = None
        several = isinstance(frame, list)
        arrays: list[np.ndarray[Any, Any]] = frame if isinstance(frame, list) else [frame]  # type: ignore[list-item]
        layout, size = input_layout(arrays)
        slot = proc.free_in.popleft()
        shm, name = proc.in_shm[slot], None
        if shm is None or shm.size < size:
            if shm is not None:
                self._release(shm)
            shm = proc.in_shm[slot] = SharedMemory(create=True, size=max(size, 1))
            name = shm.name
        for (start, shape, _), array in zip(layout, arrays, strict=True):
            np.ndarray(shape, array.dtype, buffer=shm.buf, offset=start)[...] = array
        del arrays
        job.in_slot = slot
        proc.reclaim()
        if proc.free_out:
            job.out_slot = proc.free_out.popleft()
        else:
            job.out_slot, proc.out_count = proc.out_count, proc.out_count + 1
        job_id = next(self._ids)
        proc.inflight[job_id] = job
        # KeyboardInterrupt can land anywhere in the submitting (main) thread, also after the job is
        # in flight but before its message left: `sent` stays False and close() does not wait for
        # a reply that will never come (it did, forever, on a Ctrl-C during submit).
        with contextlib.suppress(OSError):  # a dead worker: its reader fails the job
            proc.conn.send(("job", job_id, slot, name, layout, several, job.out_slot))
        job.sent = True

    def submit(self, frame: WorkerFrame) -> Future[Any]:
        future: Future[Any] = Future()
        job = _Job(frame, future)
        with self._lock:
            if self._closed:
                raise InferenceError("this pool is closed", "create a new rknnlaunch.Pool")
            if not any(p.state in ("starting", "ready") for p in self._procs):
                raise InferenceError(
                    "every worker of this pool has died and none can be replaced",
                    "close it and check the runtime log and `rknnlaunch doctor`",
                )
            ready = [p for p in self._procs if p.state == "ready" and p.free_in]
            if ready and not self._backlog:
                proc = min(ready, key=lambda p: len(p.inflight))
                future.set_running_or_notify_cancel()
                self._dispatch(proc, job)
            else:
                self._backlog.append(job)
        return future

    def close(self, wait: bool = True) -> None:
        """Finish every submitted frame (``wait``; else fail the queued ones and let only the running
        ones end), stop the workers, release their contexts and the memory."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._shutdown(graceful=wait)

    def _shutdown(self, graceful: bool) -> None:
        self._closed = True
        try:
            if graceful:
                with self._lock:
                    # Only frames a worker was sent: one whose send a Ctrl-C interrupted gets no
                    # reply; the worker exits on "stop" and its reader fails that frame.
                    self._changed.wait_for(
                        lambda: (
                            not self._backlog
                            and not any(
                                job.sent
                                for p in self._procs
                                if p.state == "ready"
                                for job in p.inflight.values()
                            )
                        )
                    )
        finally:
            with self._lock:
                procs = list(self._procs)
                for proc in procs:
                    if proc.state in ("starting", "ready"):
                        proc.state = "stopped"
                    if proc.conn is not None:
                        with contextlib.suppress(OSError):
                            proc.conn.send(("stop",))
            for proc in procs:
                self._stop(proc)
            with self._lock:
                procs = list(self._procs)  # a worker that died meanwhile may have a replacement
                error = InferenceError(
                    "this pool was closed before the frame ran", "create a new rknnlaunch.Pool"
                )
                while self._backlog:
                    job = self._backlog.popleft()
                    if job.future.set_running_or_notify_cancel():
                        job.future.set_exception(error)
            for proc in procs:
                self._stop(proc)
                for shm in proc.in_shm:
                    if shm is not None:
                        self._release(shm)
                for block in proc.out_blocks.values():
                    block.unlink()
            for shm in self._retired:
                self._release(shm)
            for block in self._retired_out:
                block.unlink()

    @staticmethod
    def _stop(proc: _Proc) -> None:
        process = proc.process
        if process is None:
            return
        process.join(timeout=10)
        if process.is_alive():  # a runtime stuck in the driver: do not leave it behind
            process.terminate()
            process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()
        if proc.reader is not None and proc.reader is not threading.current_thread():
            # Ends at the pipe's EOF, unless stuck on a lock a Ctrl-C left held (docs/sdk.md#ctrl-c).
            proc.reader.join(STOP_WAIT_S)
        with contextlib.suppress(OSError):
            proc.conn.close()

    @staticmethod
    def _release(shm: SharedMemory) -> None:
        """Unlink and unmap an input block (only workers read those, never a caller's array)."""
        with contextlib.suppress(FileNotFoundError):
            shm.unlink()
        shm.close()
