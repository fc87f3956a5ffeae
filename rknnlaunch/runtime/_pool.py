"""`rknnlaunch.Pool`: one context per allocated core (the throughput path), threads or processes.

One multi-core context is a latency tool: YOLOv8s takes 32/23/18 ms on 1/2/3 RK3588 cores in ONE
context (~55 FPS on three), while three single-core contexts give ~94 FPS (docs/sdk.md, "Latency or
throughput"). So the pool opens one context per core (``contexts_per_core=2``: two per core) and
feeds each from its own worker thread or process; `open()` stays the one-context latency path.
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, Literal

import numpy as np

from .._errors import UsageError
from ..npu import HostRoot, format_cores
from ..settings._env import NpuSettings, load_settings
from . import _workers
from ._affinity import find_big_cpus
from ._choice import LaunchPlan, Layout, choose_contexts
from ._closing import ClosesOnExit
from ._frames import Frame, InputSpec, check_frame
from ._open import open_plan, plan
from ._workers import (
    DEPTH,
    FactorySpec,
    FrameTask,
    InferTask,
    ProcessWorkers,
    ThreadWorkers,
    resolve_factory,
)

WorkerKind = Literal["thread", "process"]
WORKER_KINDS: tuple[str, ...] = ("thread", "process")
CpuAffinity = Literal["big"] | Iterable[int] | None


def _cpus_for(affinity: CpuAffinity, settings: NpuSettings) -> frozenset[int] | None:
    """The CPUs to pin process workers to, within what this process may use (None: no pinning)."""
    if affinity is None:
        return None
    wanted = (
        find_big_cpus(HostRoot(settings.root)) if affinity == "big" else frozenset(int(c) for c in affinity)
    )
    usable = wanted & frozenset(os.sched_getaffinity(0))
    return usable or None


class WorkerGroup:
    """The plan and running workers behind a `Pool` or a `Detector` (one place that starts them)."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        cores: Iterable[int] | str | None,
        backend: str,
        settings: NpuSettings | None,
        rknnlite: FactorySpec,
        contexts_per_core: int,
        workers: str,
        cpu_affinity: CpuAffinity,
        make_task: Callable[[LaunchPlan], FrameTask],
        gc_every: int | None = None,
        max_contexts: int | None = None,
        layout: Layout = "per-core",
        launch_plan: LaunchPlan | None = None,
    ) -> None:
        if workers not in WORKER_KINDS:
            raise UsageError(f"workers={workers!r} is not a worker kind", "use 'thread' or 'process'")
        if cpu_affinity is not None and workers != "process":
            raise UsageError(
                "cpu_affinity= pins worker processes", "add workers='process', or drop cpu_affinity="
            )
        if workers == "process":
            _workers.start_forkserver()  # boots while the plan is made
        settings = settings if settings is not None else load_settings()
        if launch_plan is None:
            chosen = plan(model, cores, backend, settings, layout, contexts_per_core)
        elif launch_plan.backend == "npu" and launch_plan.target is not None:
            # Already discovered and checked (the bench): only the pure decision again.
            chosen = dataclasses.replace(
                choose_contexts(
                    "npu", launch_plan.model, launch_plan.target, cores, layout, contexts_per_core
                ),
                inputs=launch_plan.inputs,  # the header was read when the plan was made
            )
        else:
            chosen = launch_plan
        if max_contexts is not None:
            chosen = dataclasses.replace(chosen, groups=chosen.groups[:max_contexts])
        self.plan: LaunchPlan = chosen
        self.task = task = make_task(chosen)
        self.cpus = _cpus_for(cpu_affinity, settings)
        gc_every = gc_every if gc_every is not None else _workers.GC_EVERY
        self.workers: ThreadWorkers | ProcessWorkers
        if workers == "process":
            self.workers = ProcessWorkers(
                self.plan, settings.compatible_file, rknnlite, task, self.cpus, gc_every
            )
        else:
            runtimes = open_plan(self.plan, settings.compatible_file, resolve_factory(rknnlite))
            self.workers = ThreadWorkers(runtimes, task, gc_every)
        self.backend: str = self.plan.backend
        self.cores: frozenset[int] = (
            frozenset().union(*self.plan.groups) if self.backend == "npu" else frozenset()
        )
        if self.backend == "npu":
            target = self.plan.target
            soc = target.info.soc.name if target is not None else "?"
            count = self.workers.size
            kind = "process" if workers == "process" else "thread"
            self.label = (
                f"NPU {soc} cores {format_cores(self.cores)}: {count} context{'s' if count > 1 else ''} "
                f"({kind} workers)"
            )
        else:
            self.label = self.workers.labels[0]

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        """What a frame is for this model (from the .rknn header, or the ONNX session on the CPU)."""
        return self.workers.inputs


