"""rknnlaunch: run RKNN models on the NPU cores Kubernetes gave this pod, with reasons instead of -1.

Importing this package loads only the exception tree: pydantic (settings), numpy (runtimes, YOLO)
and grpcio/OpenCV/onnxruntime load on first use, so `rknnlaunch run` (every container's ENTRYPOINT)
and the device plugin, which imports only `rknnlaunch.npu`, start fast and small.
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

if TYPE_CHECKING:
    from .pipeline._detector import Detector, DetectResult, StageTimings
    from .runtime._open import Runtime, open
    from .runtime._pool import Pool
    from .runtime._rknnlite import RknnLiteFactory, RknnLiteLike
    from .settings._env import NpuSettings, load_settings

# name -> module that defines it, imported on first attribute access.
_LAZY = {
    "DetectResult": ".pipeline._detector",
    "Detector": ".pipeline._detector",
    "NpuSettings": ".settings._env",
    "load_settings": ".settings._env",
    "Pool": ".runtime._pool",
    "Runtime": ".runtime._open",
    "StageTimings": ".pipeline._detector",
    "open": ".runtime._open",
    "RknnLiteLike": ".runtime._rknnlite",
    "RknnLiteFactory": ".runtime._rknnlite",
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
    "RknnLiteFactory",
    "RknnLiteLike",
    "Runtime",
    "RuntimeInitError",
    "SettingsError",
    "StageTimings",
    "UnknownSocError",
    "UnsupportedDriverError",
    "UsageError",
    "WorkerDiedError",
    "load_settings",
    "open",
    "__version__",
]
