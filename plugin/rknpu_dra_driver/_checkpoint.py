"""The prepared-claims checkpoint: one JSON file, written atomically (temp file, fsync, rename,
folder fsync) and checked by a SHA-256 of its content, so a torn or edited file is refused."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from rknpu_device_plugin import write_atomic

from ._claims import PreparedClaim

CHECKPOINT_NAME = "checkpoint.json"
_VERSION = 1


class CheckpointError(ValueError):
    """The checkpoint file exists but is unreadable, truncated or fails its checksum."""


def _digest(claims: list[dict[str, object]]) -> str:
    return hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).hexdigest()


def encode(claims: Mapping[str, PreparedClaim]) -> str:
    records = [claims[uid].to_json() for uid in sorted(claims)]
    return json.dumps({"version": _VERSION, "claims": records, "sha256": _digest(records)}, sort_keys=True)


def decode(text: str) -> dict[str, PreparedClaim]:
    """Raises CheckpointError naming what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CheckpointError(f"not JSON ({exc}); truncated?") from None
    if (
        not isinstance(data, dict)
        or data.get("version") != _VERSION
        or not isinstance(data.get("claims"), list)
    ):
        raise CheckpointError(f"not a version-{_VERSION} checkpoint")
    records = data["claims"]
    if data.get("sha256") != _digest(records):
        raise CheckpointError("checksum mismatch (a torn or hand-edited file)")
    try:
        claims = [PreparedClaim.from_json(record) for record in records]
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"a claim record is malformed: {exc}") from None
    return {claim.ref.uid: claim for claim in claims}


def load(path: Path) -> dict[str, PreparedClaim]:
    """The checkpointed claims ({} when there is no file). Raises CheckpointError, OSError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError:
        raise CheckpointError("not UTF-8 text") from None
    return decode(text)


def save(path: Path, claims: Mapping[str, PreparedClaim]) -> None:
    """Replace the checkpoint atomically and durably (the rename is fsynced with its folder)."""
    write_atomic(path, encode(claims), mode=0o600)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
