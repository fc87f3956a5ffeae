"""Folder watching for the supervisor and the health monitor: inotify, with a polling fallback.

A waiter blocks in `wait()` until something changes in a watched folder, `wake()` is called (from
any thread: shutdown) or the timeout passes. Without inotify (unsupported filesystem, no inotify
instances left, or turned off) `wait()` simply times out, so callers re-check on every tick.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Sequence
from pathlib import Path

_log = logging.getLogger("rknpu_serverkit.watch")


class FolderWatcher:
    def __init__(self, folders: Sequence[Path], use_inotify: bool = True) -> None:
        self._folders = tuple(folders)
        self._lock = threading.Lock()
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)  # a full pipe already means "wake up"
        self._watches: dict[int, Path] = {}
        self._inotify = None
        if use_inotify:
            try:
                import inotify_simple  # type: ignore[import-untyped]

                self._inotify = inotify_simple.INotify()
            except (ImportError, OSError) as exc:
                _log.warning("inotify unavailable, polling instead", extra={"fields": {"reason": str(exc)}})
        self.refresh()

    @property
    def uses_inotify(self) -> bool:
        return self._inotify is not None

    def refresh(self) -> None:
        """Watch every configured folder that exists now (folders can appear after start)."""
        if self._inotify is None:
            return
        import inotify_simple

        flags = inotify_simple.flags
        mask = (
            flags.CREATE
            | flags.DELETE
            | flags.MOVED_TO
            | flags.MOVED_FROM
            | flags.ATTRIB
            | flags.DELETE_SELF
            | flags.MOVE_SELF
        )
        with self._lock:
            watched = set(self._watches.values())
            for folder in self._folders:
                if folder in watched or not folder.is_dir():
                    continue
                try:
                    wd = self._inotify.add_watch(folder, mask)
                except OSError:
                    continue
                self._watches[wd] = folder

    def wait(self, timeout: float) -> None:
        """Return when a watched folder changes, `wake()` is called or ``timeout`` seconds pass.

        Callers re-check what they care about after every return (level-triggered), so which
        entry changed is not reported.
        """
        self.refresh()
        fds = [self._wake_r] + ([self._inotify.fileno()] if self._inotify is not None else [])
        try:
            ready, _, _ = select.select(fds, [], [], max(timeout, 0.0))
        except (OSError, ValueError):  # closed under us during shutdown
            return
        if self._wake_r in ready:
            with contextlib.suppress(OSError):
                while os.read(self._wake_r, 512):
                    pass
        if self._inotify is not None and self._inotify.fileno() in ready:
            self._drain_events()

    def _drain_events(self) -> None:
        """Consume pending inotify events; re-watch any folder whose watch went away."""
        import inotify_simple

        assert self._inotify is not None
        lost = False
        for event in self._inotify.read(timeout=0):
            if event.mask & inotify_simple.flags.IGNORED:
                with self._lock:
                    self._watches.pop(event.wd, None)
                lost = True
        if lost:
            self.refresh()

    def wake(self) -> None:
        # Under the lock and only while open: a closed descriptor's number may already belong to
        # some other file (a gRPC socket), which must never receive our wake-up byte.
        with self._lock:
            if self._closed:
                return
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")

    def close(self) -> None:
        """Release the descriptors; only the thread that calls `wait()` may call this."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._inotify is not None:
                with contextlib.suppress(OSError):
                    self._inotify.close()
                self._inotify = None
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
