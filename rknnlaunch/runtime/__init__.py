"""Running models: the RKNNLite seam, NPU and CPU runtimes, `open()`, `Pool`, and the device-tree redirect."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._choice import BACKENDS, CONTEXTS_PER_CORE, LaunchPlan
    from ._dtcompat import child_environment, replacement_for
    from ._open import Runtime, open, open_plan, plan
    from ._pool import CpuAffinity, Pool, WorkerFront, WorkerGroup, WorkerKind
    from ._rknnlite import RknnLiteFactory, RknnLiteLike, capture_runtime_log
    from ._workers import DEPTH, FactorySpec

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "child_environment": "._dtcompat",
    "replacement_for": "._dtcompat",
    "BACKENDS": "._choice",
    "CONTEXTS_PER_CORE": "._choice",
    "CpuAffinity": "._pool",
    "DEPTH": "._workers",
    "FactorySpec": "._workers",
    "LaunchPlan": "._choice",
    "Pool": "._pool",
    "RknnLiteFactory": "._rknnlite",
    "RknnLiteLike": "._rknnlite",
    "Runtime": "._open",
    "WorkerFront": "._pool",
    "WorkerGroup": "._pool",
    "WorkerKind": "._pool",
    "capture_runtime_log": "._rknnlite",
    "open": "._open",
    "open_plan": "._open",
    "plan": "._open",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "BACKENDS",
    "CONTEXTS_PER_CORE",
    "CpuAffinity",
    "DEPTH",
    "FactorySpec",
    "LaunchPlan",
    "Pool",
    "RknnLiteFactory",
    "RknnLiteLike",
    "Runtime",
    "WorkerFront",
    "WorkerGroup",
    "WorkerKind",
    "capture_runtime_log",
    "child_environment",
    "open",
    "open_plan",
    "plan",
    "replacement_for",
]
