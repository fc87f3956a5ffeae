"""The node's video blocks (MPP codecs, RGA, DMA heaps): which host device nodes a pod that decodes in
hardware needs, found under the host root, and the device IDs that share them
(docs/hardware.md#video-blocks)."""

from __future__ import annotations

from dataclasses import dataclass

from rknnlaunch.npu import HostRoot

VIDEO_RESOURCE_NAME = "rockchip.com/vpu"
DEFAULT_VIDEO_REPLICAS = 8
DECODER_NODE = "/dev/mpp_service"
"""The vendor MPP service's one char device for every codec block (decoders and encoders)."""
MPP_CLASS_DEVICE = "/sys/class/mpp_class/mpp_service"
"""Where the same driver's class device shows in sysfs (class "mpp_class", device "mpp_service")."""
RGA_NODE = "/dev/rga"
DMA_HEAP_FOLDER = "/dev/dma_heap"
VIDEO_CDI_DEVICE = "vpu"


@dataclass(frozen=True)
class VideoBlocks:
    """The video device nodes present on the node, by host path (the decoder first)."""

    device_paths: tuple[str, ...]
    rga: bool
    dma_heaps: tuple[str, ...]
    sysfs_confirmed: bool
    """Whether `/sys/class/mpp_class/mpp_service` exists too (the driver's class device)."""


def discover_video(host: HostRoot) -> VideoBlocks | None:
    """The MPP decoder's node and its helpers (RGA, every DMA heap) present under ``host``; None
    without `/dev/mpp_service` (no vendor MPP driver: nothing worth offering).

    Never all of /dev/dri: MPP allocates its buffers from the DMA heaps when they exist.
    """
    if not host.exists(DECODER_NODE):
        return None
    heaps = tuple(f"{DMA_HEAP_FOLDER}/{name}" for name in host.listdir(DMA_HEAP_FOLDER))
    rga = host.exists(RGA_NODE)
    paths = (DECODER_NODE, *((RGA_NODE,) if rga else ()), *heaps)
    return VideoBlocks(
        device_paths=paths, rga=rga, dma_heaps=heaps, sysfs_confirmed=host.exists(MPP_CLASS_DEVICE)
    )


def video_device_ids(replicas: int) -> tuple[str, ...]:
    """The shareable devices offered for the video blocks: ``vpu-0`` ... (one per pod sharing them)."""
    return tuple(f"vpu-{index}" for index in range(replicas))


def video_cdi_edits(blocks: VideoBlocks) -> dict[str, object]:
    """CDI container edits handing in exactly the video device nodes, read-write (no hostPath:
    it defaults to path, so cdiVersion 0.3.0 reads it)."""
    return {"deviceNodes": [{"path": path, "permissions": "rw"} for path in blocks.device_paths]}
