"""The kubelet side: registration, the DRA services (v1, v1beta1), the health stream, instance
sockets and the instance lock."""

from typing import TYPE_CHECKING

from rknnlaunch import lazy_attributes

if TYPE_CHECKING:
    from ._health import HealthBoard
    from ._instance import acquire, release
    from ._servers import KubeletServers

# What other rooms use, by defining module; imported on first use (PEP 562).
_LAZY = {
    "HealthBoard": "._health",
    "acquire": "._instance",
    "release": "._instance",
    "KubeletServers": "._servers",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "HealthBoard",
    "acquire",
    "release",
    "KubeletServers",
]
