"""Which NPU core is held by which prepared claim, whole or by shares, and the refusal of a claim
whose cores another claim already holds (a stale allocation) or whose shares would overbook a
shared core, naming the holders. Pure: the store calls it under its lock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rknnlaunch.npu import format_cores
from rknpu_node import device_cores

from .._settings import DEFAULT_MAX_SHARES
from ..slices import SHARES_CAPACITY
from ._claim import PreparedClaim


def holders(prepared: Mapping[str, PreparedClaim]) -> dict[int, PreparedClaim]:
    """Core -> the claim holding it exclusively (adminAccess results and shares hold it not)."""
    held: dict[int, PreparedClaim] = {}
    for claim in prepared.values():
        for core in claim.exclusive_cores:
            held.setdefault(core, claim)
    return held


def share_holders(prepared: Mapping[str, PreparedClaim]) -> dict[int, dict[str, tuple[PreparedClaim, int]]]:
    """Core -> UID -> (the claim, the shares of that core it has booked)."""
    booked: dict[int, dict[str, tuple[PreparedClaim, int]]] = {}
    for claim in prepared.values():
        for core, shares in claim.shares.items():
            booked.setdefault(core, {})[claim.ref.uid] = (claim, shares)
    return booked


@dataclass
class _Clash:
    holder: PreparedClaim
    cores: set[int] = field(default_factory=set)
    devices: list[str] = field(default_factory=list)


@dataclass
class _Overbooked:
    core: int
    booked: int
    needed: int
    holders: list[PreparedClaim]


def _find(
    prepared: Mapping[str, PreparedClaim], candidate: PreparedClaim, max_shares: int
) -> tuple[dict[str, _Clash], list[_Overbooked]]:
    """What stands in ``candidate``'s way: claims holding a core it needs (whole against whole,
    whole against shares either way), and shared cores its shares would take over ``max_shares``.
    The same claim again (pods sharing it, a retry) never conflicts, nor does adminAccess."""
    others = {uid: claim for uid, claim in prepared.items() if uid != candidate.ref.uid}
    whole = holders(others)
    shared = share_holders(others)
    clashes: dict[str, _Clash] = {}

    def clash(holder: PreparedClaim, core: int, device: str) -> None:
        entry = clashes.setdefault(holder.ref.uid, _Clash(holder))
        entry.cores.add(core)
        if device not in entry.devices:
            entry.devices.append(device)

    for device in candidate.devices:
        if device.admin:
            continue
        for core in sorted(device_cores(device.device)):
            holder = whole.get(core)
            if holder is not None:
                clash(holder, core, device.device)
            if not device.shared:
                for share_holder, _shares in (shared.get(core) or {}).values():
                    clash(share_holder, core, device.device)
    overbooked = []
    for core, needed in sorted(candidate.shares.items()):
        booked_by = shared.get(core) or {}
        booked = sum(shares for _claim, shares in booked_by.values())
        if booked + needed > max_shares:
            overbooked.append(_Overbooked(core, booked, needed, [c for c, _s in booked_by.values()]))
    return clashes, overbooked


def conflicting_holders(
    prepared: Mapping[str, PreparedClaim], candidate: PreparedClaim, max_shares: int = DEFAULT_MAX_SHARES
) -> dict[str, PreparedClaim]:
    """UID -> each prepared claim standing in ``candidate``'s way (see `conflicts`)."""
    clashes, overbooked = _find(prepared, candidate, max_shares)
    found = {uid: entry.holder for uid, entry in clashes.items()}
    for entry in overbooked:
        for holder in entry.holders:
            found.setdefault(holder.ref.uid, holder)
    return found


def conflicts(
    prepared: Mapping[str, PreparedClaim], candidate: PreparedClaim, max_shares: int = DEFAULT_MAX_SHARES
) -> str | None:
    """The error for ``candidate`` when a core it needs is held by another prepared claim (whole,
    or by shares when it needs the core whole), or its shares of a shared core would take more
    than the core's ``max_shares``; else None. The same claim again (pods sharing it, a retry)
    never conflicts, and neither does an adminAccess result, on either side."""
    clashes, overbooked = _find(prepared, candidate, max_shares)
    if not clashes and not overbooked:
        return None
    parts = [
        f"core {format_cores(entry.cores)} (device {', '.join(entry.devices)}) is held by "
        f"{entry.holder.ref.describe()}"
        for entry in clashes.values()
    ]
    parts += [
        f"core {entry.core} has {entry.booked} of its {max_shares} {SHARES_CAPACITY} booked by "
        f"{', '.join(h.ref.describe() for h in entry.holders)} and this claim needs {entry.needed}"
        for entry in overbooked
    ]
    return (
        f"{candidate.ref.describe()}: {'; '.join(parts)}, prepared on this node and not unprepared; "
        "the allocation is stale (the scheduler allocated a core, or shares of it, still in use): "
        "delete this claim's pod so it is allocated again, or end the holder's pods"
    )
