"""Telemetry: metrics (event sink, NPU/pod collector, the plugin's page), NFD features and the
node-exporter textfile; what `rknpu-exporter` (`..exporter`) and the plugin both publish."""

from typing import TYPE_CHECKING

from rknnlaunch import lazy_attributes

if TYPE_CHECKING:
    from ._collector import NpuCollector, build_registry
    from ._nfd import (
        DEFAULT_FEATURES_DIR,
        describe_labels,
        nfd_labels,
        remove_feature_file,
        write_feature_file,
        write_textfile,
    )
    from ._plugin_labels import PluginLabels
    from ._podresources import DEFAULT_POD_RESOURCES_SOCKET, PodResourcesClient, held_cores_asker

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "DEFAULT_FEATURES_DIR": "._nfd",
    "DEFAULT_POD_RESOURCES_SOCKET": "._podresources",
    "NpuCollector": "._collector",
    "PodResourcesClient": "._podresources",
    "build_registry": "._collector",
    "describe_labels": "._nfd",
    "nfd_labels": "._nfd",
    "remove_feature_file": "._nfd",
    "write_feature_file": "._nfd",
    "write_textfile": "._nfd",
    "PluginLabels": "._plugin_labels",
    "held_cores_asker": "._podresources",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "DEFAULT_FEATURES_DIR",
    "DEFAULT_POD_RESOURCES_SOCKET",
    "NpuCollector",
    "PodResourcesClient",
    "build_registry",
    "describe_labels",
    "nfd_labels",
    "remove_feature_file",
    "write_feature_file",
    "write_textfile",
    "PluginLabels",
    "held_cores_asker",
]
