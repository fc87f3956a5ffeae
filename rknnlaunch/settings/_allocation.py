"""The NPU allocation: the injected settings checked against the discovered NPU, and the cores they name.

Pure given its inputs (settings values and a discovered `NpuInfo`), apart from `find_npu`, the one
edge that reads the host.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import MaskError, SettingsError
from ..npu import (
    ALL,
    AUTO,
    MAX_CORES,
    SOCS,
    HostRoot,
    NpuInfo,
    SocSpec,
    cores_to_mask,
    discover,
    format_cores,
    mask_name,
    mask_to_cores,
    parse_core_list,
    parse_mask,
)
from ._metadata import MetadataReading, checked_metadata_cores, read_metadata

MOST_NPU_CORES = max(soc.npu_cores for soc in SOCS)
"""Cores of the largest NPU we support: a core number beyond it is wrong on any board."""

if TYPE_CHECKING:  # pool worker processes unpickle an NpuTarget: no pydantic on their start-up
    from ._env import NpuSettings


@dataclass(frozen=True)
class Allocation:
    """The NPU cores this process may use, after checking the settings against the hardware."""

    soc: SocSpec
    core_count: int
    cores: frozenset[int]
    injected: bool
    """False when no RKNN_NPU_CORE_MASK/RKNN_NPU_CORES was set (default: every core)."""
    source: str
    """Where the cores came from, for messages: ``RKNN_NPU_CORE_MASK=3``, ``metadata file ...`` or
    ``default (...)``."""
    claim: str | None = None
    """``<namespace>/<name>/<uid>`` of the DRA ResourceClaim the cores came from (RKNN_NPU_CLAIM)."""

    @property
    def mask(self) -> int:
        return cores_to_mask(self.cores)

    def describe(self) -> str:
        cores = format_cores(self.cores)
        return f"cores {cores} (mask {self.mask}, {mask_name(self.mask)}) of {self.soc.name}"


def discover_npu(settings: NpuSettings, host: HostRoot) -> NpuInfo:
    """Discover the NPU under ``host`` with the settings' hints: RKNN_NPU_SOC when the device tree
    is masked, and the plugin's RKNN_NPU_COMPATIBLE_FILE as a second place to read it."""
    extra = (settings.compatible_file,) if settings.compatible_file else ()
    return discover(host, soc_hint=settings.soc_spec, extra_compatible_paths=extra)


def resolve_allocation(
    settings: NpuSettings, info: NpuInfo, metadata: MetadataReading | None = None
) -> Allocation:
    """Cross-check the injected env against the discovered NPU and name the usable cores.

    Errors name the variable, the value and the fix: a SoC other than the device tree's, mask
    bits or core numbers beyond the NPU's cores, a mask that disagrees with RKNN_NPU_CORES.
    A DRA metadata file's cores (``metadata``, from `read_metadata`) win over a valid env, which
    may name a subset of them but no other core; an unusable file leaves the env in charge.
    """
    soc, count = info.soc, info.core_count
    declared = settings.soc_spec
    if declared is not None and declared.npu_family != soc.npu_family:
        raise SettingsError(
            f"RKNN_NPU_SOC={settings.soc!r} but this board's device tree says {soc.name}",
            "unset RKNN_NPU_SOC (the device tree wins), or run the pod on a node with that SoC",
        )
    all_cores = frozenset(range(count))
    mask_cores: frozenset[int] | None = None
    if settings.core_mask is not None:
        mask = settings.core_mask
        if mask == ALL:
            mask_cores = all_cores
        elif mask == AUTO:
            if count > 1:
                raise SettingsError(
                    f"RKNN_NPU_CORE_MASK={mask} (NPU_CORE_AUTO) names no core; rknnlaunch pins cores because "
                    "AUTO with several contexts has hung the rknpu driver",
                    "unset RKNN_NPU_CORE_MASK to use every core, or name cores, "
                    f"e.g. {cores_to_mask(all_cores)}",
                )
            mask_cores = all_cores
        else:
            mask_cores = mask_to_cores(mask)
            beyond = sorted(mask_cores - all_cores)
            if beyond:
                raise SettingsError(
                    f"RKNN_NPU_CORE_MASK={mask} ({mask:#x}) sets bit(s) for core(s) {format_cores(beyond)}, "
                    f"but this {soc.name} has {count} NPU core{'s' if count != 1 else ''}",
                    f"use a mask within {cores_to_mask(all_cores):#x} (cores {format_cores(all_cores)}); "
                    "if the device plugin injected it, its SoC detection is wrong for this node",
                )
    if settings.cores is not None:
        beyond = sorted(settings.cores - all_cores)
        if beyond:
            raise SettingsError(
                f"RKNN_NPU_CORES={format_cores(settings.cores)!r} names core(s) {format_cores(beyond)}, "
                f"but this {soc.name} has {count} NPU core{'s' if count != 1 else ''}",
                f"use cores within {format_cores(all_cores)}",
            )
        # Two explicit spellings that disagree never get here (NpuSettings refuses them when built);
        # a mask of NPU_CORE_ALL/AUTO means "every core", known only now.
        if mask_cores is not None and mask_cores != settings.cores:
            raise SettingsError(
                f"RKNN_NPU_CORE_MASK={settings.core_mask} means cores {format_cores(mask_cores)} but "
                f"RKNN_NPU_CORES={format_cores(settings.cores)!r}",
                "set both from the same allocation (the device plugin does), or unset one of them",
            )
    if metadata is not None and metadata.cores is not None:
        env_cores = mask_cores if mask_cores is not None else settings.cores
        env_source = (
            f"RKNN_NPU_CORE_MASK={settings.core_mask}"
            if mask_cores is not None
            else f"RKNN_NPU_CORES={format_cores(settings.cores or ())}"
        )
        cores = checked_metadata_cores(metadata.cores, info, env_cores, env_source)
        claim = ", ".join(metadata.cores.claims)
        return Allocation(soc, count, cores, True, metadata.cores.source, claim)
    if mask_cores is not None:
        return Allocation(
            soc, count, mask_cores, True, f"RKNN_NPU_CORE_MASK={settings.core_mask}", settings.claim
        )
    if settings.cores is not None:
        if not settings.cores:
            raise SettingsError("RKNN_NPU_CORES is empty", "name at least one core, e.g. 0")
        return Allocation(
            soc, count, settings.cores, True, f"RKNN_NPU_CORES={format_cores(settings.cores)}", settings.claim
        )
    return Allocation(
        soc,
        count,
        all_cores,
        False,
        "default: every core (no RKNN_NPU_CORE_MASK / RKNN_NPU_CORES injected)",
    )


