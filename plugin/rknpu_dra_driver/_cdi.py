"""Per-claim CDI specs: the device plugin's CDI edits (`cdi_spec`) plus the claim's core env
(`container_plan`), one file per claim UID, written with the plugin's `write_atomic`."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from rknnlaunch.npu import NpuInfo
from rknpu_device_plugin import write_atomic
from rknpu_device_plugin.devices import NodeExtras, cdi_spec, container_plan

from ._claims import PreparedClaim

CDI_CLASS = "claim"
"""The CDI kind is ``<driver name>/claim``; each claim is one CDI device named by its UID."""
CDI_VERSION = "0.6.0"
"""0.6.0: the first CDI version with spec annotations (they carry the claim, to rebuild the checkpoint)."""
CLAIM_ANNOTATION = "claim"
# A claim UID is a UUID; anything else is refused before it becomes part of a path.
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")


def cdi_kind(driver_name: str) -> str:
    return f"{driver_name}/{CDI_CLASS}"


def cdi_device_id(driver_name: str, uid: str) -> str:
    return f"{cdi_kind(driver_name)}={uid}"


def valid_uid(uid: str) -> bool:
    return _UID.fullmatch(uid) is not None


def spec_path(cdi_dir: Path, driver_name: str, uid: str) -> Path:
    """``<cdi-dir>/npu.rockchip.com-claim_<uid>.json`` (CDI readers take any *.json)."""
    return cdi_dir / f"{driver_name}-{CDI_CLASS}_{uid}.json"


def claim_spec(
    driver_name: str,
    claim: PreparedClaim,
    info: NpuInfo,
    compatible_host_path: str | None,
    extras: NodeExtras,
) -> dict[str, object]:
    """The claim's CDI spec: the NPU's nodes, mounts and env as the device plugin hands them in,
    with ``RKNN_NPU_CORE_MASK``/``RKNN_NPU_CORES`` of the claim's cores."""
    base = cdi_spec(info, compatible_host_path, extras)
    edits = dict(base["devices"][0]["containerEdits"])  # type: ignore[index]
    plan = container_plan(info, [d.device for d in claim.devices], compatible_host_path, extras=extras)
    env = dict(item.split("=", 1) for item in edits["env"])
    env.update(plan.envs)
    edits["env"] = [f"{key}={value}" for key, value in sorted(env.items())]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": cdi_kind(driver_name),
        "annotations": {f"{driver_name}/{CLAIM_ANNOTATION}": json.dumps(claim.to_json(), sort_keys=True)},
        "devices": [{"name": claim.ref.uid, "containerEdits": edits}],
    }


def write_claim_spec(path: Path, spec: dict[str, object], durable: bool = True) -> None:
    """``durable`` False: no fsync (the DRA driver's prepare: its checkpoint is the one durable write)."""
    write_atomic(path, json.dumps(spec, indent=2, sort_keys=True), durable=durable)


def remove_claim_spec(path: Path) -> bool:
    """Remove the spec; True if there was one."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def claims_in_specs(cdi_dir: Path, driver_name: str) -> Iterator[tuple[Path, PreparedClaim | None]]:
    """Every claim spec of ours on disk and the claim its annotation records (None if unreadable)."""
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(cdi_dir.glob(f"{driver_name}-{CDI_CLASS}_*.json")):
            try:
                spec = json.loads(path.read_text(encoding="utf-8"))
                record = json.loads(spec["annotations"][f"{driver_name}/{CLAIM_ANNOTATION}"])
                yield path, PreparedClaim.from_json(record)
            except (OSError, ValueError, KeyError, TypeError):
                yield path, None
