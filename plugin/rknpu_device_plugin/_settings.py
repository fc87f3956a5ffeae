"""The plugin's settings: flags override RKNPU_PLUGIN_* environment variables; built once in main."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode

from rknpu_node import (
    DEFAULT_RESOURCE_NAME,
    DEFAULT_VIDEO_REPLICAS,
    NODE_FLAG_CHOICES,
    NODE_FLAG_TYPES,
    NodeSettingsChecks,
)
from rknpu_serverkit import (
    KUBELET_WAIT_NOTICE_S,
    server_settings_config,
    settings_from_flags,
    settings_parser,
)

from ._env import ENV_PREFIX
from .telemetry import DEFAULT_POD_RESOURCES_SOCKET

DEFAULT_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
# Kubernetes extended resource names: <DNS subdomain>/<name>; "{soc}" is filled in from discovery.
_RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


class PluginSettings(NodeSettingsChecks, BaseSettings):
    """Everything the device plugin can be told. Field docs are the `--help` texts."""

    model_config = server_settings_config(ENV_PREFIX)

    device_plugin_dir: Path = Field(
        Path(DEFAULT_DEVICE_PLUGIN_DIR), description="kubelet's device plugin folder (holds kubelet.sock)"
    )
    resource_name: str = Field(
        DEFAULT_RESOURCE_NAME,
        description='extended resource to offer; "{soc}" becomes the SoC name, e.g. rockchip.com/npu-{soc} '
        "-> rockchip.com/npu-rk3588 (mixed fleets)",
    )
    socket_name: str | None = Field(
        None,
        description="our socket's file name in the device plugin folder (default: from the resource name)",
    )
    mode: Literal["core", "shared", "whole"] = Field(
        "core",
        description="core: one device per NPU core; shared: each core offered --replicas times; "
        "whole: one device for the whole NPU (all cores, never shared)",
    )
    replicas: int = Field(1, ge=1, le=64, description="shared mode: how many pods may share one core")
    fail_requests_greater_than_one: bool = Field(
        False,
        description="shared mode: refuse a container asking for more than one replica (default: spread it "
        "over distinct cores)",
    )
    fail_on_init_error: bool = Field(
        False,
        description="exit 1 when no usable NPU is found at start (default: log it and keep re-scanning)",
    )
    cdi: bool = Field(False, description="also write a CDI spec and return cdi_devices from Allocate")
    cdi_dir: Path = Field(Path("/var/run/cdi"), description="where --cdi writes the CDI spec")
    metrics_address: str | None = Field(
        None, description='serve Prometheus metrics on "host:port" (":9101" = all interfaces); default off'
    )
    pod_resources_socket: str = Field(
        DEFAULT_POD_RESOURCES_SOCKET,
        description="kubelet pod-resources socket (metrics and the probe: which pod holds which core)",
    )
    extra_device: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="comma-separated host device nodes to hand in too when present, e.g. "
        "/dev/rga,/dev/mpp_service (RGA 2D resize/colour conversion, MPP hardware video decode)",
    )
    host_librknnrt: str | None = Field(
        None,
        description="the node's librknnrt.so (host path), mounted read-only at /usr/lib/librknnrt.so "
        "in allocated containers so the runtime matches the node's driver",
    )
    probe_model: str | None = Field(
        None,
        description='functional probe model (".rknn"; "{soc}" becomes the SoC name); when set and '
        "librknnrt + rknn-toolkit-lite2 are present, one inference per free core at start and every "
        "--probe-interval, in a child process (default off)",
    )
    vpu: bool = Field(
        False,
        description="also offer the video blocks (/dev/mpp_service, /dev/rga, /dev/dma_heap/*) as "
        "rockchip.com/vpu, on a socket of its own, for pods that decode in hardware unprivileged",
    )
    vpu_replicas: int = Field(
        DEFAULT_VIDEO_REPLICAS,
        ge=1,
        le=256,
        description="--vpu: how many pods may hold rockchip.com/vpu at once (the decoder is shared)",
    )
    kubelet_wait_notice: float = Field(
        KUBELET_WAIT_NOTICE_S,
        gt=0,
        le=86400,
        description="seconds without the kubelet before one warning naming the folder it watches "
        "(--device-plugin-dir)",
    )
    nfd_dir: Path | None = Field(
        None,
        description="write the NFD feature file 'rknpu-plugin' here: mode, healthy devices and probe "
        "results as node labels (NFD reads /etc/kubernetes/node-feature-discovery/features.d)",
    )

    @field_validator("resource_name")
    @classmethod
    def _check_resource_name(cls, value: str) -> str:
        if not _RESOURCE_NAME.fullmatch(value.replace("{soc}", "soc")):
            raise ValueError(f"{value!r} is not an extended resource name like rockchip.com/npu")
        return value

    @field_validator("socket_name")
    @classmethod
    def _check_socket_name(cls, value: str | None) -> str | None:
        if value is not None and (not value.endswith(".sock") or "/" in value or value == "kubelet.sock"):
            raise ValueError(f"{value!r} must be a plain file name ending in .sock (and not kubelet.sock)")
        return value

    @model_validator(mode="after")
    def _check_mode(self) -> PluginSettings:
        if self.mode == "core" and self.replicas != 1:
            raise ValueError("replicas only apply to --mode shared")
        if self.mode != "shared" and self.fail_requests_greater_than_one:
            raise ValueError("--fail-requests-greater-than-one only applies to --mode shared")
        return self

    def resolved_resource_name(self, soc_name: str) -> str:
        return self.resource_name.replace("{soc}", soc_name)

    def resolved_socket_name(self, soc_name: str) -> str:
        if self.socket_name is not None:
            return self.socket_name
        return re.sub(r"[^A-Za-z0-9_.-]", "-", self.resolved_resource_name(soc_name)) + ".sock"


_FLAG_TYPES: dict[str, Any] = {**NODE_FLAG_TYPES, "replicas": int, "vpu_replicas": int}
_FLAG_CHOICES: dict[str, list[str]] = {**NODE_FLAG_CHOICES, "mode": ["core", "shared", "whole"]}


def build_parser() -> argparse.ArgumentParser:
    """Flags mirror the settings fields; unset flags fall back to RKNPU_PLUGIN_* and then defaults."""
    return settings_parser(
        PluginSettings,
        "rknpu-device-plugin",
        "Kubernetes device plugin offering Rockchip NPU cores as an extended resource "
        "(default rockchip.com/npu).",
        ENV_PREFIX,
        _FLAG_TYPES,
        _FLAG_CHOICES,
    )


def settings_from(args: argparse.Namespace) -> PluginSettings:
    """Flags given on the command line override the environment; raises SettingsError when invalid."""
    return settings_from_flags(PluginSettings, args, ENV_PREFIX, "rknpu-device-plugin")


def parse_settings(argv: Sequence[str]) -> PluginSettings:
    return settings_from(build_parser().parse_args(list(argv)))
