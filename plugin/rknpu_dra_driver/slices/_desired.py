"""Pure ResourceSlice content: the devices of a node's pool in either layout (per-core, or one
partitionable device per one-context core set with shared per-core counters), their attributes,
and how to tell that an API server dropped the partitionable fields.

Both layouts derive from the one core/mask model (`rknnlaunch.npu`: `runnable_core_sets`,
`context_groups`, `allocation_order`), so RK3588, RK3576 and the single-core NPUs follow from it.
Device names are the device plugin's IDs (`npu-core-<n>`, and `npu-cores-0-1` for a core set), so
the cores a name stands for are parsed in one place (`rknpu_node.device_cores`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rknnlaunch.npu import (
    CoreSet,
    NpuInfo,
    allocation_order,
    context_groups,
    cores_to_mask,
    runnable_core_sets,
)
from rknpu_node import VIDEO_CDI_DEVICE, VideoBlocks, device_cores, device_ids

from .._settings import DEFAULT_MAX_SHARES

COUNTER_SET = "npu-cores"
"""The shared counter set of a partitionable pool: one counter per core, value 1."""
SHARES_CAPACITY = "shares"
"""A shared core's consumable capacity (KEP-5075): ``--max-shares`` of them, 1 a claim by default.
An API server without DRAConsumableCapacity (alpha in 1.34/1.35, beta and on from 1.36) silently
drops the device's ``allowMultipleAllocations`` and the capacity's ``requestPolicy``."""
COUNTERS_SLICE_SUFFIX = "-counters"
SEPARATE_COUNTERS_FROM_MINOR = 35
"""From Kubernetes 1.35 a pool's counters sit in a slice of their own (no devices in it)."""
_SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*))?")


class SliceLayout(str, enum.Enum):
    """How the pool offers the NPU (the setting ``--slice-layout``; ``auto`` is the publisher's)."""

    PER_CORE = "per-core"
    """One device per core, ordered so single-core claims take the lone core first."""
    PARTITIONABLE = "partitionable"
    """One device per one-context core set, each consuming its cores' counters."""
    SHARED = "shared"
    """One device per core that several claims may hold at once (``allowMultipleAllocations``),
    each taking some of its ``shares`` capacity (KEP-5075 consumable capacity)."""


@dataclass(frozen=True)
class NodeFacts:
    """What a slice says about the node beyond the NPU's discovery: the board and its runtime."""

    board_model: str | None = None
    librknnrt_version: str | None = None
    video: VideoBlocks | None = None
    """The video blocks (``--vpu``), offered as one more device, `vpu`; None when not offered."""


VIDEO_DEVICE = VIDEO_CDI_DEVICE
"""The video blocks' device name in the pool (prepare hands in their nodes, no NPU core)."""


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


def healthy_cores(info: NpuInfo | None, health: Mapping[str, bool]) -> CoreSet:
    """The cores whose per-core device is healthy now."""
    if info is None:
        return frozenset()
    return frozenset(
        core
        for device_id in device_ids(info.core_count)
        if health.get(device_id, False)
        for core in device_cores(device_id)
    )


def set_device_id(cores: CoreSet) -> str:
    """``{2}`` -> ``npu-core-2``; ``{0, 1}`` -> ``npu-cores-0-1`` (parsed back by `device_cores`)."""
    if len(cores) == 1:
        (core,) = cores
        return f"npu-core-{core}"
    return "npu-cores-" + "-".join(str(core) for core in sorted(cores))


def layout_core_sets(info: NpuInfo, health: Mapping[str, bool], layout: SliceLayout) -> tuple[CoreSet, ...]:
    """The core sets the pool's devices stand for, in slice order (the scheduler's first-fit order):
    single cores in `allocation_order` (RK3588: 2, 0, 1), then, partitionable only, the larger
    one-context sets smallest first. A set with an unhealthy core is left out."""
    healthy = healthy_cores(info, health)
    singles = tuple(frozenset({c}) for c in allocation_order(info.soc, info.core_count) if c in healthy)
    if layout is not SliceLayout.PARTITIONABLE:
        return singles
    larger = tuple(
        cores
        for cores in runnable_core_sets(info.soc, info.core_count)
        if len(cores) > 1 and cores <= healthy
    )
    return singles + larger


def offered_devices(
    info: NpuInfo | None, health: Mapping[str, bool], layout: SliceLayout = SliceLayout.PER_CORE
) -> tuple[str, ...]:
    """The device names the pool offers in ``layout`` (prepare accepts any layout's names whose
    cores are healthy, so claims allocated before a layout switch still prepare)."""
    if info is None:
        return ()
    return tuple(set_device_id(cores) for cores in layout_core_sets(info, health, layout))


def all_offered_devices(info: NpuInfo | None, health: Mapping[str, bool]) -> tuple[str, ...]:
    """Every name either layout may have offered for the healthy cores (what prepare accepts)."""
    return offered_devices(info, health, SliceLayout.PARTITIONABLE)


