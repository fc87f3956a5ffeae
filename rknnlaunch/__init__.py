"""rknnlaunch: run RKNN models on the NPU cores Kubernetes gave this pod, with reasons instead of -1.

Importing this package pulls in neither grpcio nor OpenCV nor onnxruntime; those load on first use.
"""

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
)
from ._pool import Pool
from ._runtime import Runtime, open
from ._settings import NpuSettings
from ._version import __version__

__all__ = [
    "BackendUnavailableError",
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
    "UnknownSocError",
    "UnsupportedDriverError",
    "UsageError",
    "open",
    "__version__",
]
