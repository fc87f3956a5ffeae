"""The checks of what both servers' settings say about the node's NPU (the SoC hint, extra device
nodes, the host's librknnrt, the probe model), written once: a settings class inherits them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, field_validator

from rknpu_serverkit import check_device_paths, check_host_file, check_soc_name, split_device_list


class NodeSettingsChecks(BaseModel):
    """Validators for the fields ``soc``, ``extra_device``, ``host_librknnrt`` and ``probe_model``
    of the settings class that inherits them (which declares the fields, their defaults and
    their --help texts)."""

    if TYPE_CHECKING:  # the inheriting class's field (a field here would change the --help order)
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
