"""The slice layout policy, apart from the publishing mechanism: which layout to publish ("auto":
partitionable on a server of known version, else one device per core), what a server's answers
say (device taints kept or dropped), and the errors that stop the driver when no fallback is
left (the explicit partitionable layout on a server without DRAPartitionableDevices, a server
without resource.k8s.io/v1). Pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rknnlaunch import RknnLaunchError

from ._desired import SliceLayout


def chosen_layout(setting: str, server_minor: int | None) -> SliceLayout:
    """The layout to publish now for ``setting`` (--slice-layout, or "per-core" after a fallback)."""
    if setting != "auto":
        return SliceLayout(setting)
    # Unknown version: which slice holds the counters is unknown too, and a wrong guess is
    # dropped or refused; one device per core is right on every server.
    return SliceLayout.PARTITIONABLE if server_minor is not None else SliceLayout.PER_CORE


def tainted(
    full: list[dict[str, Any]], offered: Sequence[dict[str, Any]], taint_key: str
) -> list[dict[str, Any]]:
    """``full`` (every device, as if healthy) with a NoSchedule taint on each device ``offered``
    leaves out (an unhealthy core's), for a server that keeps device taints (KEP-5055)."""
    kept = {d.get("name") for s in offered for d in (s.get("spec") or {}).get("devices") or []}
    for body in full:
        for device in (body.get("spec") or {}).get("devices") or []:
            if device.get("name") not in kept:
                device["taints"] = [{"key": taint_key, "effect": "NoSchedule"}]
    return full


def taints_kept(sent: dict[str, Any], kept: dict[str, Any]) -> bool:
    """Whether every tainted device of ``sent`` came back (``kept``) with its taints; False means
    the server runs without DRADeviceTaints."""
    names = [d.get("name") for d in (sent.get("spec") or {}).get("devices") or [] if d.get("taints")]
    back = {d.get("name"): d for d in (kept.get("spec") or {}).get("devices") or []}
    return all((back.get(name) or {}).get("taints") for name in names)


def gate_off_error() -> RknnLaunchError:
    """The explicit layout "partitionable" on a server that drops its fields: retrying cannot help,
    and the overlapping devices without counters would let the scheduler double-book cores."""
    return RknnLaunchError(
        "--slice-layout partitionable: the API server drops the partitionable-device fields "
        "(sharedCounters, consumesCounters): the DRAPartitionableDevices feature gate is off on this "
        "API server; nothing was published",
        "enable the gate on kube-apiserver (--feature-gates=DRAPartitionableDevices=true), "
        "or use --slice-layout auto (one device per core there) or --slice-layout per-core",
    )


def too_old_error(minor: int | None) -> RknnLaunchError:
    """The one error of a cluster without DRA's v1 API: retrying cannot help, so the driver stops."""
    server = f"1.{minor}" if minor is not None else "of unknown version and serves no resource.k8s.io/v1"
    return RknnLaunchError(
        f"needs Kubernetes 1.34+ (resource.k8s.io/v1); this API server is {server}",
        "upgrade the cluster to Kubernetes 1.34 or later, or serve the NPU with the device plugin "
        "(deploy/daemonset.yaml) instead of the DRA driver",
    )
