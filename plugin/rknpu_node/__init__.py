"""rknpu_node: the node's NPU as both servers see it: discovery on the node, device IDs,
allocation policy, health, the per-core functional probe, the resource manager, CDI edits, and the
video blocks (MPP, RGA, DMA heaps) offered beside it (no gRPC).

The device plugin (`rknpu_device_plugin`) and the DRA driver (`rknpu_dra_driver`) both build on
it (and on `rknpu_serverkit`), never on each other.
"""

from typing import TYPE_CHECKING

from rknnlaunch import lazy_attributes

from ._log import ENV_PREFIX, LAYER_LOGGERS

if TYPE_CHECKING:
    from ._cdi import minimum_cdi_version, with_minimum_version
    from ._checks import NODE_FLAG_CHOICES, NODE_FLAG_TYPES, NodeSettingsChecks
    from ._discovery import discover_on_node
    from ._events import NullEvents, PluginEvents, TeeEvents
    from ._manager import DeviceState, ResourceManager
    from ._policy import (
        DEFAULT_RESOURCE_NAME,
        AllocationError,
        ContainerPlan,
        Mode,
        NodeExtras,
        cdi_spec,
        check_preferred_request,
        check_request,
        check_shared_request,
        container_plan,
        cores_of,
        device_cores,
        device_ids,
        interchangeable_allocation,
        preferred_allocation,
        whole_device_id,
    )
    from ._probe import HoldersUnknownError, ProbeLoop, ProbeRunner
    from ._video import (
        DEFAULT_VIDEO_REPLICAS,
        VIDEO_CDI_DEVICE,
        VIDEO_RESOURCE_NAME,
        VideoBlocks,
        discover_video,
        video_cdi_edits,
        video_device_ids,
    )
    from ._wiring import Actor, NodeSettings, health_actor, node_resources, probe_actor

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "check_shared_request": "._policy",
    "device_ids": "._policy",
    "device_cores": "._policy",
    "NodeExtras": "._policy",
    "AllocationError": "._policy",
    "ContainerPlan": "._policy",
    "DEFAULT_RESOURCE_NAME": "._policy",
    "DeviceState": "._manager",
    "Actor": "._wiring",
    "NodeSettingsChecks": "._checks",
    "NODE_FLAG_CHOICES": "._checks",
    "NODE_FLAG_TYPES": "._checks",
    "NodeSettings": "._wiring",
    "health_actor": "._wiring",
    "node_resources": "._wiring",
    "probe_actor": "._wiring",
    "NullEvents": "._events",
    "PluginEvents": "._events",
    "TeeEvents": "._events",
    "HoldersUnknownError": "._probe",
    "Mode": "._policy",
    "ProbeLoop": "._probe",
    "ProbeRunner": "._probe",
    "ResourceManager": "._manager",
    "cdi_spec": "._policy",
    "check_preferred_request": "._policy",
    "check_request": "._policy",
    "container_plan": "._policy",
    "cores_of": "._policy",
    "discover_on_node": "._discovery",
    "preferred_allocation": "._policy",
    "interchangeable_allocation": "._policy",
    "minimum_cdi_version": "._cdi",
    "whole_device_id": "._policy",
    "with_minimum_version": "._cdi",
    "DEFAULT_VIDEO_REPLICAS": "._video",
    "VIDEO_CDI_DEVICE": "._video",
    "VIDEO_RESOURCE_NAME": "._video",
    "VideoBlocks": "._video",
    "discover_video": "._video",
    "video_cdi_edits": "._video",
    "video_device_ids": "._video",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "ENV_PREFIX",
    "LAYER_LOGGERS",
    "Actor",
    "NodeSettingsChecks",
    "NODE_FLAG_CHOICES",
    "NODE_FLAG_TYPES",
    "NodeSettings",
    "health_actor",
    "node_resources",
    "probe_actor",
    "NullEvents",
    "PluginEvents",
    "TeeEvents",
    "check_shared_request",
    "device_ids",
    "device_cores",
    "NodeExtras",
    "AllocationError",
    "ContainerPlan",
    "DEFAULT_RESOURCE_NAME",
    "DeviceState",
    "HoldersUnknownError",
    "Mode",
    "ProbeLoop",
    "ProbeRunner",
    "ResourceManager",
    "cdi_spec",
    "check_preferred_request",
    "check_request",
    "container_plan",
    "cores_of",
    "discover_on_node",
    "preferred_allocation",
    "interchangeable_allocation",
    "minimum_cdi_version",
    "whole_device_id",
    "with_minimum_version",
    "DEFAULT_VIDEO_REPLICAS",
    "VIDEO_CDI_DEVICE",
    "VIDEO_RESOURCE_NAME",
    "VideoBlocks",
    "discover_video",
    "video_cdi_edits",
    "video_device_ids",
]
