"""Per-claim CDI specs: one file per claim UID, one CDI device per request (the device plugin's CDI
edits plus that request's core env), at the lowest cdiVersion its content needs; the claim's
record rides in each device's env, so the checkpoint can be rebuilt from the specs without
annotations (which would need cdiVersion 0.6.0, unreadable by podman 4.x and early containerd 1.7)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from rknnlaunch.npu import NpuInfo, format_cores, is_runnable, runnable_groups
from rknpu_node import (
    VIDEO_CDI_DEVICE,
    NodeExtras,
    VideoBlocks,
    cdi_spec,
    container_plan,
    device_cores,
    video_cdi_edits,
    with_minimum_version,
)
from rknpu_serverkit import write_atomic

from ._claim import AllocatedDevice, ClaimRef, PreparedClaim
from ._metadata import METADATA_ENV, request_mount

CDI_CLASS = "claim"
"""The CDI kind is ``<driver name>/claim``; each request of a claim is one CDI device."""
CLAIM_ENV = "RKNN_NPU_CLAIM"
"""``<namespace>/<name>/<uid>`` of the claim the container's NPU came from (the SDK names it in errors)."""
REQUEST_ENV = "RKNN_NPU_CLAIM_REQUEST"
DEVICES_ENV = "RKNN_NPU_CLAIM_DEVICES"
"""``<request>=<pool>/<device>[+admin][@<shareID>*<shares>],...``: the request's allocation results,
as the checkpoint has them (a shared core's share and the shares it consumed)."""
POD_CLAIM_ENV = "RKNN_NPU_POD_CLAIM_NAME"
"""A claim from a template: the pod's own name for it (its metadata file's container folder)."""
ADMIN_ENV = "RKNN_NPU_ADMIN_ACCESS"
"""``true`` for an adminAccess request: monitoring access, the cores are not this pod's alone."""
GROUPS_ENV = "RKNN_NPU_CONTEXT_GROUPS"
"""Set when one context cannot run the request's cores (RK3588 {0,2}): the per-context groups,
``0;2``. Informational, for programs driving RKNNLite themselves: rknnlaunch does not read it
(`rknnlaunch.Pool` derives one context per core from the mask, `open()` refuses the set)."""
# A claim UID is a UUID; anything else is refused before it becomes part of a path.
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")


def cdi_kind(driver_name: str) -> str:
    return f"{driver_name}/{CDI_CLASS}"


def cdi_device_id(driver_name: str, uid: str) -> str:
    """The claim's CDI name; request ``r`` is the CDI device ``<this>-r`` (`PreparedClaim.request_cdi_id`)."""
    return f"{cdi_kind(driver_name)}={uid}"


def valid_uid(uid: str) -> bool:
    return _UID.fullmatch(uid) is not None


def spec_path(cdi_dir: Path, driver_name: str, uid: str) -> Path:
    """``<cdi-dir>/npu.rockchip.com-claim_<uid>.json`` (CDI readers take any *.json)."""
    return cdi_dir / f"{driver_name}-{CDI_CLASS}_{uid}.json"


def _devices_env(devices: tuple[AllocatedDevice, ...]) -> str:
    return ",".join(
        f"{d.request}={d.pool}/{d.device}{'+admin' if d.admin else ''}"
        + (f"@{d.share_id}*{d.shares}" if d.share_id else "")
        for d in devices
    )


def _device_from_env(entry: str) -> AllocatedDevice:
    request, _, rest = entry.partition("=")
    rest, _, share = rest.partition("@")
    pool, _, device_name = rest.partition("/")
    admin = device_name.endswith("+admin")
    share_id, _, shares = share.partition("*")
    return AllocatedDevice(
        request,
        pool,
        device_name.removesuffix("+admin"),
        admin,
        share_id or None,
        int(shares) if share_id else 0,
    )


def request_env(info: NpuInfo, claim: PreparedClaim, request: str) -> dict[str, str]:
    """The env one request's CDI device adds on top of the device plugin's: its cores and mask,
    the claim it came from, admin access, and the context groups of a set one context refuses."""
    devices = claim.request_devices(request)
    plan_cores = frozenset(core for core in claim.cores if any(core in _cores(d) for d in devices))
    env = {
        CLAIM_ENV: f"{claim.ref.namespace}/{claim.ref.name}/{claim.ref.uid}",
        REQUEST_ENV: request,
        DEVICES_ENV: _devices_env(devices),
    }
    if any(d.admin for d in devices):
        env[ADMIN_ENV] = "true"
    if claim.pod_claim_name:
        env[POD_CLAIM_ENV] = claim.pod_claim_name
    if plan_cores and not is_runnable(info.soc, plan_cores, info.core_count):
        groups = runnable_groups(info.soc, plan_cores, info.core_count)
        env[GROUPS_ENV] = ";".join(format_cores(group) for group in groups)
    return env


