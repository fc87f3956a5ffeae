"""Core-mask algebra: cores <-> masks, parsing, and which masks RKNNLite can run on each SoC."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from .._errors import MaskError
from ._soc import SOCS, SocSpec

CoreSet = frozenset[int]

AUTO = 0
"""RKNNLite.NPU_CORE_AUTO: the runtime picks the least-busy core per job."""
ALL = 0xFFFF
"""RKNNLite.NPU_CORE_ALL: every core (RK3588 maps it to 7)."""
MAX_CORES = 16
"""rknn_core_mask is 16 bits wide."""

NAMED_MASKS: dict[str, int] = {
    "AUTO": AUTO,
    "ALL": ALL,
    "0": 0b001,
    "1": 0b010,
    "2": 0b100,
    "0_1": 0b011,
    "0_1_2": 0b111,
}

_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_HEX = re.compile(r"0x[0-9a-f]+", re.ASCII | re.IGNORECASE)
_BIN = re.compile(r"0b[01]+", re.ASCII | re.IGNORECASE)
_CORE_LIST = re.compile(r"[0-9]{1,2}([,_][0-9]{1,2})+", re.ASCII)
_FORMS = '"3", "0x3", "0b011", "0_1", "0,1" or "NPU_CORE_0_1"'


def cores_to_mask(cores: Iterable[int]) -> int:
    """``{0, 1}`` -> ``3``."""
    mask = 0
    for core in cores:
        if not 0 <= core < MAX_CORES:
            raise MaskError(f"NPU core {core} does not exist", f"use core numbers 0..{MAX_CORES - 1}")
        mask |= 1 << core
    return mask


def check_cores_exist(cores: Iterable[int], shown: str) -> None:
    """`MaskError` when ``cores`` name a core no supported SoC has (``shown`` names the input): a mask
    of 8 is core 3, beyond RK3588's three cores, whatever board this is (or with none)."""
    biggest = max(SOCS, key=lambda soc: soc.npu_cores)
    beyond = sorted(core for core in cores if core >= biggest.npu_cores)
    if beyond:
        last = biggest.npu_cores - 1
        raise MaskError(
            f"{shown} names core(s) {format_cores(beyond)}, and no supported SoC has more than "
            f"{biggest.npu_cores} NPU cores ({biggest.name}: cores 0..{last})",
            f"name cores within 0..{last} (a mask of at most {(1 << biggest.npu_cores) - 1:#x})",
        )


def mask_to_cores(mask: int) -> CoreSet:
    """``3`` -> ``{0, 1}``; AUTO (0) is the empty set: it names no core."""
    if not 0 <= mask <= ALL:
        raise MaskError(f"core mask {mask} is out of range", f"use a value from 0 to {ALL:#x}")
    return frozenset(bit for bit in range(MAX_CORES) if mask >> bit & 1)


def format_cores(cores: Iterable[int], sep: str = ",") -> str:
    """``{1, 0}`` -> ``"0,1"`` (the form of `RKNN_NPU_CORES`); ``sep="_"`` gives ``"0_1"``."""
    return sep.join(str(core) for core in sorted(cores))


def mask_name(mask: int) -> str:
    """The RKNNLite constant spelling of a mask: ``3`` -> ``"NPU_CORE_0_1"``."""
    if mask == AUTO:
        return "NPU_CORE_AUTO"
    if mask == ALL:
        return "NPU_CORE_ALL"
    return "NPU_CORE_" + format_cores(mask_to_cores(mask), "_")


