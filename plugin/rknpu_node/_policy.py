"""Pure device logic: device IDs, the preferred-allocation policy and Allocate response contents.

No I/O and no gRPC here: the servicer turns these values into protobuf messages.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rknnlaunch.npu import (
    CoreSet,
    NpuInfo,
    SocSpec,
    cores_to_mask,
    format_cores,
    is_runnable,
    runnable_core_sets,
    runnable_groups,
)
from rknpu_serverkit import quote_ids

from ._cdi import with_minimum_version

Mode = Literal["core", "shared", "whole"]

DEFAULT_RESOURCE_NAME = "rockchip.com/npu"
"""The extended resource kubelet offers (``--resource-name`` may add the SoC for mixed fleets)."""
CONTAINER_COMPATIBLE_PATH = "/run/rknpu/compatible"
"""Where Allocate mounts the host's device-tree compatible file (runtimes mask /proc/device-tree)."""
CDI_KIND = "rockchip.com/npu"
CDI_DEVICE = "npu"
CONTAINER_LIBRKNNRT_PATH = "/usr/lib/librknnrt.so"
"""Where rknn-toolkit-lite2 loads librknnrt (LD_LIBRARY_PATH is ignored); --host-librknnrt mounts here."""
LIBRKNNRT_SOURCE_ENV = "RKNN_NPU_LIBRKNNRT_SOURCE"
"""Set to ``host:<node path>`` when Allocate mounts the node's librknnrt.so (doctor checks it)."""

# Exactly the form device_ids() writes: ASCII digits, no zero padding (a Unicode digit or "01" is
# not one of our IDs, even though int() would read it).
_NUMBER = r"(0|[1-9][0-9]{0,2})"
_ID = re.compile(rf"npu-core-{_NUMBER}(?:-{_NUMBER})?")
# Whole mode: one device naming every core, so pod attribution needs no core count.
_WHOLE_ID = re.compile(r"npu-cores((?:-(?:0|[1-9][0-9]?))+)")


class AllocationError(ValueError):
    """A device request names an unknown, duplicate or unhealthy device ID."""

    def __init__(self, message: str, unhealthy: bool = False) -> None:
        super().__init__(message)
        self.unhealthy = unhealthy


def device_ids(core_count: int, mode: Mode = "core", replicas: int = 1) -> tuple[str, ...]:
    """Core mode: ``npu-core-<n>``; shared mode: ``npu-core-<n>-<r>`` for each of ``replicas``;
    whole mode: one ``npu-cores-0-1-2`` for the whole NPU."""
    if mode == "core":
        return tuple(f"npu-core-{core}" for core in range(core_count))
    if mode == "whole":
        return (whole_device_id(core_count),)
    return tuple(f"npu-core-{core}-{replica}" for core in range(core_count) for replica in range(replicas))


def whole_device_id(core_count: int) -> str:
    """The one device of ``--mode whole``: ``npu-cores-0-1-2`` on RK3588 (``npu-cores-0`` on RK356x)."""
    return "npu-cores-" + "-".join(str(core) for core in range(core_count))


def core_of(device_id: str) -> int | None:
    """``npu-core-2`` and ``npu-core-2-5`` -> 2; None for anything that is not one of our IDs."""
    match = _ID.fullmatch(device_id)
    return int(match.group(1)) if match else None


def device_cores(device_id: str) -> CoreSet:
    """The cores one device ID stands for: one core, or every core of a whole-NPU ID; empty if not ours."""
    core = core_of(device_id)
    if core is not None:
        return frozenset({core})
    match = _WHOLE_ID.fullmatch(device_id)
    if match is None:
        return frozenset()
    return frozenset(int(part) for part in match.group(1).split("-") if part)


def cores_of(ids: Iterable[str]) -> CoreSet:
    return frozenset(core for device_id in ids for core in device_cores(device_id))


def device_health(
    ids: Iterable[str], devices_ok: bool, failed_cores: Collection[int] = ()
) -> dict[str, bool]:
    """Health per device ID: the NPU's nodes and driver are there AND no core it stands for failed
    its functional probe (a whole-NPU device is unhealthy when any core is)."""
    failed = frozenset(failed_cores)
    return {device_id: devices_ok and not (device_cores(device_id) & failed) for device_id in ids}