def _cores(device: AllocatedDevice) -> frozenset[int]:
    return device_cores(device.device)


def claim_spec(
    driver_name: str,
    claim: PreparedClaim,
    info: NpuInfo,
    compatible_host_path: str | None,
    extras: NodeExtras,
    plugin_dir: Path | None = None,
    video: VideoBlocks | None = None,
) -> dict[str, object]:
    """The claim's CDI spec: per request, the NPU's nodes, mounts and env as the device plugin
    hands them in, with ``RKNN_NPU_CORE_MASK``/``RKNN_NPU_CORES`` of that request's cores; with
    ``plugin_dir``, also the request's metadata file mounted read-only and ``RKNN_NPU_METADATA``
    naming it (a plain bind mount: no newer cdiVersion). A request given the `vpu` device gets the
    ``video`` nodes; one given only it gets no NPU node, no NPU env (the claim's record only) and no
    metadata file (`npu_requests`).
    Raises ValueError for a `vpu` device when ``video`` is None (not offered now)."""
    base = cdi_spec(info, compatible_host_path, extras)
    base_edits: Mapping[str, object] = base["devices"][0]["containerEdits"]  # type: ignore[index]
    devices = []
    for request in claim.requests:
        names = [d.device for d in claim.request_devices(request)]
        npu_names = [name for name in names if name != VIDEO_CDI_DEVICE]
        edits: dict[str, object] = dict(base_edits) if npu_names else {}
        env: dict[str, str] = {}
        if npu_names:
            plan = container_plan(info, npu_names, compatible_host_path, extras=extras)
            env.update(item.split("=", 1) for item in edits["env"])  # type: ignore[attr-defined]
            env.update(plan.envs)
        if len(npu_names) < len(names):
            if video is None:
                raise ValueError(
                    "the video blocks are not offered on this node now (start the driver with --vpu)"
                )
            nodes = [*(edits.get("deviceNodes") or ()), *video_cdi_edits(video)["deviceNodes"]]  # type: ignore[misc]
            edits["deviceNodes"] = list({node["path"]: node for node in nodes}.values())
        env.update(request_env(info, claim, request))
        if plugin_dir is not None and npu_names:
            mount = request_mount(driver_name, claim, request, plugin_dir)
            edits["mounts"] = [*(edits.get("mounts") or ()), mount]  # type: ignore[misc]
            env[METADATA_ENV] = str(mount["containerPath"])
        edits["env"] = [f"{key}={value}" for key, value in sorted(env.items())]
        devices.append({"name": claim.request_cdi_name(request), "containerEdits": edits})
    return with_minimum_version({"kind": cdi_kind(driver_name), "devices": devices})


def claim_from_spec(spec: Mapping[str, object], driver_name: str) -> PreparedClaim:
    """The prepared claim a spec of ours records (its devices' env). Raises ValueError."""
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        raise ValueError("the spec has no devices")
    ref: ClaimRef | None = None
    pod_claim_name: str | None = None
    allocated: list[AllocatedDevice] = []
    for device in devices:
        edits = device.get("containerEdits") if isinstance(device, Mapping) else None
        env_list = edits.get("env") if isinstance(edits, Mapping) else None
        if not isinstance(env_list, list):
            raise ValueError("a device has no env")
        env = dict(str(item).split("=", 1) for item in env_list if "=" in str(item))
        namespace, name, uid = env[CLAIM_ENV].split("/", 2)
        ref = ClaimRef(namespace, name, uid)
        pod_claim_name = env.get(POD_CLAIM_ENV) or pod_claim_name
        allocated.extend(_device_from_env(entry) for entry in filter(None, env[DEVICES_ENV].split(",")))
    if ref is None or not allocated:
        raise ValueError("the spec records no allocation")
    return PreparedClaim(ref, tuple(allocated), cdi_device_id(driver_name, ref.uid), pod_claim_name)


def write_claim_spec(path: Path, spec: dict[str, object], durable: bool = True) -> None:
    """``durable`` False: no fsync (the DRA driver's prepare: the CDI folder is a tmpfs)."""
    write_atomic(path, json.dumps(spec, indent=2, sort_keys=True), durable=durable)


def remove_claim_spec(path: Path) -> bool:
    """Remove the spec; True if there was one."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def claims_in_specs(cdi_dir: Path, driver_name: str) -> Iterator[tuple[Path, PreparedClaim | None]]:
    """Every claim spec of ours on disk and the claim it records (None if unreadable)."""
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(cdi_dir.glob(f"{driver_name}-{CDI_CLASS}_*.json")):
            try:
                spec = json.loads(path.read_text(encoding="utf-8"))
                yield path, claim_from_spec(spec, driver_name)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                yield path, None