def parse_mask(text: str) -> int:
    """Parse a core mask written any way users write one.

    Accepted: a decimal mask ``"3"``, hex ``"0x3"``, binary ``"0b011"``, a core list ``"0_1"``
    or ``"0,1"``, and RKNNLite's names ``"NPU_CORE_0_1"``, ``"NPU_CORE_AUTO"``, ``"NPU_CORE_ALL"``
    (the ``NPU_CORE_`` prefix is optional for AUTO/ALL). A single number is a mask, not a core:
    ``"2"`` is core 1. Raises `MaskError` for anything else.
    """
    if not isinstance(text, str):
        raise MaskError(f"core mask {text!r} is not text", f"write it as {_FORMS}")
    raw = text.strip()
    upper = raw.upper()
    name = upper.removeprefix("RKNNLITE.").removeprefix("NPU_CORE_")
    if name != upper.removeprefix("RKNNLITE.") or name in ("AUTO", "ALL"):
        if name in NAMED_MASKS:
            return NAMED_MASKS[name]
        if _CORE_LIST.fullmatch(name) or _DIGITS.fullmatch(name):
            return _parse_core_list(raw, name)
        raise MaskError(f"unknown core mask name {raw!r}", f"write it as {_FORMS}")
    if _CORE_LIST.fullmatch(raw):
        return _parse_core_list(raw, raw)
    if _HEX.fullmatch(raw):
        value = int(raw, 16)
    elif _BIN.fullmatch(raw):
        value = int(raw, 2)
    elif _DIGITS.fullmatch(raw):
        value = int(raw, 10)
    else:
        raise MaskError(f"cannot read {raw!r} as an NPU core mask", f"write it as {_FORMS}")
    if value > ALL:
        raise MaskError(f"core mask {raw!r} is larger than {ALL:#x}", "use one bit per NPU core, e.g. 0x7")
    return value


def _parse_core_list(raw: str, body: str) -> int:
    return cores_to_mask(parse_core_list(body, shown=raw))


def parse_core_list(text: str, *, shown: str | None = None) -> CoreSet:
    """``"0,1"`` / ``"0_1"`` / ``"0 1"`` / ``"2"`` -> ``{0, 1}`` ... (core numbers, never a mask).

    The form of `RKNN_NPU_CORES`. Raises `MaskError` (naming ``shown``, default ``text``).
    """
    name = text if shown is None else shown
    parts = [part for part in re.split(r"[,_\s]+", text.strip()) if part]
    # isdecimal, not isdigit: int() rejects digits such as "²" that isdigit accepts.
    if not parts or not all(part.isdecimal() for part in parts):
        raise MaskError(f"cannot read {name!r} as a list of NPU core numbers", 'write e.g. "0,1"')
    cores = [int(part) for part in parts]
    if len(set(cores)) != len(cores):
        raise MaskError(f"core list {name!r} names a core twice", "name each core once, e.g. 0,1")
    cores_to_mask(cores)  # range check
    return frozenset(cores)


def runtime_effective_mask(soc: SocSpec, mask: int) -> int | None:
    """The mask RKNNLite really runs with when asked for ``mask`` on ``soc``; None if it fails."""
    return dict(soc.runtime_masks).get(mask)


def _check_cores(soc: SocSpec, cores: CoreSet, core_count: int | None) -> int:
    count = soc.npu_cores if core_count is None else core_count
    if not cores:
        raise MaskError("no NPU core was given", f"name at least one of cores 0..{count - 1}")
    beyond = sorted(core for core in cores if core >= count)
    if beyond:
        raise MaskError(
            f"core(s) {format_cores(beyond)} do not exist on this {soc.name} (it has {count} NPU "
            f"core{'s' if count != 1 else ''}: {format_cores(range(count))})",
            f"use cores within 0..{count - 1}",
        )
    return count


def is_runnable(soc: SocSpec, cores: Iterable[int], core_count: int | None = None) -> bool:
    """Whether one RKNNLite context can run on exactly ``cores``."""
    core_set = frozenset(cores)
    count = soc.npu_cores if core_count is None else core_count
    if not core_set or max(core_set) >= count or min(core_set) < 0:
        return False
    if not soc.core_mask_settable:
        return core_set == frozenset({0})
    mask = cores_to_mask(core_set)
    return runtime_effective_mask(soc, mask) == mask


