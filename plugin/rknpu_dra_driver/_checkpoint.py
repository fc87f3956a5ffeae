"""The prepared-claims checkpoint: one JSON file, each claim with the boot it was prepared in,
written atomically (temp file, one fsync, rename) and checked by a SHA-256 of its content, so a
torn or edited file is refused.

One fsync per write is the whole durability story: a kill -9 leaves the old file or the new one
(the rename is atomic, the page cache survives the process); a power cut may lose the last rename,
which only matters within that boot, and every claim of an earlier boot is prepared again on
request and dropped once the API server says it is gone (the CDI folder is a tmpfs anyway).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rknnlaunch.npu import HostRoot
from rknpu_device_plugin import write_atomic

from ._claims import PreparedClaim

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
    """Replace the checkpoint atomically: the one fsynced write of a prepare or unprepare.
    Returns the bytes written."""
    text = encode(entries)
    write_atomic(path, text, mode=0o600)
    return text.encode("utf-8")
