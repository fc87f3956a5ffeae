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

from .._bounded import quote_ids

Mode = Literal["core", "shared"]

DEFAULT_RESOURCE_NAME = "rockchip.com/npu"
"""The extended resource kubelet offers (``--resource-name`` may add the SoC for mixed fleets)."""
CONTAINER_COMPATIBLE_PATH = "/run/rknpu/compatible"
"""Where Allocate mounts the host's device-tree compatible file (runtimes mask /proc/device-tree)."""
CDI_KIND = "rockchip.com/npu"
CDI_DEVICE = "npu"

# Exactly the form device_ids() writes: ASCII digits, no zero padding (a Unicode digit or "01" is
# not one of our IDs, even though int() would read it).
_NUMBER = r"(0|[1-9][0-9]{0,2})"
_ID = re.compile(rf"npu-core-{_NUMBER}(?:-{_NUMBER})?")


class AllocationError(ValueError):
    """A device request names an unknown, duplicate or unhealthy device ID."""

    def __init__(self, message: str, unhealthy: bool = False) -> None:
        super().__init__(message)
        self.unhealthy = unhealthy


def device_ids(core_count: int, mode: Mode = "core", replicas: int = 1) -> tuple[str, ...]:
    """Core mode: ``npu-core-<n>``; shared mode: ``npu-core-<n>-<r>`` for each of ``replicas``."""
    if mode == "core":
        return tuple(f"npu-core-{core}" for core in range(core_count))
    return tuple(f"npu-core-{core}-{replica}" for core in range(core_count) for replica in range(replicas))


def core_of(device_id: str) -> int | None:
    """``npu-core-2`` and ``npu-core-2-5`` -> 2; None for anything that is not one of our IDs."""
    match = _ID.fullmatch(device_id)
    return int(match.group(1)) if match else None


def cores_of(ids: Iterable[str]) -> CoreSet:
    return frozenset(core for core in (core_of(i) for i in ids) if core is not None)


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
    """The device IDs we would like a container to get (the policy is documented in README.md).

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
        return must + _shared_pick(rest, need)
    candidates = [tuple(must) + combo for combo in itertools.combinations(rest, need)]
    free_all = cores_of(known)
    best = min(candidates, key=lambda ids: _core_score(soc, core_count, cores_of(ids), free_all))
    return sorted(best, key=_id_order)


def _well_formed(ids: Iterable[str], core_count: int, mode: Mode) -> list[str]:
    """The IDs in the form ``mode`` offers, on a core below ``core_count``."""
    form = re.compile(r"npu-core-[0-9]+" if mode == "core" else r"npu-core-[0-9]+-[0-9]+")
    return [i for i in ids if form.fullmatch(i) and _core_below(i, core_count)]


def _core_below(device_id: str, core_count: int) -> bool:
    core = core_of(device_id)
    return core is not None and core < core_count


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


def _shared_pick(rest: Sequence[str], need: int) -> list[str]:
    by_core: dict[int, list[str]] = {}
    for device_id in rest:
        by_core.setdefault(core_of(device_id) or 0, []).append(device_id)
    picked: list[str] = []
    # Most free replicas first (least loaded core); ties to the lower core.
    for _core, ids in sorted(by_core.items(), key=lambda item: (-len(item[1]), item[0])):
        picked.extend(sorted(ids, key=_id_order)[: need - len(picked)])
        if len(picked) == need:
            break
    return picked


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
            f"device {quote_ids(unhealthy)} is Unhealthy (its NPU device node or driver is missing); "
            "kubelet should not have offered it",
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


def container_plan(
    info: NpuInfo,
    ids: Sequence[str],
    compatible_host_path: str | None,
    cdi: bool = False,
) -> ContainerPlan:
    """The Allocate answer for one container granted ``ids`` (already checked) on NPU ``info``.

    Device nodes: exactly the NPU's (DRM card + render, or /dev/rknpu + /dev/dma_heap/system),
    never all of /dev/dri. Container paths equal host paths: librknnrt opens these names.
    """
    cores = cores_of(ids)
    mask = cores_to_mask(cores)
    envs = {
        "RKNN_NPU_CORE_MASK": str(mask),
        "RKNN_NPU_CORES": format_cores(cores),
        "RKNN_NPU_SOC": info.soc.name,
        "RKNN_NPU_DEVICE": info.primary_device,
    }
    mounts: tuple[MountPlan, ...] = ()
    if compatible_host_path is not None:
        envs["RKNN_NPU_COMPATIBLE_FILE"] = CONTAINER_COMPATIBLE_PATH
        mounts = (MountPlan(CONTAINER_COMPATIBLE_PATH, compatible_host_path, True),)
    return ContainerPlan(
        device_ids=tuple(ids),
        cores=cores,
        mask=mask,
        envs=envs,
        devices=tuple(DeviceSpecPlan(path, path, "rw") for path in info.device_paths),
        mounts=mounts,
        cdi_devices=(f"{CDI_KIND}={CDI_DEVICE}",) if cdi else (),
    )


def cdi_spec(info: NpuInfo, compatible_host_path: str | None) -> dict[str, object]:
    """A CDI spec (cdiVersion 0.5.0) for the whole NPU: its device nodes and the compatible file.

    Per-core env stays in the Allocate response (CDI devices carry no per-allocation data).
    """
    edits: dict[str, object] = {
        "deviceNodes": [{"path": path, "hostPath": path, "permissions": "rw"} for path in info.device_paths],
        "env": [f"RKNN_NPU_SOC={info.soc.name}", f"RKNN_NPU_DEVICE={info.primary_device}"],
    }
    if compatible_host_path is not None:
        edits["mounts"] = [
            {
                "hostPath": compatible_host_path,
                "containerPath": CONTAINER_COMPATIBLE_PATH,
                "options": ["ro", "nosuid", "nodev", "bind"],
            }
        ]
    return {
        "cdiVersion": "0.5.0",
        "kind": CDI_KIND,
        "devices": [{"name": CDI_DEVICE, "containerEdits": edits}],
    }
