"""The workload's settings: the RKNN_NPU_* env the device plugin injects plus our RKNNLAUNCH_* knobs.

Built once at an entry point (`open`, `Pool`, a CLI command) and passed down; nothing deeper reads
the environment. `resolve_allocation` cross-checks the injected values against the discovered NPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from .._errors import RknnLaunchError, SettingsError
from ..npu import (
    ALL,
    AUTO,
    SOCS,
    SocSpec,
    check_cores_exist,
    format_cores,
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
    "librknnrt_source": "RKNN_NPU_LIBRKNNRT_SOURCE",
    "claim": "RKNN_NPU_CLAIM",
    "metadata": "RKNN_NPU_METADATA",
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
    librknnrt_source: str | None = _env("RKNN_NPU_LIBRKNNRT_SOURCE")
    """``host:<node path>`` when the plugin mounted the node's librknnrt.so (``--host-librknnrt``)."""
    claim: str | None = _env("RKNN_NPU_CLAIM")
    """``<namespace>/<name>/<uid>`` of the DRA claim the cores came from (the DRA driver sets it)."""
    metadata: str | None = _env("RKNN_NPU_METADATA")
    """A DRA device-metadata file or folder (KEP-5304); default: the kubelet's folder under the root
    (/var/run/kubernetes.io/dra-device-attributes). Its cores win over the env (docs/dra.md)."""
    root: str = Field(default="/", validation_alias=AliasChoices("RKNNLAUNCH_ROOT"))
    """Filesystem root to discover the NPU under (tests and chroots); ``/`` in a pod."""
    log_level: LogLevel = Field(default="warning", validation_alias=AliasChoices("RKNNLAUNCH_LOG_LEVEL"))

    @field_validator("core_mask", mode="before")
    @classmethod
    def _parse_core_mask(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        mask = parse_mask(value)
        if mask != ALL:  # NPU_CORE_ALL is a name, not cores; any other mask names real cores
            check_cores_exist(mask_to_cores(mask), f"core mask {value.strip()!r}")
        return mask

    @field_validator("cores", mode="before")
    @classmethod
    def _parse_cores(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        cores = parse_core_list(value)
        check_cores_exist(cores, f"core list {value.strip()!r}")
        return cores

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

    @model_validator(mode="after")
    def _mask_and_cores_agree(self) -> NpuSettings:
        # The one check that the two names of the allocation agree, at settings build: every command
        # and `open` refuses a self-contradicting allocation, with or without an NPU. (A mask of
        # NPU_CORE_ALL or AUTO means "every core", known only with the NPU: `resolve_allocation`.)
        mask, cores = self.core_mask, self.cores
        if mask is None or cores is None or mask in (ALL, AUTO):
            return self
        named = mask_to_cores(mask)
        if named != cores:
            raise SettingsError(
                f"RKNN_NPU_CORE_MASK={mask} means cores {format_cores(named)} but "
                f"RKNN_NPU_CORES={format_cores(cores)!r}",
                "set both from the same allocation (the device plugin does), or unset one of them",
                ("RKNN_NPU_CORE_MASK", "RKNN_NPU_CORES"),
            )
        return self

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
    variables: list[str] = []
    for error in exc.errors():
        loc = str(error["loc"][0]) if error["loc"] else "?"
        var = ENV_NAMES.get(loc, loc)
        original = error.get("ctx", {}).get("error")
        if isinstance(original, RknnLaunchError):
            reason, fix = original.problem, original.fix
        else:
            reason, fix = str(error["msg"]).removeprefix("Value error, "), None
        variables.append(var)
        problems.append(f"{var}={source.get(var, error.get('input'))!r}: {reason}")
        fixes.append(f"{var}: {fix or _FIXES.get(var, 'correct or unset it')}")
    return SettingsError("; ".join(problems), "; ".join(fixes), tuple(variables))
