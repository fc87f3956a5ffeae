"""Pure ResourceSlice content: one resource.k8s.io/v1 device per healthy NPU core, its attributes.

The device names are the device plugin's core-mode IDs (`rknpu_device_plugin.devices`), so the
core a name stands for is parsed in one place for both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from rknnlaunch.npu import NpuInfo
from rknpu_device_plugin.devices import device_cores, device_ids

MAX_DEVICES_PER_SLICE = 128
"""resource.k8s.io/v1 ResourceSliceMaxDevices; an NPU has at most 3 cores, so one slice always fits."""
_SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*))?")


@dataclass(frozen=True)
class NodeFacts:
    """What a slice says about the node beyond the NPU's discovery: the board and its runtime."""

    board_model: str | None = None
    librknnrt_version: str | None = None


def semver(text: str | None) -> str | None:
    """``"0.9.8"`` stays; ``"v0.9"`` -> ``"0.9.0"``; anything without a version number -> None
    (a version attribute must be semantic-versioning 2.0.0)."""
    if not text:
        return None
    match = _SEMVER.search(text)
    if match is None:
        return None
    major, minor, patch = match.group(1), match.group(2), match.group(3) or "0"
    return f"{major}.{minor}.{patch}"


def offered_devices(info: NpuInfo | None, health: Mapping[str, bool]) -> tuple[str, ...]:
    """The devices a slice offers: every core-mode ID whose core is healthy, in core order."""
    if info is None:
        return ()
    return tuple(device_id for device_id in device_ids(info.core_count) if health.get(device_id, False))


def device_attributes(info: NpuInfo, core: int, facts: NodeFacts) -> dict[str, dict[str, object]]:
    """One core's attributes (unqualified names live in the driver's domain)."""
    attributes: dict[str, dict[str, object]] = {
        "soc": {"string": info.soc.name},
        "core": {"int": core},
        "cores": {"int": info.core_count},
    }
    driver_version = semver(info.driver_version)
    if driver_version is not None:
        attributes["driverVersion"] = {"version": driver_version}
    runtime_version = semver(facts.librknnrt_version)
    if runtime_version is not None:
        attributes["librknnrtVersion"] = {"version": runtime_version}
    if facts.board_model:
        attributes["boardModel"] = {"string": facts.board_model[:64]}
    return attributes


def slice_name(node_name: str, driver_name: str) -> str:
    """One slice per node and driver: a DNS subdomain of at most 253 characters."""
    return f"{node_name}-{driver_name}"[:253].rstrip("-.")


def slice_body(
    node_name: str,
    driver_name: str,
    generation: int,
    info: NpuInfo | None,
    health: Mapping[str, bool],
    facts: NodeFacts,
    node_uid: str | None = None,
) -> dict[str, object]:
    """The node's one ResourceSlice (pool = the node, ``resourceSliceCount`` 1)."""
    devices = []
    if info is not None:
        for device_id in offered_devices(info, health):
            (core,) = device_cores(device_id)
            devices.append({"name": device_id, "attributes": device_attributes(info, core, facts)})
    metadata: dict[str, object] = {"name": slice_name(node_name, driver_name)}
    if node_uid:
        # Owned by the Node: deleting the node deletes its slice.
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver_name,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
