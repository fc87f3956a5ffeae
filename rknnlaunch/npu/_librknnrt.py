"""Finds librknnrt.so where RKNNLite loads it (/usr/lib, nowhere else) and reads its embedded version."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._discovery import HostRoot

LIBRKNNRT_PATH = "/usr/lib/librknnrt.so"
"""rknn-toolkit-lite2 loads exactly this path; LD_LIBRARY_PATH does not change it."""
# Places people copy it to by mistake: reported so the fix can say "move it".
MISPLACED_PATHS = (
    "/usr/lib/aarch64-linux-gnu/librknnrt.so",
    "/usr/local/lib/librknnrt.so",
    "/usr/lib64/librknnrt.so",
    "/lib/librknnrt.so",
)
_VERSION = re.compile(rb"librknnrt version: ?v?(\d+\.\d+\.\d+)([^\x00\n]{0,80})")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Librknnrt:
    """The runtime library as found on disk."""

    path: str
    size: int
    version: str | None
    """``"2.3.2"``, or None when no version string is embedded (not a librknnrt, or stripped)."""
    version_line: str | None
    """The whole embedded line: ``librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)``."""


def parse_librknnrt_version(data: bytes) -> tuple[str | None, str | None]:
    """The embedded ``librknnrt version: X.Y.Z (...)`` string -> (``"X.Y.Z"``, whole line)."""
    match = _VERSION.search(data)
    if match is None:
        return None, None
    line = (b"librknnrt version: " + match.group(1) + match.group(2)).decode("ascii", "replace").strip()
    return match.group(1).decode("ascii"), line


def find_librknnrt(host: HostRoot, path: str = LIBRKNNRT_PATH) -> Librknnrt | None:
    """The library at ``path`` under ``host``, or None if absent. Raises OSError if unreadable."""
    if not host.exists(path):
        return None
    local = host.open_path(path)
    size = local.stat().st_size
    tail = b""
    with local.open("rb") as handle:
        # Stream it: the library is several MB; keep an overlap so a string split by a chunk is found.
        while chunk := handle.read(_CHUNK):
            version, line = parse_librknnrt_version(tail + chunk)
            if version is not None:
                return Librknnrt(path, size, version, line)
            tail = chunk[-200:]
    return Librknnrt(path, size, None, None)


MOUNTINFO_PATH = "/proc/self/mountinfo"


def mount_points(mountinfo: str) -> frozenset[str]:
    """The mount points in a ``/proc/self/mountinfo`` text (field 5; ``\\040``-style escapes undone)."""
    points = set()
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return frozenset(points)


def librknnrt_source(host: HostRoot, injected: str | None) -> tuple[str, str | None]:
    """Where /usr/lib/librknnrt.so came from: (``"image"`` | ``"host"`` | ``"host?"``, node path).

    The device plugin's ``--host-librknnrt`` bind-mounts the node's file there and says so in
    ``RKNN_NPU_LIBRKNNRT_SOURCE=host:<node path>`` (``injected``); the claim is checked against
    this process's mount table: ``"host?"`` when it names no mount at that path (the runtime
    ignored the mount, and the image's file is what RKNNLite loads).
    """
    if not injected or not injected.startswith("host:"):
        return "image", None
    node_path = injected.removeprefix("host:")
    try:
        mounted = LIBRKNNRT_PATH in mount_points(host.read_text(MOUNTINFO_PATH))
    except OSError:
        mounted = False
    return ("host" if mounted else "host?"), node_path


def misplaced_copies(host: HostRoot) -> tuple[str, ...]:
    """Copies of librknnrt.so in places RKNNLite does not look."""
    return tuple(path for path in MISPLACED_PATHS if host.exists(path))
