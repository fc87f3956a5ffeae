"""The node's one-at-a-time lock around prepare and unprepare: an flock on
``<plugin-dir>/serialize.lock`` that every instance takes (a rolling update's old and new alike),
plus a thread lock for the calls of one instance."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

SERIALIZE_LOCK_NAME = "serialize.lock"
"""The lock every instance takes around each prepare/unprepare (the library's name for it)."""


class SerializeLock:
    """An flock on ``<plugin-dir>/serialize.lock`` plus a thread lock: one prepare or unprepare at
    a time on the node, whichever instance (and thread) the kubelet called."""

    def __init__(self, plugin_dir: Path) -> None:
        self.path = plugin_dir / SERIALIZE_LOCK_NAME
        self._threads = threading.Lock()
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._threads:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._threads:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None
