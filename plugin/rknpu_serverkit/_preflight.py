"""A server's start-up checks, before it binds or registers anything: the host root, the folders it
writes, the files it reads, the client libraries it needs (each a `SettingsError`, exit 2, with a
fix), and the fix line for a permission error met later (`os_error_with_fix`).

Pure checks of the file system as it is now; nothing is created. Standard library only.
"""

from __future__ import annotations

import errno
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

from rknnlaunch import RknnLaunchError, SettingsError, UsageError, describe_os_error

PERMISSION_FIX = (
    "run the server as root (the DaemonSet does), or give its user the folder: "
    "chown it, or mount it read-write (a hostPath volume without readOnly)"
)
"""The fix for ``Permission denied`` on a kubelet folder, whichever server met it."""


def parse_address(address: str, flag: str = "--metrics-address") -> tuple[str, int]:
    """``"host:port"``, ``":9101"`` (all interfaces), ``"[::1]:9101"`` or ``"9101"`` -> (host, port):
    the SDK's `rknnlaunch.streams.parse_address` with a bare port allowed, a bad one a `SettingsError`."""
    from rknnlaunch.streams import parse_address as parse_listen_address

    try:
        return parse_listen_address(address, flag, bare_port=True)
    except UsageError as exc:
        raise SettingsError(
            exc.problem, "use e.g. ':9101' (all interfaces), '127.0.0.1:9101' or '[::]:9101'"
        ) from None


def check_host_root(path: str | os.PathLike[str], flag: str = "--host-root") -> None:
    """The host's / mount: an existing folder we can list (as ``rknnlaunch doctor --root``)."""
    root = Path(path)
    if not root.exists():
        raise SettingsError(
            f"{flag} {root} does not exist", "pass the folder the host is mounted at, e.g. /host (or /)"
        )
    if not root.is_dir():
        raise SettingsError(
            f"{flag} {root} is not a folder", "pass the folder the host is mounted at, e.g. /host (or /)"
        )
    if not os.access(root, os.R_OK | os.X_OK):
        raise SettingsError(f"{flag} {root}: Permission denied", PERMISSION_FIX)


def check_writable_folder(path: str | os.PathLike[str], flag: str) -> None:
    """A folder the server writes (a socket, a spec, a label file): a writable folder, or one it can
    create (its nearest existing parent is a writable folder). Files where a folder belongs refused."""
    folder = Path(path)
    existing = _nearest_existing(folder)
    if not existing.is_dir():
        where = folder if existing == folder.absolute() else f"{folder} (its parent {existing})"
        raise SettingsError(
            f"{flag} {where} is a file, not a folder",
            f"point {flag} at a folder, or remove the file {existing}",
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == folder.absolute():
            raise SettingsError(f"{flag} {folder}: Permission denied (cannot write there)", PERMISSION_FIX)
        raise SettingsError(
            f"{flag} {folder}: cannot create it: Permission denied on {existing}", PERMISSION_FIX
        )


KUBELET_FOLDER_FIX = (
    "point {flag} at the folder the kubelet made on this node (check for a typo, the kubelet's "
    "--root-dir and the DaemonSet's hostPath); a server never creates a kubelet's folder"
)


def check_kubelet_folder(path: str | os.PathLike[str], flag: str) -> None:
    """A folder the kubelet makes and watches (device-plugins, plugins_registry, the DRA plugin
    folder): it must exist, since a missing one is a typo or no kubelet, never ours to create;
    then as `check_writable_folder`."""
    folder = Path(path)
    if not folder.exists() and _nearest_existing(folder).is_dir():  # (a file on the way: said below)
        raise SettingsError(f"{flag} {folder}: no such folder", KUBELET_FOLDER_FIX.format(flag=flag))
    check_writable_folder(folder, flag)


def check_output_folder(path: str | os.PathLike[str], flag: str) -> None:
    """A folder the server writes its files into and may create (node-exporter's textfile folder):
    it or its parent must exist (a missing parent is a typo); then as `check_writable_folder`."""
    folder = Path(path)
    parent = folder.absolute().parent
    if not folder.exists() and not parent.exists():
        raise SettingsError(
            f"{flag} {folder}: its parent {parent} does not exist",
            f"point {flag} at a folder on an existing path (check for a typo); the server creates "
            "at most the last folder",
        )
    check_writable_folder(folder, flag)


def _nearest_existing(folder: Path) -> Path:
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing


def check_readable_file(path: str | os.PathLike[str], flag: str, fix: str) -> None:
    """A file the server reads at start (a kubeconfig, a model): exists, is a file (else ``fix``), is
    readable (else the permission fix)."""
    file = Path(path)
    if not file.exists():
        raise SettingsError(f"{flag} {file} does not exist", fix)
    if file.is_dir():
        raise SettingsError(f"{flag} {file} is a folder, not a file", fix)
    if not os.access(file, os.R_OK):
        raise SettingsError(
            f"{flag} {file}: Permission denied (cannot read it)",
            "run the server as root (the DaemonSet does), or let its user read the file (chown or chmod)",
        )


def check_modules(needed: Mapping[str, str], install: str) -> None:
    """Every module in ``needed`` (module -> what it is for) is installed; one line naming the
    missing ones and ``install`` (e.g. ``pip install 'rknnlaunch[dra]'``) otherwise. Only looks the
    modules up: importing them (the `kubernetes` client loads every API model) is the server's."""
    missing = [f"{module} ({purpose})" for module, purpose in needed.items() if not _installed(module)]
    if missing:
        raise SettingsError(
            f"missing Python package{'s' * (len(missing) > 1)}: {', '.join(missing)}", install
        )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def os_error_with_fix(exc: OSError) -> RknnLaunchError | None:
    """A permission error as one line with the fix (None for other errors: the table's line)."""
    if exc.errno == errno.EADDRINUSE:
        return RknnLaunchError(
            describe_os_error(exc), "another process listens there: stop it, or pick another port"
        )
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = PERMISSION_FIX
        if exc.errno == errno.EROFS:
            fix = "mount the folder read-write (a hostPath volume without readOnly), or point the flag away"
        return RknnLaunchError(describe_os_error(exc), fix)
    return None
