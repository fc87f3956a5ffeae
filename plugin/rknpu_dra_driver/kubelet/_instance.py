"""Driver instances on one node: per-instance socket names for rolling updates (two pods of the
DaemonSet serve side by side while the new one takes over, as the kubelet-plugin library's
RollingUpdate does, kubelet 1.33+), the removal of a dead instance's sockets, and the instance
lock. Without an instance id there is one instance at a time: a second waits for the first
(the serialize lock around each prepare and unprepare is the claims' room's, claims/_serialize.py).

`driver.lock` tells the two kinds apart: an instance with an id holds it shared (any number serve
side by side), one without holds it exclusive. So the first upgrade from a driver without
instance ids (which knows neither serialize.lock nor this checkpoint format) waits for the old
one to stop, and only that one upgrade has the old gap."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import threading
from pathlib import Path

from rknpu_serverkit import socket_answers

from .._log import get_logger

_log = get_logger("instance")
LOCK_NAME = "driver.lock"
POLL_S = 0.05
UNIX_PATH_MAX = 107
"""sun_path holds 108 bytes with the terminating NUL."""


def registration_socket_name(registry_dir: Path, driver_name: str, instance_id: str) -> str:
    """``<driver>-reg.sock``; with an instance id the first of ``<driver>-<id>-reg.sock``,
    ``<driver>-<b64(sha256(id))[:8 bytes]>-reg.sock``, ``dra-<b64(sha256(driver NUL id))[:16
    bytes]>-reg.sock`` whose full path fits a unix socket address (the library's choice)."""
    if not instance_id:
        return f"{driver_name}-reg.sock"
    id_hash = hashlib.sha256(instance_id.encode()).digest()
    both_hash = hashlib.sha256(f"{driver_name}\0{instance_id}".encode()).digest()
    candidates = (
        f"{driver_name}-{instance_id}-reg.sock",
        f"{driver_name}-{_b64(id_hash[:8])}-reg.sock",
        f"dra-{_b64(both_hash[:16])}-reg.sock",
    )
    for name in candidates:
        if len(str(registry_dir / name)) <= UNIX_PATH_MAX:
            return name
    return candidates[-1]


def dra_socket_name(instance_id: str) -> str:
    return f"dra-{instance_id}.sock" if instance_id else "dra.sock"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def acquire(plugin_dir: Path, stop: threading.Event, shared: bool = False) -> int | None:
    """The instance lock's fd (``shared`` for an instance with an id), or None when ``stop`` was
    set while an instance that excludes us held it."""
    path = plugin_dir / LOCK_NAME  # the folder is the kubelet's: checked at start, never created
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    said = False
    while True:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not said:
                _log.warning(
                    "another rknpu-dra-driver serves this node; waiting for it to stop "
                    "(give each instance --instance-id to serve side by side)",
                    extra={"fields": {"lock": str(path)}},
                )
                said = True
            if stop.wait(POLL_S):
                os.close(fd)
                return None
    if said:
        _log.info("the other instance stopped; taking over", extra={"fields": {"lock": str(path)}})
    if not shared:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def remove_dead_sockets(driver_name: str, dra_socket: Path, registration_socket: Path) -> None:
    """Our own socket paths, and the sockets of instances that died without cleaning up (kill -9):
    nobody answers on them, and the kubelet would keep trying them."""
    folders = (
        (registration_socket.parent, (f"{driver_name}-reg.sock", f"{driver_name}-*-reg.sock")),
        (dra_socket.parent, ("dra.sock", "dra-*.sock")),
    )
    for folder, patterns in folders:
        for pattern in patterns:
            for path in folder.glob(pattern) if folder.is_dir() else ():
                if path in (dra_socket, registration_socket) or not socket_answers(path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                        _log.info("removed a dead instance's socket", extra={"fields": {"socket": str(path)}})
