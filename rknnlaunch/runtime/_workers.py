"""Pool workers: one thread or one process per context, each running a `FrameTask` on every frame.

Threads suit runtimes whose calls release the GIL; processes let CPU work (the binding's own
conversions, letterbox, decode) run on every CPU core. Process workers move frames in and outputs
back through shared memory: the caller's frame is copied once into a slot the worker reads in
place, and the worker writes its output arrays once into a slot the caller's result arrays view
(the slot is reused once those arrays are garbage). Small results (detections) are pickled.

No Python code of ours runs when a result is garbage-collected (no finalizers), and the pool's
lock is only entered through C: a Ctrl-C can neither be swallowed nor leave the lock held
(docs/sdk.md#ctrl-c).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import itertools
import math
import mmap
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from multiprocessing.shared_memory import SharedMemory
from typing import Any, Protocol

import numpy as np

from .._errors import InferenceError, WorkerDiedError
from ..npu import format_cores
from ._choice import LaunchPlan
from ._frames import InputSpec
from ._open import Runtime, open_plan
from ._rknnlite import RknnLiteFactory

GC_EVERY = 200
"""Frames between `gc.collect()` calls: RKNNLite loops are publicly reported to grow through
reference cycles that a periodic collection frees (docs/hardware.md)."""
GC_MIN_INTERVAL_S = 5.0
"""Thread workers share the caller's process, whose full collection can take tens of ms with the GIL
held (every worker stalls): there, collect at most this often. Worker processes freeze the objects
they started with (`gc.freeze`), so their collections only walk what the loop allocated."""
DEPTH = 2
"""Frames handed to one process worker at a time: one running, one waiting, so it never idles."""
MAX_RESTARTS = 3
"""Replacements of one worker (a core) before the pool stops replacing it."""
STOP_WAIT_S = 10.0
"""How long closing after a Ctrl-C waits for a worker thread (or a process's reader thread): one
blocked on a lock the interrupted main thread left held (docs/sdk.md#ctrl-c) never ends."""
VIEW_SLOTS = 8
"""Output slots per worker whose arrays callers may hold as views; beyond that, results are copied
out and the slot reused at once (a caller keeping every result must not pin unbounded memory)."""
_ALIGN = 64
SHM_DIR = "/dev/shm"
"""Where Linux keeps POSIX shared memory objects (glibc's shm_open opens files here)."""

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


SHM_FULL_FIX = (
    "SIGBUS from a shared-memory write: /dev/shm is full (containers get 64 MB by default; each "
    "worker holds 2 frames in and, for raw outputs, up to 10 sets of output arrays): mount a larger "
    "/dev/shm (Kubernetes: an emptyDir with medium: Memory at /dev/shm, docs/sdk.md#shared-memory), "
    "or use workers='thread'"
)


def describe_exit(code: int | None) -> str:
    """How a worker process ended, from its exit code (negative: the signal that killed it)."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _describe(cores: frozenset[int]) -> str:
    if not cores:
        return "the CPU"
    return f"NPU core{'s' if len(cores) > 1 else ''} {format_cores(cores)}"


class _Counter:
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


# --- threads --------------------------------------------------------------------------------------

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
        self._counter = _Counter(gc_every, GC_MIN_INTERVAL_S)
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


# --- processes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs, pickled once at its start."""

    plan: LaunchPlan
    """Exactly one group: the context this worker opens."""
    compatible_file: str | None
    """`NpuSettings.compatible_file`: not the settings object, whose pydantic import would double
    the forkserver's start-up."""
    factory: FactorySpec
    task: FrameTask
    cpus: frozenset[int] | None
    gc_every: int


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.dumps(exc)
    except Exception:
        return InferenceError(f"{type(exc).__name__}: {exc}", None)
    return exc


def keep_large_blocks() -> None:
    """Let glibc reuse freed multi-MB blocks instead of unmapping them.

    A runtime returns fresh output arrays every frame (YOLOv8's are ~5 MB as float32); with glibc's
    defaults a fresh worker process maps and unmaps them each time, page-faulting every page
    (~1,200 faults, several ms of CPU per frame measured on the simulated NPU). Fixed thresholds
    keep them on the heap; the footprint stays that of one frame's arrays.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: nothing to tune
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 64 << 20)
    mallopt(m_trim_threshold, 256 << 20)


def worker_main(conn: multiprocessing.connection.Connection, spec: WorkerSpec) -> None:
    """A worker process: open the context, then run jobs until told to stop or the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops us
    keep_large_blocks()
    if spec.cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, spec.cpus)
    try:
        runtime = open_plan(spec.plan, spec.compatible_file, resolve_factory(spec.factory))[0]
    except BaseException as exc:
        with contextlib.suppress(OSError):
            conn.send(("failed", _picklable(exc)))
        return
    inputs: dict[int, SharedMemory] = {}
    outputs = _OutputSlots()
    counter = _Counter(spec.gc_every)
    try:
        run = spec.task.bind(runtime)
        gc.collect()
        gc.freeze()  # what exists now lives as long as the worker: periodic collections skip it
        conn.send(("ready", runtime.label, os.getpid(), runtime.inputs))
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the parent is gone: release the context and leave
                return
            if message[0] != "job":
                return
            _, job_id, in_slot, in_name, layout, several, out_slot = message
            if in_name is not None:
                old = inputs.pop(in_slot, None)
                if old is not None:
                    old.close()
                inputs[in_slot] = SharedMemory(name=in_name)
            buffer = inputs[in_slot].buf
            arrays = [
                np.ndarray(shape, np.dtype(dtype), buffer=buffer, offset=start)
                for start, shape, dtype in layout
            ]
            frame: WorkerFrame = arrays if several else arrays[0]
            del arrays, buffer
            try:
                result = run(frame)
            except BaseException as exc:
                reply: tuple[Any, ...] = ("done", job_id, "error", _picklable(exc))
            else:
                reply = ("done", job_id, *outputs.pack(result, out_slot))
            del frame
            conn.send(reply)
            del reply
            counter.tick()
    except (EOFError, OSError):
        return
    finally:
        runtime.close()
        outputs.close()
        for shm in inputs.values():
            with contextlib.suppress(BufferError, OSError):
                shm.close()


OutputSpec = tuple[int, tuple[int, ...], str]
"""Where one array lies in a shared-memory block: (byte offset, shape, dtype string)."""


def input_layout(arrays: Sequence[np.ndarray[Any, Any]]) -> tuple[list[OutputSpec], int]:
    """Where a frame's arrays go in an input slot (each 64-byte aligned), and the bytes it needs."""
    layout: list[OutputSpec] = []
    offset = 0
    for array in arrays:
        layout.append((offset, array.shape, array.dtype.str))
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    return layout, offset


class _OutputSlots:
    """A worker's output blocks, one per slot, and the arrays its last layout wrote through.

    A model returns the same shapes every frame, so a slot's destination arrays and its layout
    are made once: the reply carries the layout only when it changed (None otherwise).
    """

    def __init__(self) -> None:
        self._blocks: dict[int, SharedMemory] = {}
        self._layouts: dict[int, tuple[list[OutputSpec], list[np.ndarray[Any, Any]]]] = {}

    def pack(self, result: Any, slot: int) -> tuple[str, Any]:
        """Arrays go into the output slot (one copy); anything else is pickled with the reply."""
        if not (isinstance(result, list) and result and all(isinstance(a, np.ndarray) for a in result)):
            return "object", result
        specs: list[OutputSpec] = []
        offset = 0
        for array in result:
            specs.append((offset, array.shape, array.dtype.str))
            offset += -(-array.nbytes // _ALIGN) * _ALIGN
        shm = self._blocks.get(slot)
        name = None
        if shm is None or shm.size < offset:
            self._layouts.pop(slot, None)  # its arrays view the old block
            if shm is not None:
                shm.close()  # the parent unlinks the old block when it learns the new name
            shm = self._blocks[slot] = SharedMemory(create=True, size=max(offset, 1))
            name = shm.name
        known = self._layouts.get(slot)
        if known is None or known[0] != specs:
            destinations: list[np.ndarray[Any, Any]] = [
                np.ndarray(shape, np.dtype(dtype), buffer=shm.buf, offset=start)
                for start, shape, dtype in specs
            ]
            known = self._layouts[slot] = (specs, destinations)
            changed: list[OutputSpec] | None = specs
        else:
            changed = None
        for destination, array in zip(known[1], result, strict=True):
            destination[...] = array
        return "arrays", (slot, name, changed)

    def close(self) -> None:
        self._layouts.clear()  # arrays first: they view the blocks
        for shm in self._blocks.values():
            with contextlib.suppress(BufferError, OSError):
                shm.close()


def start_forkserver() -> None:
    """Start (once per program) the server that forks worker processes, with the worker code imported.

    It boots in the background: calling this before other start-up work (discovery, model checks)
    overlaps the two; each worker is then a cheap fork of the server.
    """
    multiprocessing.get_context("forkserver").set_forkserver_preload([__name__])
    from multiprocessing import forkserver

    forkserver.ensure_running()


@dataclass(frozen=True)
class _OutputBlock:
    """A worker's output block as the parent maps it.

    A plain mmap, never closed by us: result arrays view it (numpy keeps the mmap, not a buffer
    export, so an explicit close would leave them dangling); it is unmapped when the last array
    and the pool have let go of it. The name is unlinked when the block is replaced or at close.
    """

    name: str
    memory: mmap.mmap

    @classmethod
    def open(cls, name: str) -> _OutputBlock:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR)
        try:
            return cls(name, mmap.mmap(fd, os.fstat(fd).st_size))
        finally:
            os.close(fd)

    def unlink(self) -> None:
        """Remove the name (and the resource tracker's record of it); mappings stay valid."""
        with contextlib.suppress(FileNotFoundError):
            block = SharedMemory(name=self.name)
            block.unlink()
            block.close()


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
    out_blocks: dict[int, _OutputBlock] = field(default_factory=dict)
    out_count: int = 0
    out_layouts: dict[int, list[_ArraySlice]] = field(default_factory=dict)
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
        self._retired_out: list[_OutputBlock] = []
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
                    f"the worker for {_describe(failed[0].cores)} exited while opening its runtime",
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
                    proc.out_blocks[slot] = _OutputBlock.open(name)
                if specs is not None:
                    proc.out_layouts[slot] = [_ArraySlice.of(spec) for spec in specs]
                proc.reclaim()
                copy = len(proc.lent) >= VIEW_SLOTS
                base, arrays = _views(proc.out_blocks[slot].memory, proc.out_layouts[slot])
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
        where = _describe(proc.cores)
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


@dataclass(frozen=True)
class _ArraySlice:
    """One output array's bytes in its block, resolved once per layout."""

    start: int
    end: int
    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    @classmethod
    def of(cls, spec: OutputSpec) -> _ArraySlice:
        start, shape, dtype = spec
        resolved = np.dtype(dtype)
        return cls(start, start + math.prod(shape) * resolved.itemsize, resolved, tuple(shape))


def _views(
    memory: mmap.mmap, layout: list[_ArraySlice]
) -> tuple[np.ndarray[Any, Any], list[np.ndarray[Any, Any]]]:
    """Arrays viewing an output block, and their common base: the slot is free again once the
    base is garbage (every array keeps it, and it keeps the mapping)."""
    base: np.ndarray[Any, Any] = np.frombuffer(memory, np.uint8)
    views = [base[part.start : part.end].view(part.dtype).reshape(part.shape) for part in layout]
    return base, views
