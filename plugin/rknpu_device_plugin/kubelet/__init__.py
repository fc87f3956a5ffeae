"""The kubelet-facing side: our gRPC service, serving, registration, restart supervisor."""

from typing import TYPE_CHECKING

from rknnlaunch import lazy_attributes

if TYPE_CHECKING:
    from ._lifecycle import Endpoint, KubeletRegistration, Supervisor, file_id
    from ._service import DevicePluginService

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "DevicePluginService": "._service",
    "Endpoint": "._lifecycle",
    "KubeletRegistration": "._lifecycle",
    "Supervisor": "._lifecycle",
    "file_id": "._lifecycle",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "DevicePluginService",
    "Endpoint",
    "KubeletRegistration",
    "Supervisor",
    "file_id",
]
