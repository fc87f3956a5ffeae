"""One driver per node and driver name: an flock on ``<plugin-dir>/driver.lock``. A second driver
(a rolling update's new pod, a stray copy) waits for the first to stop instead of fighting it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

from ._log import get_logger

_log = get_logger("instance")
LOCK_NAME = "driver.lock"
POLL_S = 0.05


def acquire(plugin_dir: Path, stop: threading.Event) -> int | None:
    """The held lock's fd, or None when ``stop`` was set while another instance held it."""
    plugin_dir.mkdir(parents=True, exist_ok=True)
    path = plugin_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not said:
                _log.warning(
                    "another rknpu-dra-driver serves this node; waiting for it to stop",
                    extra={"fields": {"lock": str(path)}},
                )
                said = True
            if stop.wait(POLL_S):
                os.close(fd)
                return None
    if said:
        _log.info("the other instance stopped; taking over", extra={"fields": {"lock": str(path)}})
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