def requested_cores(cores: Iterable[int] | str | None, most: int = MOST_NPU_CORES) -> frozenset[int] | None:
    """The core numbers ``cores=`` names (None: not given), checked for form only: the same check
    on every backend, so ``cores="banana"`` fails on the CPU as it does on the NPU. ``most``: core
    numbers from it up are refused (`select_cores` checks the allocation instead)."""
    if cores is None:
        return None
    if isinstance(cores, str):
        # A string is a core list ("0,1", "2") unless written as a mask ("0x3", "0b101", "NPU_CORE_0_1").
        if re.match(r"\s*(0x|0b|npu_core_|rknnlite\.|all|auto)", cores, re.IGNORECASE):
            parsed = parse_mask(cores)
            if parsed == ALL:
                return None  # every core: the whole allocation
            wanted = mask_to_cores(parsed)
        else:
            wanted = parse_core_list(cores)
    elif isinstance(cores, int):
        raise MaskError(
            f"cores={cores!r} is ambiguous (a core number or a mask?)",
            f"pass a list of core numbers, e.g. cores=[{cores}], or a mask string, e.g. cores='{cores:#x}'",
        )
    elif isinstance(cores, bool) or not isinstance(cores, Iterable):
        raise MaskError(
            f"cores={cores!r} is not a list of core numbers or a mask string",
            "pass core numbers, e.g. cores=[0, 1], or a string, e.g. cores='0,1' or cores='0x3'",
        )
    else:
        items = list(cores)
        if not all(isinstance(core, int) and not isinstance(core, bool) and core >= 0 for core in items):
            raise MaskError(
                f"cores={cores!r} is not a list of core numbers",
                "pass core numbers (non-negative integers), e.g. cores=[0, 1]",
            )
        wanted = frozenset(items)
    if not wanted:
        raise MaskError("cores=[] names no NPU core", "name at least one core, e.g. cores=[0]")
    too_high = sorted(core for core in wanted if core >= most)
    if too_high:
        raise MaskError(
            f"cores={cores!r} names core {format_cores(too_high)}, but no supported NPU has more than "
            f"{most} cores (numbered from 0)",
            f"name cores from 0 to {most - 1}",
        )
    return wanted


def select_cores(allocation: Allocation, cores: Iterable[int] | str | None) -> frozenset[int]:
    """The cores a caller asked for (``None`` = the whole allocation), checked against the allocation."""
    wanted = requested_cores(cores, most=MAX_CORES)
    if wanted is None:
        return allocation.cores
    outside = sorted(wanted - allocation.cores)
    if outside:
        raise MaskError(
            f"core(s) {format_cores(outside)} are not available to this process ({allocation.source}: "
            f"cores {format_cores(allocation.cores)})",
            f"ask for cores within {format_cores(allocation.cores)}, "
            "or request more rockchip.com/npu in the pod spec",
        )
    return wanted


def normalised_env(settings: NpuSettings, allocation: Allocation, info: NpuInfo) -> dict[str, str]:
    """The RKNN_NPU_* variables `rknnlaunch run` exports to its child, in their canonical forms."""
    env = {
        "RKNN_NPU_CORE_MASK": str(allocation.mask),
        "RKNN_NPU_CORES": format_cores(allocation.cores),
        "RKNN_NPU_SOC": allocation.soc.name,
        "RKNN_NPU_DEVICE": settings.device or info.primary_device,
    }
    if settings.compatible_file:
        env["RKNN_NPU_COMPATIBLE_FILE"] = settings.compatible_file
    return env


@dataclass(frozen=True)
class NpuTarget:
    """The discovered NPU and the cores this process may use on it."""

    host: HostRoot
    info: NpuInfo
    allocation: Allocation


def find_npu(settings: NpuSettings) -> NpuTarget:
    """Discover the NPU (device tree via the plugin's replacement file too), read the DRA metadata
    file if there is one, and check the allocation."""
    host = HostRoot(settings.root)
    info = discover_npu(settings, host)
    return NpuTarget(host, info, resolve_allocation(settings, info, read_metadata(settings, host)))
