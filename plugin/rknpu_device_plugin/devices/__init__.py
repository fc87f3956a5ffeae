"""Device logic: NPU discovery on the node, device IDs, allocation policy, health (no gRPC here).

The DRA driver (`rknpu_dra_driver`) shares these; the names it uses are exported here. The
pure policy names are imported eagerly; the ResourceManager (health watching) on first use, so
importing the policy never pulls in the plugin's settings.
"""

from typing import TYPE_CHECKING, Any

from ._policy import NodeExtras, cdi_spec, container_plan, cores_of, device_cores, device_ids

if TYPE_CHECKING:
    from ._manager import DeviceState, ResourceManager

__all__ = [
    "DeviceState",
    "NodeExtras",
    "ResourceManager",
    "cdi_spec",
    "container_plan",
    "cores_of",
    "device_cores",
    "device_ids",
]


def __getattr__(name: str) -> Any:
    if name in ("DeviceState", "ResourceManager"):
        from . import _manager

        return getattr(_manager, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