# --- GetPreferredAllocation policy --------------------------------------------------------------


def preferred_allocation(
    soc: SocSpec,
    core_count: int,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    mode: Mode = "core",
    offered: Collection[str] | None = None,
) -> list[str]:
    """The device IDs we would like a container to get (docs/plugin.md#preferred-allocation-policy).

    Only IDs in ``offered`` (what we list to kubelet; default: the core-mode IDs of ``core_count``
    cores, or any well-formed ID in shared mode) are ever chosen; ``must_include`` must be checked
    with `check_preferred_request` first.

    Core mode: among every choice of ``size`` IDs from ``available`` that contains
    ``must_include``, prefer (1) a core set one RKNNLite context can run on, else the set that
    splits into the fewest runnable groups; (2) the choice that leaves the largest runnable core
    set free for the next pod (a 1-core request on RK3588 takes core 2 so {0, 1} stays free);
    (3) the choice that leaves the largest runnable set once every core is free again (cores
    other pods hold come back: with core 0 taken, a 1-core request still takes core 2);
    (4) the lowest core numbers. Shared mode: take replicas of the core with the most free
    replicas (spreads light pods), then of the next. IDs that are not ours are never chosen.
    """
    offered_set = frozenset(offered if offered is not None else _well_formed(available, core_count, mode))
    known = [i for i in dict.fromkeys(available) if i in offered_set]
    must = list(dict.fromkeys(must_include))
    if size <= len(must):
        return must  # kubelet needs every must-include ID back, even past the size
    rest = [i for i in known if i not in must]
    need = min(size - len(must), len(rest))
    if mode == "shared":
        return must + _shared_pick(rest, need, cores_of(must))
    if mode == "whole":
        return interchangeable_allocation(rest, must, size)  # one device per node: nothing to choose
    candidates = [tuple(must) + combo for combo in itertools.combinations(rest, need)]
    free_all = cores_of(known)
    best = min(candidates, key=lambda ids: _core_score(soc, core_count, cores_of(ids), free_all))
    return sorted(best, key=_id_order)


