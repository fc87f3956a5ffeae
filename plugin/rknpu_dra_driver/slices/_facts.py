"""What the slices say about the node besides its NPU: the board model (device tree) and the host
runtime's version, read once at start."""

from __future__ import annotations

from rknnlaunch.npu import HostRoot

from ._desired import NodeFacts


def node_facts(host: HostRoot, host_librknnrt: str | None) -> NodeFacts:
    """The board model (device tree) and the host runtime's version, when the node has them."""
    from rknnlaunch.npu import LIBRKNNRT_PATH, find_librknnrt

    model = None
    for path in ("/sys/firmware/devicetree/base/model", "/proc/device-tree/model"):
        try:
            model = host.read_text(path).strip("\0\n ") or None
            break
        except OSError:
            continue
    version = None
    try:
        found = find_librknnrt(host, host_librknnrt or LIBRKNNRT_PATH)
        version = found.version if found is not None else None
    except OSError:
        pass
    return NodeFacts(board_model=model, librknnrt_version=version)
