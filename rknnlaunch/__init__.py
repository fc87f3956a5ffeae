"""rknnlaunch: run RKNN models on the NPU cores Kubernetes gave this pod, with reasons instead of -1.

Importing this package pulls in neither grpcio nor OpenCV nor onnxruntime; those load on first use.
"""

from ._errors import (
    DiscoveryError,
    MaskError,
    NpuNotFoundError,
    RknnLaunchError,
    UnknownSocError,
    UnsupportedDriverError,
    UsageError,
)
from ._version import __version__

__all__ = [
    "DiscoveryError",
    "MaskError",
    "NpuNotFoundError",
    "RknnLaunchError",
    "UnknownSocError",
    "UnsupportedDriverError",
    "UsageError",
    "__version__",
]
