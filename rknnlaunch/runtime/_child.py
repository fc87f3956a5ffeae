"""The worker process's side: open the context, then read each frame from its shared-memory slot, run
the task and write the outputs back, until told to stop or the parent is gone."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
from dataclasses import dataclass
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import InferenceError
from ._choice import LaunchPlan
from ._open import open_plan
from ._shm import (
    OutputSlots,
)
from ._tasks import (
    FactorySpec,
    FrameTask,
    GcCounter,
    WorkerFrame,
    resolve_factory,
)


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
    outputs = OutputSlots()
    counter = GcCounter(spec.gc_every)
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
            arrays: list[npt.NDArray[Any]] = [
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
