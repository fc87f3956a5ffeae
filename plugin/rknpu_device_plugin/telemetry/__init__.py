"""Telemetry: metrics (event sink, NPU/pod collector, HTTP page), NFD features, rknpu-exporter."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._plugin_labels import PluginLabels
    from ._podresources import DEFAULT_POD_RESOURCES_SOCKET, held_cores_asker

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "DEFAULT_POD_RESOURCES_SOCKET": "._podresources",
    "PluginLabels": "._plugin_labels",
    "held_cores_asker": "._podresources",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_POD_RESOURCES_SOCKET",
    "PluginLabels",
    "held_cores_asker",
]
