"""A prepared claim's device metadata files (KEP-5304): one per request, their text and their place
on the node, written and removed. The format, the paths and the CDI mount are `rknnlaunch.settings`'
(the SDK reads what this writes; docs/dra.md#device-metadata)."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

from rknnlaunch.npu import NpuInfo
from rknnlaunch.settings import (
    MetadataDevice,
    encode_metadata,
    host_file_path,
    metadata_document,
    metadata_mount,
)
from rknpu_node import device_cores
from rknpu_serverkit import write_atomic

from ..slices import VIDEO_DEVICE, NodeFacts, device_attributes
from ._claim import ClaimRef, PreparedClaim

METADATA_ENV = "RKNN_NPU_METADATA"
"""Set in each request's CDI env to its file's container path: a file that failed to appear is then
a `doctor` warning, not a silent fallback to the env (rknnlaunch.settings reads the variable)."""


def request_metadata(
    driver_name: str, claim: PreparedClaim, info: NpuInfo, facts: NodeFacts, plugin_dir: Path
) -> dict[str, tuple[Path, str]]:
    """Pure: per base request with an NPU device (`npu_requests`), where its file goes on the node
    and its text (the NPU devices with the
    attributes the slice publishes for them, so a workload sees what the scheduler matched)."""
    ref = claim.ref
    files: dict[str, tuple[Path, str]] = {}
    for request in npu_requests(claim):
        results = tuple(d for d in claim.request_devices(request) if d.device != VIDEO_DEVICE)
        devices = [
            MetadataDevice(
                d.pool,
                d.device,
                device_cores(d.device),
                device_attributes(info, device_cores(d.device), facts),
            )
            for d in results
        ]
        document = metadata_document(
            ref.namespace,
            ref.name,
            ref.uid,
            results[0].request,  # as the allocation names it (a firstAvailable subrequest included)
            devices,
            driver=driver_name,
            pod_claim_name=claim.pod_claim_name,
        )
        path = host_file_path(plugin_dir, ref.namespace, ref.name, request)
        files[request] = (path, encode_metadata(document))
    return files


def npu_requests(claim: PreparedClaim) -> tuple[str, ...]:
    """The requests with an NPU device: each has a metadata file (a request given only the `vpu`
    device has none: the file describes NPU cores, and the SDK reads it for them)."""
    return tuple(
        request
        for request in claim.requests
        if any(d.device != VIDEO_DEVICE for d in claim.request_devices(request))
    )


def metadata_paths(plugin_dir: Path, claim: PreparedClaim) -> list[Path]:
    """Where `request_metadata` puts the claim's files (no NPU needed to ask)."""
    ref = claim.ref
    return [host_file_path(plugin_dir, ref.namespace, ref.name, request) for request in npu_requests(claim)]


def request_mount(
    driver_name: str, claim: PreparedClaim, request: str, plugin_dir: Path
) -> dict[str, object]:
    """The request's CDI mount of its file (read-only, at the library's container path)."""
    ref = claim.ref
    return metadata_mount(
        plugin_dir, ref.namespace, ref.name, request, driver=driver_name, pod_claim_name=claim.pod_claim_name
    )


def claim_folder(plugin_dir: Path, ref: ClaimRef) -> Path:
    """``<plugin dir>/dra-device-metadata/<namespace>_<claim>``: every request's file below it."""
    return host_file_path(plugin_dir, ref.namespace, ref.name, "r").parent.parent


def write_metadata(files: dict[str, tuple[Path, str]]) -> None:
    """Write each file atomically (no fsync: a reboot re-prepares the claim, rewriting it).
    Raises OSError."""
    for path, text in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text, durable=False)


def remove_metadata(plugin_dir: Path, ref: ClaimRef) -> bool:
    """Remove the claim's folder, unless a file there belongs to another claim of the same name (it
    was deleted and re-created, and the new one is prepared already): True if removed."""
    folder = claim_folder(plugin_dir, ref)
    if not folder.is_dir():
        return False
    for path in folder.glob("*/metadata.json"):
        with contextlib.suppress(OSError, ValueError):
            uid = (json.loads(path.read_text(encoding="utf-8")).get("metadata") or {}).get("uid")
            if uid and uid != ref.uid:
                return False
    shutil.rmtree(folder, ignore_errors=True)
    return True