def core_group(info: NpuInfo, cores: CoreSet) -> str:
    """The `coreGroup` attribute: the `context_groups` block holding ``cores`` (``"0-1"``), or the
    set itself when it spans blocks (RK3588's ``"0-1-2"``, which pairs with nothing)."""
    for block in context_groups(info.soc, info.core_count):
        if cores <= block:
            return "-".join(str(core) for core in sorted(block))
    return "-".join(str(core) for core in sorted(cores))


def device_attributes(info: NpuInfo, cores: CoreSet | int, facts: NodeFacts) -> dict[str, dict[str, object]]:
    """One device's attributes (unqualified names live in the driver's domain). Every device has
    every attribute, so a selector reading one never fails on another device (a CEL error stops
    the scheduler's allocation of the whole claim)."""
    core_set = frozenset({cores}) if isinstance(cores, int) else cores
    attributes: dict[str, dict[str, object]] = {
        "soc": {"string": info.soc.name},
        "core": {"int": min(core_set)},
        "cores": {"int": info.core_count},
        "coreCount": {"int": len(core_set)},
        "coreMask": {"int": cores_to_mask(core_set)},
        "coreGroup": {"string": core_group(info, core_set)},
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


def video_attributes(info: NpuInfo, video: VideoBlocks) -> dict[str, dict[str, object]]:
    """The `vpu` device's attributes: ``type: vpu`` (NPU device classes require a ``coreMask``,
    which it lacks), the SoC, and which helpers come with the decoder."""
    return {
        "type": {"string": "vpu"},
        "soc": {"string": info.soc.name},
        "rga": {"bool": video.rga},
        "dmaHeaps": {"int": len(video.dma_heaps)},
    }


def video_device(info: NpuInfo, video: VideoBlocks) -> dict[str, object]:
    """The video blocks as one device that any number of claims may hold at once (KEP-5075's
    ``allowMultipleAllocations``; an API server without DRAConsumableCapacity drops it and the
    device is then one claim's at a time: share that claim, docs/dra.md#video-blocks)."""
    return {
        "name": VIDEO_DEVICE,
        "attributes": video_attributes(info, video),
        "allowMultipleAllocations": True,
    }


def slice_name(node_name: str, driver_name: str) -> str:
    """The node's device slice: a DNS subdomain of at most 253 characters."""
    return f"{node_name}-{driver_name}"[:253].rstrip("-.")


def counters_slice_name(node_name: str, driver_name: str) -> str:
    """The 1.35+ partitionable pool's counters slice."""
    base = slice_name(node_name, driver_name)[: 253 - len(COUNTERS_SLICE_SUFFIX)].rstrip("-.")
    return base + COUNTERS_SLICE_SUFFIX


def _counter(core: int) -> str:
    return f"core-{core}"


def shares_capacity(max_shares: int) -> dict[str, object]:
    """A shared core's capacity: ``max_shares`` shares, a claim takes 1 unless it asks for more
    (``capacity.requests.shares``), at most all of them (the core alone), whole shares only."""
    total = str(max_shares)
    return {
        SHARES_CAPACITY: {
            "value": total,
            "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": total, "step": "1"}},
        }
    }


def _device(
    info: NpuInfo, cores: CoreSet, facts: NodeFacts, layout: SliceLayout, max_shares: int
) -> dict[str, object]:
    device: dict[str, object] = {
        "name": set_device_id(cores),
        "attributes": device_attributes(info, cores, facts),
    }
    if layout is SliceLayout.SHARED:
        device["allowMultipleAllocations"] = True
        device["capacity"] = shares_capacity(max_shares)
    if layout is SliceLayout.PARTITIONABLE:
        device["consumesCounters"] = [
            {"counterSet": COUNTER_SET, "counters": {_counter(c): {"value": "1"} for c in sorted(cores)}}
        ]
    return device


def _slice(
    name: str,
    node_name: str,
    driver_name: str,
    generation: int,
    count: int,
    node_uid: str | None,
    content: Mapping[str, object],
) -> dict[str, object]:
    metadata: dict[str, object] = {"name": name}
    if node_uid:
        # Owned by the Node: deleting the node deletes its slices.
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
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": count},
            **content,
        },
    }


