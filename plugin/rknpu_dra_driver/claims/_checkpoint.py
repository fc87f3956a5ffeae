"""The prepared-claims checkpoint: one JSON file, each claim with the boot it was prepared in,
written atomically (temp file, rename; no fsync) and checked by a SHA-256 of its content, so a
torn or edited file is refused.

Why no fsync (it was a prepare's biggest single cost, most of the p99 under load):
- A crash of the process (kill -9, OOM, a panic of Python) keeps the kernel's page cache, and
  ``os.replace`` of a fully written temp file is atomic: the next start reads the old file or
  the new one, never half. The kill tests in tests/dra/test_dra_process.py check exactly that.
- Only a power cut or a kernel crash loses the page cache, and both start a new boot: a new boot
  id, an empty CDI tmpfs, and every entry of the old boot is "earlier boot" anyway. The kubelet
  prepares its claims again (the API server is read again, nothing comes from the checkpoint),
  and entries of an earlier boot are dropped once the API server no longer allocates them here.
  What an fsync would have saved is therefore at most a list of earlier-boot entries; losing
  some (or the whole file: an empty or torn file fails the checksum and is rebuilt from the
  empty tmpfs) only loses the refusal of a stale allocation against a claim of the old boot
  until that claim is prepared again, and a kept stale entry goes through `stale_reason`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rknnlaunch.npu import HostRoot
from rknpu_serverkit import write_atomic

from ._claim import PreparedClaim

CHECKPOINT_NAME = "checkpoint.json"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_VERSION = 2
_OLD_VERSION = 1
"""Claims of a version-1 file (no boot ids) count as prepared in an unknown, earlier boot."""


class CheckpointError(ValueError):
    """The checkpoint file exists but is unreadable, truncated or fails its checksum."""


@dataclass(frozen=True)
class Entry:
    """One checkpointed claim and the boot id of the boot that prepared it."""

    claim: PreparedClaim
    boot_id: str


def boot_id(host: HostRoot) -> str:
    """This boot's id (the kernel's random boot_id; not namespaced, so the container's /proc has
    it too when the host's is not mounted); "" when neither can be read."""
    for path in (host.local(BOOT_ID_PATH), Path(BOOT_ID_PATH)):
        try:
            return path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
    return ""


def _digest(claims: list[dict[str, object]]) -> str:
    return hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).hexdigest()


def encode(entries: Mapping[str, Entry]) -> str:
    records: list[dict[str, object]] = [
        {"bootId": entries[uid].boot_id, "claim": entries[uid].claim.to_json()} for uid in sorted(entries)
    ]
    return json.dumps({"version": _VERSION, "claims": records, "sha256": _digest(records)}, sort_keys=True)


def decode(text: str) -> dict[str, Entry]:
    """Raises CheckpointError naming what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CheckpointError(f"not JSON ({exc}); truncated?") from None
    if (
        not isinstance(data, dict)
        or data.get("version") not in (_VERSION, _OLD_VERSION)
        or not isinstance(data.get("claims"), list)
    ):
        raise CheckpointError(f"not a version-{_VERSION} checkpoint")
    records = data["claims"]
    if data.get("sha256") != _digest(records):
        raise CheckpointError("checksum mismatch (a torn or hand-edited file)")
    try:
        if data["version"] == _OLD_VERSION:
            entries = [Entry(PreparedClaim.from_json(record), "") for record in records]
        else:
            entries = [Entry(PreparedClaim.from_json(r["claim"]), str(r["bootId"])) for r in records]
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"a claim record is malformed: {exc}") from None
    return {entry.claim.ref.uid: entry for entry in entries}


def decode_bytes(raw: bytes) -> dict[str, Entry]:
    """`decode` of the file's bytes. Raises CheckpointError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError("not UTF-8 text") from None
    return decode(text)


def load(path: Path) -> dict[str, Entry]:
    """The checkpointed claims ({} when there is no file). Raises CheckpointError, OSError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError:
        raise CheckpointError("not UTF-8 text") from None
    return decode(text)


def save(path: Path, entries: Mapping[str, Entry]) -> bytes:
    """Replace the checkpoint atomically (not fsynced: the module says why). Returns the bytes
    written."""
    text = encode(entries)
    write_atomic(path, text, mode=0o600, durable=False)
    return text.encode("utf-8")
