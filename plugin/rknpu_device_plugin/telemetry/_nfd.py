"""Node labels and node-exporter metrics without API access: NFD's ``features.d/rknpu`` and a textfile.

Node Feature Discovery's nfd-worker reads every file in
``/etc/kubernetes/node-feature-discovery/features.d/`` (``<namespace>/<name>=<value>`` lines, ``#``
comments, an optional ``# +expiry-time=<RFC 3339>`` directive) and labels the node. Labels go under
``rknpu.feature.node.kubernetes.io/``: NFD always accepts sub-namespaces of
``feature.node.kubernetes.io``, whatever its ``-deny-label-ns`` setting. node-exporter's textfile
collector reads ``*.prom`` files from its ``--collector.textfile.directory``. Both read while we write,
so both files are written to a dot-file in the same folder and renamed into place.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from rknnlaunch.npu import NpuInfo
from rknpu_serverkit import write_atomic

if TYPE_CHECKING:  # prometheus-client loads with the textfile (the exporter checks it is installed first)
    from prometheus_client import CollectorRegistry

DEFAULT_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
FEATURE_FILE_NAME = "rknpu"
PLUGIN_FEATURE_FILE_NAME = "rknpu-plugin"
"""The device plugin's own file (mode, health, probe): the exporter's ``rknpu`` stays its own."""
LABEL_NAMESPACE = "rknpu.feature.node.kubernetes.io"
TEXTFILE_NAME = "rknpu.prom"
# A Kubernetes label value: <= 63 characters, alphanumerics with '-', '_' or '.' inside.
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: str) -> str:
    """``text`` made a valid label value: ``"radxa,rock-5b"`` -> ``"radxa_rock-5b"``; may be empty."""
    value = _LABEL_VALUE_BAD.sub("_", text.strip())[:63]
    return value.strip("._-")


def nfd_labels(info: NpuInfo) -> dict[str, str]:
    """The node labels (name without namespace -> value) that describe this node's NPU."""
    labels = {
        "present": "true",
        "soc": info.soc.name,
        "npu-family": label_value(info.soc.npu_family),
        "cores": str(info.core_count),
        # How runtimes reach the NPU: drm (card + render node) or misc (/dev/rknpu + DMA heap).
        "runtime-mode": info.driver_kind,
        # Whether pods can pin cores (RK3588/RK3576) or must leave the mask to the runtime (RK356x).
        "core-mask": "pinned" if info.soc.core_mask_settable else "auto-only",
    }
    if info.driver_version:
        labels["driver-version"] = label_value(info.driver_version)
    if info.compatible and info.compatible[0].lower() not in info.soc.compatibles:
        board = label_value(info.compatible[0])
        if board:
            labels["board"] = board
    return {name: value for name, value in labels.items() if value}


def plugin_labels(mode: str, health: Mapping[str, bool], probes: Mapping[int, bool]) -> dict[str, str]:
    """The device plugin's node labels: its mode, healthy devices and the functional probe's verdict.

    ``probe`` is ``passed`` or ``failed`` once a probe ran (absent while the probe is off), and
    ``probe-failed-cores`` names the failing cores joined by dots (``1.2``; label values allow no
    commas), so ``nodeSelector``/affinity can avoid nodes with broken cores.
    """
    labels = {
        "plugin-mode": mode,
        "devices": str(len(health)),
        "devices-healthy": str(sum(1 for ok in health.values() if ok)),
    }
    if probes:
        failed = sorted(core for core, ok in probes.items() if not ok)
        labels["probe"] = "failed" if failed else "passed"
        if failed:
            labels["probe-failed-cores"] = ".".join(str(core) for core in failed)
    return labels


def feature_text(labels: Mapping[str, str], expires_at: datetime | None = None) -> str:
    """A feature file with ``labels`` (name without namespace -> value) under our namespace."""
    lines = ["# Written by rknpu-exporter / rknpu-device-plugin (rknnlaunch); do not edit."]
    if expires_at is not None:
        stamp = expires_at.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(f"# +expiry-time={stamp}")
    lines += [f"{LABEL_NAMESPACE}/{name}={value}" for name, value in sorted(labels.items())]
    return "\n".join(lines) + "\n"


def nfd_feature_text(info: NpuInfo, expires_at: datetime | None = None) -> str:
    """The content of ``features.d/rknpu``.

    With ``expires_at`` NFD drops the labels after that time unless the file is rewritten first,
    so a node whose exporter stopped loses its NPU labels instead of keeping stale ones.
    """
    # A few hundred bytes: far below the 64 kB above which NFD ignores a feature file.
    return feature_text(nfd_labels(info), expires_at)


def parse_feature_text(text: str) -> dict[str, str]:
    """A feature file -> {label: value}, read the way nfd-worker does (comments skipped, "true" default)."""
    labels: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        labels[name.strip()] = value.strip() if sep else "true"
    return labels


def write_feature_file(
    features_dir: str | os.PathLike[str], info: NpuInfo, expires_at: datetime | None = None
) -> Path:
    """Write ``<features_dir>/rknpu`` atomically; returns its path."""
    path = Path(features_dir) / FEATURE_FILE_NAME
    write_atomic(path, nfd_feature_text(info, expires_at))
    return path


def remove_feature_file(features_dir: str | os.PathLike[str]) -> bool:
    """Remove ``<features_dir>/rknpu`` (the NPU is gone: its labels should go too). True if removed."""
    try:
        (Path(features_dir) / FEATURE_FILE_NAME).unlink()
    except FileNotFoundError:
        return False
    return True


def textfile_text(registry: CollectorRegistry) -> str:
    """The registry in Prometheus text format, as node-exporter's textfile collector reads it."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(registry).decode("utf-8")


def write_textfile(textfile_dir: str | os.PathLike[str], registry: CollectorRegistry) -> Path:
    """Write ``<textfile_dir>/rknpu.prom`` atomically from ``registry``; returns its path."""
    path = Path(textfile_dir) / TEXTFILE_NAME
    write_atomic(path, textfile_text(registry))
    return path


def describe_labels(labels: Mapping[str, str]) -> str:
    """``{"soc": "rk3588", ...}`` -> ``"soc=rk3588, ..."`` for a log line."""
    return ", ".join(f"{name}={value}" for name, value in sorted(labels.items()))
