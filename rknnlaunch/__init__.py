"""rknnlaunch: run RKNN models on the NPU cores Kubernetes gave this pod, with reasons instead of -1.

Importing this package loads only the exception tree: pydantic (settings), numpy (runtimes, YOLO)
and grpcio/OpenCV/onnxruntime load on first use, so `rknnlaunch run` (every container's ENTRYPOINT)
and the device plugin start fast and small. What the device plugin and exporter use of the SDK
(its public names, `rknnlaunch.npu`, `rknnlaunch.model.read_rknn`) is the `sdk-api` contract
in pyproject.toml (`lint-imports`).
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
    from ._entry import UsageParser, describe_os_error, exit_code_for, run_main
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
    # the exit-code table every command's main() ends through (servers too, via rknpu_serverkit)
    "UsageParser": "._entry",
    "describe_os_error": "._entry",
    "exit_code_for": "._entry",
    "run_main": "._entry",
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
    "UsageParser",
    "WorkerDiedError",
    "describe_os_error",
    "exit_code_for",
    "load_settings",
    "open",
    "run_main",
    "__version__",
]
