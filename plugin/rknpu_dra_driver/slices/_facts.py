"""What the slices say about the node besides its NPU: the board model (device tree), the host
runtime's version and (``--vpu``) the video blocks, read once at start."""

from __future__ import annotations

from rknnlaunch.npu import HostRoot

from ._desired import NodeFacts


def node_facts(host: HostRoot, host_librknnrt: str | None, vpu: bool = False) -> NodeFacts:
    """The board model (device tree), the host runtime's version and, with ``vpu``, the video
    blocks (`rknpu_node.discover_video`), when the node has them."""
    from rknnlaunch.npu import LIBRKNNRT_PATH, find_librknnrt
    from rknpu_node import discover_video

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
    video = None
    if vpu:
        try:
            video = discover_video(host)
        except OSError:
            video = None
    return NodeFacts(board_model=model, librknnrt_version=version, video=video)
