"""Telemetry: metrics (event sink, NPU/pod collector, HTTP page), NFD features, rknpu-exporter."""

from typing import TYPE_CHECKING

from rknnlaunch import lazy_attributes

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


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "DEFAULT_POD_RESOURCES_SOCKET",
    "PluginLabels",
    "held_cores_asker",
]
