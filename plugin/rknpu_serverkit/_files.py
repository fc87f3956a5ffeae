"""Atomic file replacement for files other programs read while we write (CDI spec, NFD file, textfile)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` so a concurrent reader sees the old file or the new one, never half.

    ``durable`` fsyncs the content before the rename (a power cut then leaves the old file or the
    new one); without it a kill of the process still does, the page cache holds the file.

    The temporary file is a dot-file in the same folder (same filesystem for rename; ignored by
    NFD, and not ``*.prom`` or ``*.json`` so node-exporter and CDI skip it too).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