def interchangeable_allocation(available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
    """The choice among devices that are all alike (whole mode's one device, the video replicas):
    the must-include IDs (kubelet needs every one back, even past ``size``), then the first
    available others up to ``size``."""
    must = list(dict.fromkeys(must_include))
    rest = [i for i in dict.fromkeys(available) if i not in must]
    return must + rest[: max(size - len(must), 0)]


def _well_formed(ids: Iterable[str], core_count: int, mode: Mode) -> list[str]:
    """What ``mode`` offers on ``core_count`` cores (shared mode: any replica of such a core)."""
    if mode != "shared":
        return list(device_ids(core_count, mode))
    shared = [i for i in ids if (match := _ID.fullmatch(i)) is not None and match.group(2) is not None]
    return [i for i in shared if _core_below(i, core_count)]


def _core_below(device_id: str, core_count: int) -> bool:
    cores = device_cores(device_id)
    return bool(cores) and max(cores) < core_count


def _core_score(
    soc: SocSpec, core_count: int, chosen: CoreSet, free_all: CoreSet
) -> tuple[int, int, int, int, tuple[int, ...]]:
    groups = len(runnable_groups(soc, chosen, core_count)) if chosen else 0
    largest_free_now = _largest_runnable(soc, core_count, free_all - chosen)
    # Cores other pods hold come back later: prefer leaving the cores that pair up with them.
    largest_free_later = _largest_runnable(soc, core_count, frozenset(range(core_count)) - chosen)
    return (
        0 if is_runnable(soc, chosen, core_count) else 1,
        groups,
        -largest_free_now,
        -largest_free_later,
        tuple(sorted(chosen)),
    )


def _largest_runnable(soc: SocSpec, core_count: int, cores: CoreSet) -> int:
    return max((len(s) for s in runnable_core_sets(soc, core_count, cores)), default=0)


def _shared_pick(rest: Sequence[str], need: int, taken: CoreSet = frozenset()) -> list[str]:
    """Replicas spread over distinct cores (NVIDIA's ``sharedDevicesAllocationPolicy:
    distributed``): a request of N replicas gets N different cores while there are that many, so
    a 2-unit pod gets two cores (mask 3), not two shares of core 0 (mask 1). Cores the request
    already holds (``taken``: must-include) come last; among the rest the core with the most free
    replicas first (the least loaded), ties to the lower core. Only past one replica per core
    does a core give a second replica, round by round."""
    by_core: dict[int, list[str]] = {}
    for device_id in sorted(rest, key=_id_order):
        by_core.setdefault(core_of(device_id) or 0, []).append(device_id)
    order = sorted(by_core, key=lambda core: (core in taken, -len(by_core[core]), core))
    picked: list[str] = []
    round_index = 0
    while len(picked) < need:
        took = False
        for core in order:
            ids = by_core[core]
            if round_index < len(ids) and len(picked) < need:
                picked.append(ids[round_index])
                took = True
        if not took:
            break
        round_index += 1
    return picked


def check_shared_request(ids: Sequence[str], max_per_request: int | None) -> None:
    """Shared mode's refusal of big requests (NVIDIA's ``failRequestsGreaterThanOne``): with
    ``max_per_request`` 1, a container naming more than one replica gets AllocationError (a pod
    that wants more than a share should ask for cores, on a core-mode node). None allows any."""
    if max_per_request is not None and len(ids) > max_per_request:
        raise AllocationError(
            f"the request names {len(ids)} shared replicas ({quote_ids(ids)}); this node's plugin refuses "
            f"more than {max_per_request} per container (--fail-requests-greater-than-one): ask for "
            "rockchip.com/npu: 1, or use a core-mode node for whole cores"
        )


def _id_order(device_id: str) -> tuple[int, ...]:
    match = _ID.fullmatch(device_id)
    if not match:
        return (1 << 30,)
    return tuple(int(g) for g in match.groups() if g is not None)


# --- Allocate -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceSpecPlan:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class MountPlan:
    container_path: str
    host_path: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerPlan:
    """What one container gets: env, device nodes, mounts, CDI device names."""

    device_ids: tuple[str, ...]
    cores: CoreSet
    mask: int
    envs: Mapping[str, str]
    devices: tuple[DeviceSpecPlan, ...]
    mounts: tuple[MountPlan, ...] = ()
    cdi_devices: tuple[str, ...] = field(default=())


def check_request(ids: Sequence[str], offered: Collection[str], health: Mapping[str, bool]) -> None:
    """Raise AllocationError naming the unknown, duplicate or unhealthy IDs (a few and a count).

    IDs match only exactly as offered. Messages stay short whatever the request's size.
    """
    if not ids:
        raise AllocationError("the request names no device ID")
    _check_known(ids, offered)
    counts = Counter(ids)
    twice = [device_id for device_id, count in counts.items() if count > 1]
    if twice:
        raise AllocationError(f"device ID {quote_ids(twice)} is requested twice in one container")
    unhealthy = [device_id for device_id in ids if not health.get(device_id, False)]
    if unhealthy:
        raise AllocationError(
            f"device {quote_ids(unhealthy)} is Unhealthy (its NPU device node or driver is missing, or "
            "its core failed the functional probe: the plugin's log says which); kubelet should not "
            "have offered it",
            unhealthy=True,
        )


def check_preferred_request(must_include: Sequence[str], offered: Collection[str]) -> None:
    """GetPreferredAllocation: raise AllocationError when a must-include ID is not one we offered."""
    _check_known(must_include, offered)


def _check_known(ids: Sequence[str], offered: Collection[str]) -> None:
    unknown = [device_id for device_id in ids if device_id not in offered]
    if unknown:
        ordered = sorted(offered, key=_id_order)
        listed = quote_ids(ordered) if ordered else "none (no NPU found)"
        raise AllocationError(f"unknown device ID {quote_ids(unknown)}: this plugin offers {listed}")


@dataclass(frozen=True)
class NodeExtras:
    """What Allocate adds beyond the NPU, as found on the node at the last scan (absent ones left out)."""

    devices: tuple[str, ...] = ()
    """``--extra-device`` nodes present on the host (e.g. /dev/rga, /dev/mpp_service)."""
    librknnrt: str | None = None
    """``--host-librknnrt``: the node's librknnrt.so (host path), mounted at /usr/lib/librknnrt.so."""


def container_plan(
    info: NpuInfo,
    ids: Sequence[str],
    compatible_host_path: str | None,
    cdi: bool = False,
    extras: NodeExtras = NodeExtras(),
) -> ContainerPlan:
    """The Allocate answer for one container granted ``ids`` (already checked) on NPU ``info``.

    Device nodes: exactly the NPU's (DRM card + render, or /dev/rknpu + /dev/dma_heap/system),
    never all of /dev/dri, plus the ``extras`` present. Container paths equal host paths:
    librknnrt opens these names.
    """
    cores = cores_of(ids)
    mask = cores_to_mask(cores)
    envs = {
        "RKNN_NPU_CORE_MASK": str(mask),
        "RKNN_NPU_CORES": format_cores(cores),
        "RKNN_NPU_SOC": info.soc.name,
        "RKNN_NPU_DEVICE": info.primary_device,
    }
    mounts: list[MountPlan] = []
    if compatible_host_path is not None:
        envs["RKNN_NPU_COMPATIBLE_FILE"] = CONTAINER_COMPATIBLE_PATH
        mounts.append(MountPlan(CONTAINER_COMPATIBLE_PATH, compatible_host_path, True))
    if extras.librknnrt is not None:
        envs[LIBRKNNRT_SOURCE_ENV] = f"host:{extras.librknnrt}"
        mounts.append(MountPlan(CONTAINER_LIBRKNNRT_PATH, extras.librknnrt, True))
    return ContainerPlan(
        device_ids=tuple(ids),
        cores=cores,
        mask=mask,
        envs=envs,
        devices=tuple(DeviceSpecPlan(path, path, "rw") for path in _node_paths(info, extras)),
        mounts=tuple(mounts),
        cdi_devices=(f"{CDI_KIND}={CDI_DEVICE}",) if cdi else (),
    )


def _node_paths(info: NpuInfo, extras: NodeExtras) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*info.device_paths, *extras.devices)))


