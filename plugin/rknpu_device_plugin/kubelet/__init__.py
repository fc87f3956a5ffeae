"""The kubelet-facing side: our DevicePlugin gRPC service and our registration over kubelet.sock
(the kit's `Supervisor` serves, watches and serves again)."""

from typing import TYPE_CHECKING

from rknnlaunch import lazy_attributes

if TYPE_CHECKING:
    from ._registration import KubeletRegistration
    from ._service import DevicePluginService
    from ._video import VideoPluginService

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "DevicePluginService": "._service",
    "KubeletRegistration": "._registration",
    "VideoPluginService": "._video",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "DevicePluginService",
    "KubeletRegistration",
    "VideoPluginService",
]
