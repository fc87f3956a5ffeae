"""Pool workers: one thread or one process per context, each running a `FrameTask` on every frame.

Threads suit runtimes whose calls release the GIL; processes let CPU work (the binding's own
conversions, letterbox, decode) run on every CPU core. Process workers move frames in and outputs
back through shared memory: the caller's frame is copied once into a slot the worker reads in
place, and the worker writes its output arrays once into a slot the caller's result arrays view
(the slot is reused once those arrays are garbage). Small results (detections) are pickled.

No Python code of ours runs when a result is garbage-collected (no finalizers), and the pool's
lock is only entered through C: a Ctrl-C can neither be swallowed nor leave the lock held
(docs/sdk.md#ctrl-c).

This module is the front the pool and the detector import; each concept has its own module:
`_tasks` (task protocol, factory resolution, garbage collection), `_threads` (thread workers),
`_child` (the worker process's loop), `_shm` (shared-memory slots), `_processes` (process
scheduling and restart).
"""

from __future__ import annotations

from ._child import WorkerSpec, keep_large_blocks, worker_main
from ._processes import DEPTH, MAX_RESTARTS, ProcessWorkers, describe_exit, start_forkserver
from ._shm import SHM_DIR, SHM_FULL_FIX, VIEW_SLOTS
from ._tasks import (
    GC_EVERY,
    GC_MIN_INTERVAL_S,
    STOP_WAIT_S,
    FactorySpec,
    FrameTask,
    InferTask,
    WorkerFrame,
    resolve_factory,
)
from ._threads import ThreadWorkers

__all__ = [
    "DEPTH",
    "GC_EVERY",
    "GC_MIN_INTERVAL_S",
    "MAX_RESTARTS",
    "SHM_DIR",
    "SHM_FULL_FIX",
    "STOP_WAIT_S",
    "VIEW_SLOTS",
    "FactorySpec",
    "FrameTask",
    "InferTask",
    "ProcessWorkers",
    "ThreadWorkers",
    "WorkerFrame",
    "WorkerSpec",
    "describe_exit",
    "keep_large_blocks",
    "resolve_factory",
    "start_forkserver",
    "worker_main",
]
