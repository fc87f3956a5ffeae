"""The driver's settings: flags override RKNPU_DRA_* environment variables; built once in main."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

from rknnlaunch.settings import DRA_DRIVER_NAME
from rknpu_node import NODE_FLAG_CHOICES, NODE_FLAG_TYPES, NodeSettingsChecks
from rknpu_serverkit import (
    KUBELET_WAIT_NOTICE_S,
    server_settings_config,
    settings_from_flags,
    settings_parser,
)

ENV_PREFIX = "RKNPU_DRA_"
SliceLayoutSetting = Literal["auto", "partitionable", "per-core", "shared"]
SLICE_LAYOUTS: list[str] = ["auto", "partitionable", "per-core", "shared"]
PROG = "rknpu-dra-driver"
DEFAULT_MAX_SHARES = 4
"""``--max-shares``: a shared core's ``shares`` capacity (slices publish it, claims book against it)."""
DEFAULT_DRIVER_NAME = DRA_DRIVER_NAME
"""One name, owned by `rknnlaunch.settings` (the SDK looks for ``<driver>-metadata.json``)."""
DEFAULT_REGISTRATION_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
# A DRA driver name is a DNS subdomain (resource.k8s.io validation), at most 63 characters.
_DRIVER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# A node name is a DNS subdomain too (at most 253 characters).
_NODE_NAME = _DRIVER_NAME


def _env(name: str) -> str:
    # The conventional variables (the DaemonSet sets NODE_NAME from spec.nodeName; kubectl's
    # KUBECONFIG) are read here, at the one place settings are built, never deeper.
    return os.environ.get(name, "")


class DraSettings(NodeSettingsChecks, BaseSettings):
    """Everything the DRA driver can be told. Field docs are the `--help` texts."""

    model_config = server_settings_config(ENV_PREFIX)

    node_name: str = Field(
        default_factory=lambda: _env("NODE_NAME"),
        description="this node's name, the ResourceSlice pool (default: $NODE_NAME)",
    )
    driver_name: str = Field(DEFAULT_DRIVER_NAME, description="the DRA driver name (DeviceClasses select it)")
    kubeconfig: str = Field(
        default_factory=lambda: _env("KUBECONFIG"),
        description="kubeconfig file for the API server (default: $KUBECONFIG, else in-cluster)",
    )
    registration_dir: Path = Field(
        Path(DEFAULT_REGISTRATION_DIR), description="kubelet's plugin registration folder"
    )
    plugin_dir: Path | None = Field(
        None,
        description="our socket's and checkpoint's folder (default: /var/lib/kubelet/plugins/<driver-name>)",
    )
    cdi_dir: Path = Field(Path("/var/run/cdi"), description="where the per-claim CDI specs are written")
    extra_device: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="comma-separated host device nodes to hand in too when present, "
        "e.g. /dev/rga,/dev/mpp_service",
    )
    host_librknnrt: str | None = Field(
        None,
        description="the node's librknnrt.so (host path), mounted read-only at /usr/lib/librknnrt.so",
    )
    api_client: Literal["auto", "kubernetes-client"] = Field(
        "auto",
        description="how to reach the API server: auto (a light HTTP client, the official kubernetes "
        "client for exec/auth-provider credentials or a proxy) or kubernetes-client (always that one)",
    )
    slice_layout: SliceLayoutSetting = Field(
        "auto",
        description="how the ResourceSlice offers the cores: partitionable (one device per one-context "
        "core set, with per-core counters; needs DRAPartitionableDevices, else the driver stops), "
        "per-core, shared (one device per core that several claims may hold, each taking shares of "
        "it, --max-shares; needs DRAConsumableCapacity, on by default from 1.36, else per-core), or "
        "auto (partitionable, and per-core for good once the API server drops the counters)",
    )
    max_shares: int = Field(
        DEFAULT_MAX_SHARES,
        ge=2,
        le=64,
        description="--slice-layout shared: how many shares each core has (a claim takes 1 unless it "
        "asks for more with capacity.requests.shares; all of them is the core alone)",
    )
    vpu: bool = Field(
        False,
        description="also publish the video blocks (/dev/mpp_service, /dev/rga, /dev/dma_heap/*) as the "
        "device vpu (DeviceClass vpu.rockchip.com), which several claims may hold at once",
    )
    api_timeout: float = Field(
        5.0,
        gt=0,
        le=60,
        description="seconds one API server request may take (prepare fails that claim after it)",
    )
    probe_model: str | None = Field(
        None,
        description='functional probe model (".rknn"; "{soc}" becomes the SoC name), the device plugin\'s '
        "per-core probe: a core failing it leaves the slice and reads UNHEALTHY in pod status (default off)",
    )
    kubelet_wait_notice: float = Field(
        KUBELET_WAIT_NOTICE_S,
        gt=0,
        le=86400,
        description="seconds without the kubelet before one warning naming the folder it watches "
        "(--registration-dir)",
    )
    metrics_address: str | None = Field(
        None, description='serve Prometheus metrics on "host:port" (e.g. ":9103"); default off'
    )
    instance_id: str = Field(
        default_factory=lambda: _env("POD_UID"),
        description="this instance's own socket names, so a rolling update's new pod serves beside the "
        "old one (default: $POD_UID; empty: one instance at a time, a second waits)",
    )
    delete_slices_on_stop: bool = Field(
        False,
        description="delete this node's ResourceSlices on a clean stop (an uninstall; a restart or an "
        "upgrade keeps them, so the node never shows no devices)",
    )

    @field_validator("driver_name")
    @classmethod
    def _check_driver_name(cls, value: str) -> str:
        if len(value) > 63 or not _DRIVER_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a DNS subdomain of at most 63 characters, e.g. npu.rockchip.com"
            )
        return value

    @field_validator("node_name")
    @classmethod
    def _check_node_name(cls, value: str) -> str:
        if not value:
            raise ValueError("no node name: pass --node-name or set NODE_NAME (the DaemonSet sets it)")
        if len(value) > 253 or not _NODE_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a Kubernetes node name (a lower-case DNS subdomain)")
        return value

    @field_validator("instance_id")
    @classmethod
    def _check_instance_id(cls, value: str) -> str:
        if value and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", value):
            raise ValueError(f"{value!r} is not a pod UID (letters, digits, '-', '.', '_'; at most 63)")
        return value

    @property
    def resolved_plugin_dir(self) -> Path:
        return (
            self.plugin_dir if self.plugin_dir is not None else Path(DEFAULT_PLUGINS_DIR) / self.driver_name
        )


_FLAG_TYPES: dict[str, Any] = {**NODE_FLAG_TYPES, "api_timeout": float}
_FLAG_CHOICES: dict[str, list[str]] = {
    **NODE_FLAG_CHOICES,
    "api_client": ["auto", "kubernetes-client"],
    "slice_layout": SLICE_LAYOUTS,
}


def build_parser() -> argparse.ArgumentParser:
    return settings_parser(
        DraSettings,
        PROG,
        "Kubernetes DRA driver publishing Rockchip NPU cores as resource.k8s.io/v1 devices "
        f"(driver {DEFAULT_DRIVER_NAME}).",
        ENV_PREFIX,
        _FLAG_TYPES,
        _FLAG_CHOICES,
    )


def settings_from(args: argparse.Namespace) -> DraSettings:
    return settings_from_flags(DraSettings, args, ENV_PREFIX, PROG)


def parse_settings(argv: Sequence[str]) -> DraSettings:
    return settings_from(build_parser().parse_args(list(argv)))
