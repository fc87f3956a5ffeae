"""The kubelet-facing side: our gRPC service, serving, registration, restart supervisor."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._lifecycle import Endpoint, Supervisor
    from ._service import DevicePluginService

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "DevicePluginService": "._service",
    "Endpoint": "._lifecycle",
    "Supervisor": "._lifecycle",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DevicePluginService",
    "Endpoint",
    "Supervisor",
]
