"""Which NPU core is held by which prepared claim, and the refusal of a claim whose cores another
claim already holds (a stale allocation), naming the holder. Pure: the store calls it under its lock."""

from __future__ import annotations

from collections.abc import Mapping

from rknnlaunch.npu import format_cores
from rknpu_node import device_cores

from ._claim import PreparedClaim


def holders(prepared: Mapping[str, PreparedClaim]) -> dict[int, PreparedClaim]:
    """Core -> the claim holding it exclusively (adminAccess results hold nothing)."""
    held: dict[int, PreparedClaim] = {}
    for claim in prepared.values():
        for core in claim.exclusive_cores:
            held.setdefault(core, claim)
    return held


def conflicting_holders(
    prepared: Mapping[str, PreparedClaim], candidate: PreparedClaim
) -> dict[str, PreparedClaim]:
    """UID -> each prepared claim holding a core ``candidate`` needs exclusively (itself and
    adminAccess results, on either side, never conflict)."""
    taken = {
        core: holder for core, holder in holders(prepared).items() if holder.ref.uid != candidate.ref.uid
    }
    found: dict[str, PreparedClaim] = {}
    for device in candidate.devices:
        if device.admin:
            continue
        for core in device_cores(device.device):
            holder = taken.get(core)
            if holder is not None:
                found.setdefault(holder.ref.uid, holder)
    return found


def conflicts(prepared: Mapping[str, PreparedClaim], candidate: PreparedClaim) -> str | None:
    """The error for ``candidate`` when a core it needs exclusively is held by another prepared
    claim, else None. The same claim again (pods sharing it, a retry) never conflicts, and
    neither does an adminAccess result, on either side."""
    taken = {
        core: holder for core, holder in holders(prepared).items() if holder.ref.uid != candidate.ref.uid
    }
    clashes: dict[str, tuple[PreparedClaim, set[int], list[str]]] = {}
    for device in candidate.devices:
        if device.admin:
            continue
        for core in sorted(device_cores(device.device)):
            holder = taken.get(core)
            if holder is None:
                continue
            entry = clashes.setdefault(holder.ref.uid, (holder, set(), []))
            entry[1].add(core)
            if device.device not in entry[2]:
                entry[2].append(device.device)
    if not clashes:
        return None
    parts = [
        f"core {format_cores(cores)} (device {', '.join(names)}) is held by {holder.ref.describe()}"
        for holder, cores, names in clashes.values()
    ]
    return (
        f"{candidate.ref.describe()}: {'; '.join(parts)}, prepared on this node and not unprepared; "
        "the allocation is stale (the scheduler allocated a core still in use): delete this claim's "
        "pod so it is allocated again, or end the holder's pods"
    )