def _infer_task(_plan: LaunchPlan) -> FrameTask:
    return InferTask()


class WorkerFront(ClosesOnExit):
    """What `Pool` and `Detector` share: the started `WorkerGroup`, its description, closing."""

    def _adopt(self, group: WorkerGroup) -> None:
        self._group = group
        self._workers = group.workers
        self.backend = group.backend
        self.cores = group.cores
        self.label = group.label
        self.labels: tuple[str, ...] = self._workers.labels
        """One label per context (``NPU rk3588 core 0 (mask 1)``)."""

    @property
    def size(self) -> int:
        """Number of contexts (and workers)."""
        return self._workers.size

    def close(self) -> None:
        """Finish queued frames, stop the workers and release every context (idempotent)."""
        self._workers.close()

    def _close_interrupted(self) -> None:
        self._workers.close(wait=False)


class Pool(WorkerFront):
    """One runtime per allocated NPU core (``contexts_per_core`` per core), fed by worker threads
    (default) or processes (``workers="process"``).

    ``infer(x)`` blocks for one result; ``submit(x) -> Future``; ``map(frames)`` yields results in
    input order while keeping every context busy. ``x`` is a frame: one array for a one-input model
    (a letterboxed NHWC uint8 image for a YOLO), or a list with one array per model input, as
    `rknnlaunch.open` takes it (``pool.inputs`` says what); a wrong count, shape or dtype is a
    `UsageError` at once, before any worker sees it. Arguments as for `rknnlaunch.open`, plus:

    - ``contexts_per_core``: 1, or 2 to keep a core busy while the other context's frame is converted;
    - ``workers``: ``"thread"`` (the runtime releases the GIL while the NPU runs) or ``"process"``
      (one process per context: the binding's GIL-held conversions run in parallel; frames travel
      through shared memory; ``rknnlite`` must then be picklable or a ``"module:callable"`` string);
    - ``cpu_affinity``: process workers only: ``"big"`` (the big cores found in sysfs, e.g. RK3588's
      A76s) or CPU numbers.

    A worker process that dies fails only its in-flight frames (`WorkerDiedError` naming the core)
    and is replaced. ``close()`` finishes every submitted frame, then releases every context.
    A submitted frame is read when a worker takes it (threads) or is copied into shared memory when
    it is handed to a worker process, not at ``submit``: do not overwrite it before its result is
    back (copy a reused letterbox buffer, or use `rknnlaunch.Detector`).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        cores: Iterable[int] | str | None = None,
        backend: str = "auto",
        *,
        settings: NpuSettings | None = None,
        rknnlite: FactorySpec = None,
        contexts_per_core: int = 1,
        workers: WorkerKind = "thread",
        cpu_affinity: CpuAffinity = None,
    ) -> None:
        self._adopt(
            WorkerGroup(
                model,
                cores,
                backend,
                settings,
                rknnlite,
                contexts_per_core,
                workers,
                cpu_affinity,
                _infer_task,
            )
        )
        self.workers: str = self._workers.kind
        self.inputs: tuple[InputSpec, ...] = self._group.inputs
        """What a frame is: one `InputSpec` per model input (``rknnlaunch model inspect`` lists them)."""

    def submit(self, x: Frame) -> Future[list[np.ndarray[Any, Any]]]:
        """Queue one frame (checked here, before any worker sees it); the Future resolves to the
        model's outputs as the runtime returns them."""
        return self._workers.submit(check_frame(x, self.inputs))

    def infer(self, x: Frame) -> list[np.ndarray[Any, Any]]:
        """Run one frame on whichever context is free; blocks for its outputs."""
        return self.submit(x).result()

    def map(
        self, frames: Iterable[Any], in_flight: int | None = None
    ) -> Iterator[list[np.ndarray[Any, Any]]]:
        """Outputs for ``frames`` in input order; at most ``in_flight`` queued (default 2 per context)."""
        limit = max(1, in_flight if in_flight is not None else DEPTH * self.size)
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

    def __repr__(self) -> str:
        return f"<Pool {self.label!r}>"
