"""The settings both servers share, declared and checked once: a server's settings class inherits them.

Declared here: the host root, the SoC hint, the health and probe periods, inotify and the log
settings (their `--help` lines follow the program's own: `rknpu_serverkit.add_setting_flags`).
Checked here, declared by each program (their help texts differ): extra device nodes, the host's
librknnrt, the probe model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_validator

from rknpu_serverkit import (
    LOG_FORMATS,
    LOG_LEVELS,
    LogFormat,
    LogLevel,
    check_device_paths,
    check_host_file,
    check_soc_name,
    split_device_list,
)

NODE_FLAG_TYPES: dict[str, Any] = {"health_interval": float, "probe_interval": float, "probe_timeout": float}
"""The argparse types of the shared fields' flags (a program's flag types add its own)."""
NODE_FLAG_CHOICES: dict[str, list[str]] = {"log_format": LOG_FORMATS, "log_level": LOG_LEVELS}
"""The choices of the shared fields' flags (a program's flag choices add its own)."""


class NodeSettingsChecks(BaseModel):
    """The fields both servers declare alike, and validators for ``soc``, ``extra_device``,
    ``host_librknnrt`` and ``probe_model`` (the last three declared by the inheriting class, with
    its own defaults and --help texts)."""

    host_root: Path = Field(Path("/"), description="where the host's / is mounted (the DaemonSet uses /host)")
    soc: str | None = Field(
        None, description="SoC to assume when the device tree cannot be read (e.g. rk3588)"
    )
    health_interval: float = Field(
        0.5,
        gt=0,
        le=300,
        description="seconds between driver re-checks (device node changes are seen at once)",
    )
    inotify: bool = Field(True, description="watch folders with inotify (--no-inotify polls instead)")
    probe_interval: float = Field(300.0, gt=0, le=86400, description="seconds between probe rounds")
    probe_timeout: float = Field(
        20.0, gt=0, le=600, description="seconds one core's probe may take before the core counts as hung"
    )
    log_format: LogFormat = Field("text", description="log line format")
    log_level: LogLevel = Field("info", description="log level")

    if TYPE_CHECKING:  # the inheriting class's field (its help text is the program's own)
        probe_model: str | None

    @field_validator("soc", check_fields=False)
    @classmethod
    def _check_soc(cls, value: str | None) -> str | None:
        return check_soc_name(value)

    @field_validator("extra_device", mode="before", check_fields=False)
    @classmethod
    def _split_extra_devices(cls, value: object) -> object:
        return split_device_list(value)

    @field_validator("extra_device", check_fields=False)
    @classmethod
    def _check_extra_devices(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_device_paths(value)

    @field_validator("host_librknnrt", check_fields=False)
    @classmethod
    def _check_host_librknnrt(cls, value: str | None) -> str | None:
        return check_host_file(value)

    @field_validator("probe_model", check_fields=False)
    @classmethod
    def _check_probe_model(cls, value: str | None) -> str | None:
        if value is not None and not value.replace("{soc}", "soc").endswith(".rknn"):
            raise ValueError(f"{value!r} must name an .rknn model, e.g. /opt/rknpu-probe/probe-{{soc}}.rknn")
        return value or None

    def resolved_probe_model(self, soc_name: str) -> Path | None:
        return Path(self.probe_model.replace("{soc}", soc_name)) if self.probe_model else None