def cdi_spec(
    info: NpuInfo, compatible_host_path: str | None, extras: NodeExtras = NodeExtras()
) -> dict[str, object]:
    """A CDI spec for the whole NPU, at the lowest cdiVersion its content needs (`with_minimum_version`:
    0.3.0, since device nodes name no separate host path): its device nodes (and the extras present),
    the compatible file and, with --host-librknnrt, the node's librknnrt.so.

    Per-core env stays in the Allocate response (CDI devices carry no per-allocation data).
    """
    env = [f"RKNN_NPU_SOC={info.soc.name}", f"RKNN_NPU_DEVICE={info.primary_device}"]
    mounts: list[tuple[str, str]] = []
    if compatible_host_path is not None:
        mounts.append((compatible_host_path, CONTAINER_COMPATIBLE_PATH))
    if extras.librknnrt is not None:
        env.append(f"{LIBRKNNRT_SOURCE_ENV}=host:{extras.librknnrt}")
        mounts.append((extras.librknnrt, CONTAINER_LIBRKNNRT_PATH))
    edits: dict[str, object] = {
        # No hostPath: it defaults to path (and it would need cdiVersion 0.5.0).
        "deviceNodes": [{"path": path, "permissions": "rw"} for path in _node_paths(info, extras)],
        "env": env,
    }
    if mounts:
        edits["mounts"] = [
            {
                "hostPath": host_path,
                "containerPath": container_path,
                "options": ["ro", "nosuid", "nodev", "bind"],
            }
            for host_path, container_path in mounts
        ]
    return with_minimum_version(
        {"kind": CDI_KIND, "devices": [{"name": CDI_DEVICE, "containerEdits": edits}]}
    )
