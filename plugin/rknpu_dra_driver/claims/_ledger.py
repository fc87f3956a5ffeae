"""The checkpoint as the store reads and saves it: parsed once per change, rebuilt, recovered at start.

Corrupt, it is rebuilt from the CDI specs; at start, interrupted writes are swept and specs without
an entry added."""

from __future__ import annotations

import contextlib
from pathlib import Path

from .._log import get_logger
from ._cdi import claims_in_specs
from ._checkpoint import CheckpointError, Entry, decode_bytes, load, save

_log = get_logger("claims")


class Ledger:
    """The prepared-claims checkpoint of one driver on this node; every method but `count` is called
    with the node's serialize lock held."""

    def __init__(self, checkpoint_path: Path, cdi_dir: Path, driver_name: str, boot_id: str) -> None:
        self.checkpoint_path = checkpoint_path
        self._cdi_dir = cdi_dir
        self._driver_name = driver_name
        self._boot_id = boot_id
        self._parsed: tuple[bytes, dict[str, Entry]] | None = None

    def count(self) -> int:
        """Prepared claims now (the metrics gauge; no lock: a torn read counts as the last good)."""
        try:
            return len(load(self.checkpoint_path))
        except (CheckpointError, OSError):
            return 0

    def read(self) -> dict[str, Entry]:
        """The checkpoint; a corrupt one is rebuilt from the specs.

        The file is parsed again only when its bytes differ from the last parse (whichever
        instance wrote it), so the checkpoint stays the only state between calls."""
        try:
            raw = self.checkpoint_path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError:
            raw = None
        if raw is not None and self._parsed is not None and self._parsed[0] == raw:
            return dict(self._parsed[1])
        try:
            entries = decode_bytes(raw) if raw is not None else load(self.checkpoint_path)
            self._parsed = (raw, dict(entries)) if raw is not None else None
            return entries
        except (CheckpointError, OSError) as exc:
            _log.error(
                "checkpoint refused; rebuilding it from the CDI specs",
                extra={"fields": {"path": str(self.checkpoint_path), "error": str(exc)}},
            )
        # A spec on the CDI tmpfs was written in this boot.
        entries = {
            claim.ref.uid: Entry(claim, self._boot_id)
            for _path, claim in claims_in_specs(self._cdi_dir, self._driver_name)
            if claim is not None
        }
        self.save(entries)
        return entries

    def save(self, entries: dict[str, Entry]) -> None:
        self._parsed = None
        written = save(self.checkpoint_path, entries)
        self._parsed = (written, dict(entries))

    def recover(self) -> dict[str, Entry]:
        """At start: the checkpoint checked (a corrupt one is rebuilt from our CDI specs), torn
        writes dropped, and specs without a checkpoint entry added (a kill -9 between writing the
        two: the kubelet still holds those claims and will unprepare them)."""
        self._remove_torn_writes()
        entries = self.read()
        recovered = []
        for path, claim in claims_in_specs(self._cdi_dir, self._driver_name):
            if claim is None:
                _log.warning("unreadable CDI spec of ours left as is", extra={"fields": {"path": str(path)}})
            elif claim.ref.uid not in entries:
                entries[claim.ref.uid] = Entry(claim, self._boot_id)
                recovered.append(claim.ref.uid)
        if recovered:
            _log.info("claims recovered from their CDI specs", extra={"fields": {"uids": recovered}})
            self.save(entries)
        return entries

    def _remove_torn_writes(self) -> None:
        """The temporary files of writes a kill interrupted (`write_atomic` names them
        ``.<name>.<random>.tmp``); the files they were replacing are intact."""
        patterns = (
            (self.checkpoint_path.parent, f".{self.checkpoint_path.name}.*.tmp"),
            (self._cdi_dir, f".{self._driver_name}-claim_*.tmp"),
        )
        for folder, pattern in patterns:
            for temp in folder.glob(pattern) if folder.is_dir() else ():
                with contextlib.suppress(OSError):
                    temp.unlink()
                    _log.info("removed an interrupted write", extra={"fields": {"path": str(temp)}})
