"""rknnlaunch: run RKNN models on the NPU cores Kubernetes gave this pod, with reasons instead of -1.

Importing this package pulls in neither grpcio nor OpenCV nor onnxruntime; those load on first use.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    BackendUnavailableError,
    DiscoveryError,
    InferenceError,
    MaskError,
    ModelError,
    NpuNotFoundError,
    RknnLaunchError,
    RuntimeInitError,
    SettingsError,
    UnknownSocError,
    UnsupportedDriverError,
    UsageError,
    WorkerDiedError,
)
from ._version import __version__
from .settings._env import NpuSettings

if TYPE_CHECKING:
    from .pipeline._detector import Detector, DetectResult, StageTimings
    from .runtime._open import Runtime, open
    from .runtime._pool import Pool

# The runtime (numpy and friends) loads on first use, so the device plugin, which imports only
# `rknnlaunch.npu` and the errors, stays small (its RSS budget is 60 MB; numpy alone is ~14 MB).
_LAZY = {
    "DetectResult": ".pipeline._detector",
    "Detector": ".pipeline._detector",
    "Pool": ".runtime._pool",
    "Runtime": ".runtime._open",
    "StageTimings": ".pipeline._detector",
    "open": ".runtime._open",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BackendUnavailableError",
    "DetectResult",
    "Detector",
    "DiscoveryError",
    "InferenceError",
    "MaskError",
    "ModelError",
    "NpuNotFoundError",
    "NpuSettings",
    "Pool",
    "RknnLaunchError",
    "Runtime",
    "RuntimeInitError",
    "SettingsError",
    "StageTimings",
    "UnknownSocError",
    "UnsupportedDriverError",
    "UsageError",
    "WorkerDiedError",
    "open",
    "__version__",
]
