"""ResourceSlices: the pure desired slices per layout, and the publisher that reconciles the API
server's slices with them."""

from typing import TYPE_CHECKING

from rknnlaunch import lazy_attributes

if TYPE_CHECKING:
    from ._desired import (
        SHARES_CAPACITY,
        VIDEO_DEVICE,
        NodeFacts,
        SliceLayout,
        all_offered_devices,
        desired_slices,
        device_attributes,
        fields_dropped,
        layout_core_sets,
        set_device_id,
        shared_fields_dropped,
        video_attributes,
    )
    from ._facts import node_facts
    from ._publisher import SlicePublisher

# What other rooms use, by defining module; imported on first use (PEP 562).
_LAZY = {
    "SHARES_CAPACITY": "._desired",
    "VIDEO_DEVICE": "._desired",
    "video_attributes": "._desired",
    "NodeFacts": "._desired",
    "device_attributes": "._desired",
    "shared_fields_dropped": "._desired",
    "SliceLayout": "._desired",
    "all_offered_devices": "._desired",
    "desired_slices": "._desired",
    "fields_dropped": "._desired",
    "layout_core_sets": "._desired",
    "set_device_id": "._desired",
    "SlicePublisher": "._publisher",
    "node_facts": "._facts",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "SHARES_CAPACITY",
    "VIDEO_DEVICE",
    "video_attributes",
    "NodeFacts",
    "device_attributes",
    "shared_fields_dropped",
    "SliceLayout",
    "all_offered_devices",
    "desired_slices",
    "fields_dropped",
    "layout_core_sets",
    "set_device_id",
    "SlicePublisher",
    "node_facts",
]