def rknnlite_mask(soc: SocSpec, cores: Iterable[int], core_count: int | None = None) -> int:
    """The ``core_mask`` to pass to `RKNNLite.init_runtime` to run one context on ``cores``.

    Single-core NPUs get 0 (they reject every other mask). Raises `MaskError` when the runtime
    cannot run the set as one context; `runnable_groups` says how to split it.
    """
    core_set = frozenset(cores)
    _check_cores(soc, core_set, core_count)
    if not soc.core_mask_settable:
        return AUTO
    if not is_runnable(soc, core_set, core_count):
        groups = " + ".join("{" + format_cores(g) + "}" for g in runnable_groups(soc, core_set, core_count))
        raise MaskError(
            f"RKNNLite cannot run one context on cores {{{format_cores(core_set)}}} of {soc.name} "
            f"(mask {cores_to_mask(core_set)} is rejected)",
            f"run one context per group: {groups}",
        )
    return cores_to_mask(core_set)


def runnable_groups(soc: SocSpec, cores: Iterable[int], core_count: int | None = None) -> tuple[CoreSet, ...]:
    """Split ``cores`` into the fewest groups that each run as one context: {0,2} -> {0}, {2}.

    Groups come out ordered by their lowest core. A set that is runnable as is stays whole.
    """
    remaining = frozenset(cores)
    _check_cores(soc, remaining, core_count)
    groups: list[CoreSet] = []
    while remaining:
        # Largest runnable subset first; among equals, the one with the lowest cores.
        best: CoreSet | None = None
        for size in range(len(remaining), 0, -1):
            for combo in itertools.combinations(sorted(remaining), size):
                if is_runnable(soc, combo, core_count):
                    best = frozenset(combo)
                    break
            if best is not None:
                break
        if best is None:  # only on a single-core SoC asked for a core other than 0
            raise MaskError(f"core(s) {format_cores(remaining)} cannot run on {soc.name}", "use core 0")
        groups.append(best)
        remaining = remaining - best
    return tuple(sorted(groups, key=min))


def runnable_core_sets(
    soc: SocSpec, core_count: int | None = None, within: Iterable[int] | None = None
) -> tuple[CoreSet, ...]:
    """Every core set one context can run on, inside ``within`` (default: all cores).

    RK3588 with all cores: {0}, {1}, {2}, {0,1}, {0,1,2} (smallest first).
    """
    count = soc.npu_cores if core_count is None else core_count
    pool = sorted(frozenset(range(count)) if within is None else frozenset(within) & set(range(count)))
    found = [
        frozenset(combo)
        for size in range(1, len(pool) + 1)
        for combo in itertools.combinations(pool, size)
        if is_runnable(soc, combo, count)
    ]
    return tuple(found)


def context_groups(soc: SocSpec, core_count: int | None = None) -> tuple[CoreSet, ...]:
    """Split the NPU's cores into the largest blocks in which EVERY non-empty subset runs as one
    context, lowest cores first: RK3588 {0,1} + {2}; RK3576 {0,1}; single-core NPUs {0}.

    Any cores picked from one block are a valid one-context set, so "N cores of the same block"
    (a DRA ``matchAttribute`` on the block) can only ever give a mask the runtime accepts.
    """
    count = soc.npu_cores if core_count is None else core_count
    remaining = sorted(range(count))
    groups: list[CoreSet] = []
    while remaining:
        block: CoreSet | None = None
        for size in range(len(remaining), 0, -1):
            for combo in itertools.combinations(remaining, size):
                subsets = (sub for n in range(1, size + 1) for sub in itertools.combinations(combo, n))
                if all(is_runnable(soc, sub, count) for sub in subsets):
                    block = frozenset(combo)
                    break
            if block is not None:
                break
        if block is None:  # a core no context can run on alone (core >= 1 of a single-core NPU)
            block = frozenset({remaining[0]})
        groups.append(block)
        remaining = [core for core in remaining if core not in block]
    return tuple(sorted(groups, key=min))


def allocation_order(soc: SocSpec, core_count: int | None = None) -> tuple[int, ...]:
    """Cores in the order single-core allocations should take them: the cores that belong to the
    fewest multi-core one-context sets first, so the pairs stay free longest (RK3588: 2, 0, 1)."""
    count = soc.npu_cores if core_count is None else core_count
    multi = [s for s in runnable_core_sets(soc, count) if len(s) > 1]
    return tuple(sorted(range(count), key=lambda core: (sum(core in s for s in multi), core)))