def desired_slices(
    node_name: str,
    driver_name: str,
    generation: int,
    info: NpuInfo | None,
    health: Mapping[str, bool],
    facts: NodeFacts,
    node_uid: str | None,
    layout: SliceLayout | str,
    server_minor: int | None = None,
    max_shares: int = DEFAULT_MAX_SHARES,
) -> list[dict[str, object]]:
    """Every slice of the node's pool (``resourceSliceCount`` = the list's length).

    With ``facts.video`` the device slice ends with the `vpu` device (last: first fit never
    prefers it). PER_CORE: one slice of per-core devices. SHARED: the same devices, each allowing multiple
    allocations of its ``max_shares`` shares. PARTITIONABLE: the devices consume per-core
    counters; on a 1.34 API server (``server_minor`` 34) the counters sit in the device slice,
    from 1.35 (or unknown) in a separate counters slice of the same pool.
    """
    chosen = SliceLayout(layout)
    sets = layout_core_sets(info, health, chosen) if info is not None else ()
    devices = [_device(info, cores, facts, chosen, max_shares) for cores in sets] if info is not None else []
    if info is not None and facts.video is not None:
        devices.append(video_device(info, facts.video))
    name = slice_name(node_name, driver_name)
    if chosen is not SliceLayout.PARTITIONABLE:
        return [_slice(name, node_name, driver_name, generation, 1, node_uid, {"devices": devices})]
    healthy = sorted(healthy_cores(info, health))
    counters = [{"name": COUNTER_SET, "counters": {_counter(c): {"value": "1"} for c in healthy}}]
    if server_minor is not None and server_minor < SEPARATE_COUNTERS_FROM_MINOR:
        content = {"sharedCounters": counters, "devices": devices}
        return [_slice(name, node_name, driver_name, generation, 1, node_uid, content)]
    counters_name = counters_slice_name(node_name, driver_name)
    return [
        _slice(counters_name, node_name, driver_name, generation, 2, node_uid, {"sharedCounters": counters}),
        _slice(name, node_name, driver_name, generation, 2, node_uid, {"devices": devices}),
    ]


def _has_partition_fields(spec: Mapping[str, object]) -> bool:
    if spec.get("sharedCounters"):
        return True
    devices = spec.get("devices")
    return isinstance(devices, Sequence) and any(
        isinstance(d, Mapping) and d.get("consumesCounters") for d in devices
    )


def _shared_devices(spec: Mapping[str, object]) -> dict[object, Mapping[str, object]]:
    devices = spec.get("devices")
    return {
        d.get("name"): d
        for d in (devices if isinstance(devices, Sequence) else ())
        if isinstance(d, Mapping) and d.get("allowMultipleAllocations") and d.get("capacity")
    }


def _has_request_policy(device: Mapping[str, object]) -> bool:
    capacity = device.get("capacity")
    entry = capacity.get(SHARES_CAPACITY) if isinstance(capacity, Mapping) else None
    return isinstance(entry, Mapping) and bool(entry.get("requestPolicy"))


def shared_fields_dropped(sent: Mapping[str, object], kept: Mapping[str, object]) -> bool:
    """(The `vpu` device, which has no capacity, is not a shared core: ignored here.)
    True when ``sent`` offered shared cores and ``kept`` lacks a device's
    ``allowMultipleAllocations`` or its capacity's ``requestPolicy``: the API server runs without
    DRAConsumableCapacity (the devices would be plain per-core ones, each held by one claim)."""
    sent_spec = sent.get("spec")
    if not isinstance(sent_spec, Mapping):
        return False
    offered = _shared_devices(sent_spec)
    if not offered:
        return False
    kept_spec = kept.get("spec")
    if not isinstance(kept_spec, Mapping):
        return True
    back = _shared_devices(kept_spec)
    return any(name not in back or not _has_request_policy(back[name]) for name in offered)


def fields_dropped(sent: Mapping[str, object], kept: Mapping[str, object]) -> bool:
    """True when ``sent`` carried partitionable fields and ``kept`` (what create/replace returned,
    or a read-back) lacks any of them: the API server runs without DRAPartitionableDevices, and
    publishing overlapping devices without counters would double-book cores."""
    sent_spec = sent.get("spec")
    kept_spec = kept.get("spec")
    if not isinstance(sent_spec, Mapping) or not _has_partition_fields(sent_spec):
        return False
    if not isinstance(kept_spec, Mapping):
        return True
    if bool(sent_spec.get("sharedCounters")) != bool(kept_spec.get("sharedCounters")):
        return True
    sent_devices = sent_spec.get("devices") or []
    kept_devices = {d.get("name"): d for d in (kept_spec.get("devices") or []) if isinstance(d, Mapping)}
    for device in sent_devices if isinstance(sent_devices, Sequence) else ():
        if isinstance(device, Mapping) and device.get("consumesCounters"):
            back = kept_devices.get(device.get("name"))
            if not isinstance(back, Mapping) or not back.get("consumesCounters"):
                return True
    return False


__all__ = [
    "COUNTER_SET",
    "SHARES_CAPACITY",
    "VIDEO_DEVICE",
    "NodeFacts",
    "SliceLayout",
    "all_offered_devices",
    "counters_slice_name",
    "desired_slices",
    "device_attributes",
    "fields_dropped",
    "layout_core_sets",
    "offered_devices",
    "semver",
    "set_device_id",
    "shared_fields_dropped",
    "shares_capacity",
    "slice_name",
    "video_attributes",
    "video_device",
]
