"""Table-driven discovery of the video blocks (MPP, RGA, DMA heaps) over fixture host trees laid out
as a vendor RK3588 kernel shows them (tests/fakehost.py `video_blocks`, docs/hardware.md#video-blocks)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fakehost import RK3588_DMA_HEAPS, make_host, write
from rknnlaunch.npu import HostRoot
from rknpu_node import discover_video, video_cdi_edits, video_device_ids


@dataclass(frozen=True)
class Expected:
    paths: tuple[str, ...] | None
    rga: bool = False
    sysfs: bool = False


HEAP_PATHS = tuple(f"/dev/dma_heap/{heap}" for heap in RK3588_DMA_HEAPS)

CASES = {
    "rk3588-video": Expected(("/dev/mpp_service", "/dev/rga", *HEAP_PATHS), rga=True, sysfs=True),
    "rk3588-mpp-only": Expected(("/dev/mpp_service",), sysfs=True),
    "rk3588-drm": Expected(None),  # no MPP driver: nothing offered, whatever the NPU
    "rocket": Expected(None),  # mainline kernel: no vendor MPP service
    "no-npu": Expected(None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_discover_video_over_fixture_hosts(tmp_path: Path, name: str) -> None:
    expected = CASES[name]
    blocks = discover_video(make_host(name, tmp_path / "host"))
    if expected.paths is None:
        assert blocks is None
        return
    assert blocks is not None
    assert blocks.device_paths == expected.paths
    assert blocks.rga is expected.rga
    assert blocks.sysfs_confirmed is expected.sysfs
    assert not any(path.startswith("/dev/dri") for path in blocks.device_paths)


def test_decoder_node_alone_is_enough(tmp_path: Path) -> None:
    """A node without the class device in sysfs (e.g. a /dev populated by hand) still counts, marked."""
    write(tmp_path, "/dev/mpp_service", "")
    blocks = discover_video(HostRoot(tmp_path))
    assert blocks is not None and blocks.device_paths == ("/dev/mpp_service",)
    assert blocks.sysfs_confirmed is False


def test_dma_heap_symlink_into_root_is_followed(tmp_path: Path) -> None:
    """The heap folder is read through the host root: an absolute link never escapes it."""
    write(tmp_path, "/dev/mpp_service", "")
    write(tmp_path, "/host-heaps/system", "")
    (tmp_path / "dev" / "dma_heap").symlink_to("/host-heaps")
    blocks = discover_video(HostRoot(tmp_path))
    assert blocks is not None and blocks.dma_heaps == ("/dev/dma_heap/system",)


def test_ids_and_cdi_edits(tmp_path: Path) -> None:
    assert video_device_ids(3) == ("vpu-0", "vpu-1", "vpu-2")
    blocks = discover_video(make_host("rk3588-video", tmp_path / "host"))
    assert blocks is not None
    edits = video_cdi_edits(blocks)
    assert edits == {"deviceNodes": [{"path": p, "permissions": "rw"} for p in blocks.device_paths]}
