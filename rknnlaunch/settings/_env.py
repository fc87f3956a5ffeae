"""The workload's settings: the RKNN_NPU_* env the device plugin injects plus our RKNNLAUNCH_* knobs.

Built once at an entry point (`open`, `Pool`, a CLI command) and passed down; nothing deeper reads
the environment. `resolve_allocation` cross-checks the injected values against the discovered NPU.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from .._errors import MaskError, RknnLaunchError, SettingsError
from ..npu import (
    ALL,
    AUTO,
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
    soc_by_name,
)

LogLevel = Literal["debug", "info", "warning", "error"]

# Environment variable of each field, for error messages (pydantic reports the alias in `loc`).
ENV_NAMES: dict[str, str] = {
    "core_mask": "RKNN_NPU_CORE_MASK",
    "cores": "RKNN_NPU_CORES",
    "soc": "RKNN_NPU_SOC",
    "device": "RKNN_NPU_DEVICE",
    "compatible_file": "RKNN_NPU_COMPATIBLE_FILE",
    "root": "RKNNLAUNCH_ROOT",
    "log_level": "RKNNLAUNCH_LOG_LEVEL",
}
PLUGIN_VARIABLES = ("RKNN_NPU_CORE_MASK", "RKNN_NPU_CORES", "RKNN_NPU_SOC", "RKNN_NPU_DEVICE")
_FIXES: dict[str, str] = {
    "RKNN_NPU_CORE_MASK": 'write a mask such as "3", "0x3" or "NPU_CORE_0_1", or unset it to use every core',
    "RKNN_NPU_CORES": 'write core numbers separated by commas, e.g. "0,1", or unset it',
    "RKNN_NPU_SOC": f"write one of {', '.join(soc.name for soc in SOCS)}, or unset it",
    "RKNNLAUNCH_LOG_LEVEL": "write one of debug, info, warning, error",
}


def _env(name: str) -> Any:
    return Field(default=None, validation_alias=AliasChoices(name))


class NpuSettings(BaseSettings):
    """What the rknpu device plugin injected into this container, plus rknnlaunch's own knobs.

    Every field is optional: without the plugin (plain ``docker run``) the workload uses all cores
    of the NPU it discovers. Build with `load_settings` to get `SettingsError` instead of pydantic's
    ValidationError.
    """

    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore", frozen=True)

    core_mask: int | None = _env("RKNN_NPU_CORE_MASK")
    """Allocated cores as a mask; any form `rknnlaunch.npu.parse_mask` reads (plugin writes decimal)."""
    # NoDecode: the env source would otherwise JSON-decode "1" into the int 1 (and reject it).
    cores: Annotated[frozenset[int] | None, NoDecode] = _env("RKNN_NPU_CORES")
    """Allocated core numbers, ``"0,1"``."""
    soc: str | None = _env("RKNN_NPU_SOC")
    """Canonical SoC name (``rk3588``); used when the device tree cannot be read."""
    device: str | None = _env("RKNN_NPU_DEVICE")
    """The NPU's device node in this container (render node or /dev/rknpu)."""
    compatible_file: str | None = _env("RKNN_NPU_COMPATIBLE_FILE")
    """The host's device-tree `compatible`, mounted by the plugin (/run/rknpu/compatible)."""
    root: str = Field(default="/", validation_alias=AliasChoices("RKNNLAUNCH_ROOT"))
    """Filesystem root to discover the NPU under (tests and chroots); ``/`` in a pod."""
    log_level: LogLevel = Field(default="warning", validation_alias=AliasChoices("RKNNLAUNCH_LOG_LEVEL"))

    @field_validator("core_mask", mode="before")
    @classmethod
    def _parse_core_mask(cls, value: Any) -> Any:
        return parse_mask(value) if isinstance(value, str) else value

    @field_validator("cores", mode="before")
    @classmethod
    def _parse_cores(cls, value: Any) -> Any:
        return parse_core_list(value) if isinstance(value, str) else value

    @field_validator("soc", mode="before")
    @classmethod
    def _canonical_soc(cls, value: Any) -> Any:
        if isinstance(value, str):
            soc = soc_by_name(value)
            if soc is None:
                raise ValueError(f"unknown SoC {value!r}")
            return soc.name
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_level(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @property
    def injected(self) -> bool:
        """Whether the device plugin (or the user) named cores for this container."""
        return self.core_mask is not None or self.cores is not None

    @property
    def soc_spec(self) -> SocSpec | None:
        return None if self.soc is None else soc_by_name(self.soc)


class _MappingSettings(NpuSettings):
    """NpuSettings from an explicit mapping only: the process environment is not consulted."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def load_settings(env: Mapping[str, str] | None = None) -> NpuSettings:
    """Read the settings from ``env`` (default: the process environment).

    Raises `SettingsError` naming the variable, its value and what to write instead.
    """
    try:
        if env is None:
            return NpuSettings()
        names = set(ENV_NAMES.values())
        values: dict[str, Any] = {k: v for k, v in env.items() if k in names and v != ""}
        return _MappingSettings(**values)
    except ValidationError as exc:
        raise _settings_error(exc, env) from None


def _settings_error(exc: ValidationError, env: Mapping[str, str] | None) -> SettingsError:
    import os

    source = os.environ if env is None else env
    problems: list[str] = []
    fixes: list[str] = []
    for error in exc.errors():
        loc = str(error["loc"][0]) if error["loc"] else "?"
        var = ENV_NAMES.get(loc, loc)
        original = error.get("ctx", {}).get("error")
        if isinstance(original, RknnLaunchError):
            reason, fix = original.problem, original.fix
        else:
            reason, fix = str(error["msg"]).removeprefix("Value error, "), None
        problems.append(f"{var}={source.get(var, error.get('input'))!r}: {reason}")
        fixes.append(f"{var}: {fix or _FIXES.get(var, 'correct or unset it')}")
    return SettingsError("; ".join(problems), "; ".join(fixes))


@dataclass(frozen=True)
class Allocation:
    """The NPU cores this process may use, after checking the settings against the hardware."""

    soc: SocSpec
    core_count: int
    cores: frozenset[int]
    injected: bool
    """False when no RKNN_NPU_CORE_MASK/RKNN_NPU_CORES was set (default: every core)."""
    source: str
    """Where the cores came from, for messages: ``RKNN_NPU_CORE_MASK=3`` or ``default (...)``."""

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


def resolve_allocation(settings: NpuSettings, info: NpuInfo) -> Allocation:
    """Cross-check the injected env against the discovered NPU and name the usable cores.

    Errors name the variable, the value and the fix: a SoC other than the device tree's, mask
    bits or core numbers beyond the NPU's cores, a mask that disagrees with RKNN_NPU_CORES.
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
        if mask_cores is not None and mask_cores != settings.cores:
            raise SettingsError(
                f"RKNN_NPU_CORE_MASK={settings.core_mask} means cores {format_cores(mask_cores)} but "
                f"RKNN_NPU_CORES={format_cores(settings.cores)!r}",
                "set both from the same allocation (the device plugin does), or unset one of them",
            )
    if mask_cores is not None:
        return Allocation(soc, count, mask_cores, True, f"RKNN_NPU_CORE_MASK={settings.core_mask}")
    if settings.cores is not None:
        if not settings.cores:
            raise SettingsError("RKNN_NPU_CORES is empty", "name at least one core, e.g. 0")
        return Allocation(soc, count, settings.cores, True, f"RKNN_NPU_CORES={format_cores(settings.cores)}")
    return Allocation(
        soc,
        count,
        all_cores,
        False,
        "default: every core (no RKNN_NPU_CORE_MASK / RKNN_NPU_CORES injected)",
    )


def select_cores(allocation: Allocation, cores: Iterable[int] | str | None) -> frozenset[int]:
    """The cores a caller asked for (``None`` = the whole allocation), checked against the allocation."""
    if cores is None:
        return allocation.cores
    if isinstance(cores, str):
        # A string is a core list ("0,1", "2") unless written as a mask ("0x3", "0b101", "NPU_CORE_0_1").
        if re.match(r"\s*(0x|0b|npu_core_|rknnlite\.|all|auto)", cores, re.IGNORECASE):
            parsed = parse_mask(cores)
            wanted = allocation.cores if parsed == ALL else mask_to_cores(parsed)
        else:
            wanted = parse_core_list(cores)
    elif isinstance(cores, int):
        raise MaskError(
            f"cores={cores!r} is ambiguous (a core number or a mask?)",
            f"pass a list of core numbers, e.g. cores=[{cores}], or a mask string, e.g. cores='{cores:#x}'",
        )
    else:
        wanted = frozenset(int(core) for core in cores)
    if not wanted:
        raise MaskError("cores=[] names no NPU core", f"name cores within {format_cores(allocation.cores)}")
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
