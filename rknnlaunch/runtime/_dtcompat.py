"""Makes RKNNLite see the host's device-tree `compatible` in containers that mask /proc/device-tree.

Why this exists: rknn-toolkit-lite2's Python layer reads /proc/device-tree/compatible to learn the
SoC, and `init_runtime` fails without it ("Please specify the target in init_runtime!"), while
passing target= on the board fails too ("Unsupported run platform"). Container runtimes mask
/sys/firmware (where /proc/device-tree points), so the device plugin mounts the host's file at
RKNN_NPU_COMPATIBLE_FILE (/run/rknpu/compatible).

Chosen fix: redirect exactly that path (and its /sys/firmware twin) at the Python I/O layer of
this process, *before* rknnlite is imported: `builtins.open`, `io.open`, `os.open`,
`os.path.exists/isfile`, `os.access`, and on Python < 3.11 pathlib's own opener (there
`Path.open/read_bytes/read_text` call `pathlib._normal_accessor.open`, which captured `io.open`
(3.10) or `os.open` (3.9) when pathlib was imported, so patching the modules alone misses them).
Cython-compiled modules (rknnlite ships compiled) cache builtins such as `open` when they are
imported, so installing first is what makes them see it.
For processes started by `rknnlaunch run` the same hook is installed at interpreter start by
`rknnlaunch/_dtshim/sitecustomize.py`, put first on PYTHONPATH (a .pth file would not work: .pth
files are only read from site directories, never from PYTHONPATH). Alternatives rejected: a bind
mount over /proc needs CAP_SYS_ADMIN (privileged pods, which the plugin exists to avoid);
LD_PRELOAD of an open() wrapper would need a compiled shim per libc and the C runtime does not
read the file. Only the one path is touched; everything else passes straight through.

This module is standard-library only and has no package-relative imports at module level: the
sitecustomize shim loads it by file path without importing the rknnlaunch package.
"""

from __future__ import annotations

import builtins
import io
import os
import pathlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

COMPATIBLE_PATHS = ("/proc/device-tree/compatible", "/sys/firmware/devicetree/base/compatible")
REDIRECT_ENV = "RKNNLAUNCH_COMPATIBLE_REDIRECT"
"""Set by `rknnlaunch run` for its child: the file the shim redirects the compatible path to."""
SHIM_DIR = Path(__file__).with_name("_dtshim")
"""Holds the sitecustomize.py that `rknnlaunch run` puts first on the child's PYTHONPATH."""

_lock = threading.Lock()
_state: dict[str, Any] = {"target": None, "originals": None}


def readable(path: str | os.PathLike[str]) -> bool:
    """Whether this process can read ``path`` right now (through any installed redirect)."""
    try:
        with open(path, "rb") as handle:
            handle.read(1)
        return True
    except OSError:
        return False


def redirect_target() -> str | None:
    """The file the compatible path is redirected to in this process, or None."""
    target: str | None = _state["target"]
    return target


def _redirected(path: Any) -> Any:
    target = _state["target"]
    if target is None or isinstance(path, int):
        return path
    try:
        name = os.fsdecode(os.fspath(path))
    except TypeError:
        return path
    if name in COMPATIBLE_PATHS or os.path.normpath(name) in COMPATIBLE_PATHS:
        return os.fsencode(target) if isinstance(path, bytes) else target
    return path


def _pathlib_accessor() -> Any:
    """pathlib's shared accessor on Python < 3.11 (its `open` bypasses io.open/os.open), else None."""
    return getattr(pathlib, "_normal_accessor", None)


def install_redirect(replacement: str | os.PathLike[str]) -> None:
    """Make this process's Python-level reads of the compatible path read ``replacement`` instead.

    Idempotent; a second call only changes the target. Install before importing rknnlite.
    """
    with _lock:
        _state["target"] = os.fspath(replacement)
        if _state["originals"] is not None:
            return
        originals: dict[str, Callable[..., Any]] = {
            "open": builtins.open,
            "io_open": io.open,
            "os_open": os.open,
            "exists": os.path.exists,
            "isfile": os.path.isfile,
            "access": os.access,
        }
        _state["originals"] = originals

        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            def redirected(path: Any, *args: Any, **kwargs: Any) -> Any:
                return original(_redirected(path), *args, **kwargs)

            redirected.__name__ = getattr(original, "__name__", "redirected")
            redirected.__doc__ = getattr(original, "__doc__", None)
            redirected.__wrapped__ = original  # type: ignore[attr-defined]
            return redirected

        accessor = _pathlib_accessor()
        if accessor is not None:
            originals["pathlib_open"] = accessor.open
            accessor.open = wrap(accessor.open)  # an instance attribute: functions there do not bind
        builtins.open = wrap(originals["open"])
        io.open = wrap(originals["io_open"])
        os.open = wrap(originals["os_open"])
        os.path.exists = wrap(originals["exists"])
        os.path.isfile = wrap(originals["isfile"])
        os.access = wrap(originals["access"])


def uninstall_redirect() -> None:
    """Undo `install_redirect` (tests)."""
    with _lock:
        originals = _state["originals"]
        _state["target"] = None
        if originals is None:
            return
        accessor = _pathlib_accessor()
        if accessor is not None and "pathlib_open" in originals:
            del accessor.open  # back to the class's own opener
        builtins.open = originals["open"]
        io.open = originals["io_open"]
        os.open = originals["os_open"]
        os.path.exists = originals["exists"]
        os.path.isfile = originals["isfile"]
        os.access = originals["access"]
        _state["originals"] = None


def replacement_for(compatible_file: str | None, local_path: Path | None) -> str | None:
    """Which file to redirect to: None when the real path is readable or no usable replacement exists.

    ``local_path`` is where this process opens ``compatible_file`` (it differs under a test root).
    """
    if compatible_file is None or local_path is None:
        return None
    if any(readable(path) for path in COMPATIBLE_PATHS) and redirect_target() is None:
        return None
    return str(local_path) if readable(local_path) else None


def child_environment(env: dict[str, str], replacement: str) -> dict[str, str]:
    """``env`` plus what makes a Python child install the redirect at start-up."""
    updated = dict(env)
    updated[REDIRECT_ENV] = replacement
    existing = updated.get("PYTHONPATH", "")
    parts = [str(SHIM_DIR)] + [part for part in existing.split(os.pathsep) if part and part != str(SHIM_DIR)]
    updated["PYTHONPATH"] = os.pathsep.join(parts)
    return updated
