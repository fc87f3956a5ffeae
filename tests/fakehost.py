"""Builds fixture host trees (/sys, /dev, /proc) that mimic real Rockchip boards, for discovery tests.

Each builder writes what the kernel shows on such a board: sysfs class links into
/sys/devices/platform/<addr>.npu, the `driver` link (the platform driver registers as "RKNPU",
upper case), the absolute /proc/device-tree symlink, the driver's text files in their real
formats (docs/hardware.md#driver-files), and device nodes. Device nodes are real char
devices when os.mknod is permitted (root), regular files otherwise.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rknnlaunch.npu import HostRoot

RK3588_COMPATIBLE = b"radxa,rock-5b\0rockchip,rk3588\0"
RK3576_COMPATIBLE = b"armsom,sige5\0rockchip,rk3576\0"
RK3568_COMPATIBLE = b"radxa,rock-3a\0rockchip,rk3568\0"
RK3588_LOAD = "NPU load:  Core0:  0%, Core1:  0%, Core2:  0%,\n"
RK3576_LOAD = "NPU load:  Core0:  0%, Core1:  0%,\n"
SINGLE_LOAD = "NPU load:  0%\n"
DRI_MAJOR = 226
RENDER_GID = 105


def write(root: Path, host_path: str, content: str | bytes, mode: int | None = None) -> Path:
    """Write a file at a host path inside ``root``, creating folders."""
    path = root / host_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    if mode is not None:
        path.chmod(mode)
    return path


def link(root: Path, host_path: str, target: str) -> None:
    """A symlink at ``host_path`` pointing to ``target`` (absolute targets are host paths)."""
    path = root / host_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(target, path)


def char_device(root: Path, host_path: str, major: int, minor: int, gid: int = RENDER_GID) -> Path:
    """A char device node (or a regular file where mknod is not permitted)."""
    path = root / host_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(path, 0o660 | stat.S_IFCHR, os.makedev(major, minor))
    except (PermissionError, OSError):
        path.write_bytes(b"")
        path.chmod(0o660)
    with contextlib.suppress(PermissionError):
        os.chown(path, -1, gid)
    return path


def device_tree(root: Path, compatible: bytes) -> None:
    """/proc/device-tree is an absolute symlink to /sys/firmware/devicetree/base on real hosts."""
    write(root, "/sys/firmware/devicetree/base/compatible", compatible)
    link(root, "/proc/device-tree", "/sys/firmware/devicetree/base")


def platform_device(root: Path, address: str, driver: str) -> str:
    """/sys/devices/platform/<address> with its `driver` link; returns its host path."""
    dev = f"/sys/devices/platform/{address}"
    (root / dev.lstrip("/")).mkdir(parents=True, exist_ok=True)
    write(root, f"/sys/bus/platform/drivers/{driver}/.keep", "")
    link(root, f"{dev}/driver", f"../../../bus/platform/drivers/{driver}")
    write(root, f"{dev}/uevent", f"DRIVER={driver}\nOF_NAME=npu\n")
    return dev


def drm_node(root: Path, name: str, platform_dev: str, minor: int) -> None:
    """/sys/class/drm/<name> (with its relative `device` link) and /dev/dri/<name>."""
    link(root, f"/sys/class/drm/{name}", f"../../devices/platform/{Path(platform_dev).name}/drm/{name}")
    sysdir = root / platform_dev.lstrip("/") / "drm" / name
    sysdir.mkdir(parents=True, exist_ok=True)
    link(root, f"{platform_dev}/drm/{name}/device", "../../../" + Path(platform_dev).name)
    char_device(root, f"/dev/dri/{name}", DRI_MAJOR, minor)


def driver_files(
    root: Path, folder: str, load: str, version: str = "RKNPU driver: v0.9.8\n", freq: str = "1000000000\n"
) -> None:
    """The driver's debugfs (or /proc/rknpu) folder."""
    write(root, f"{folder}/version", version)
    write(root, f"{folder}/load", load)
    write(root, f"{folder}/freq", freq)
    write(root, f"{folder}/volt", "850000\n")


def rk3588_cpus(root: Path, governor: str = "performance") -> None:
    """RK3588's CPUs: cpu0-3 Cortex-A55 (capacity 414, 1.8 GHz), cpu4-7 Cortex-A76 (1024, 2.4 GHz);
    cpufreq policies 0, 4 and 6 (the A76s are two clusters) with ``governor``."""
    for cpu in range(8):
        big = cpu >= 4
        write(root, f"/sys/devices/system/cpu/cpu{cpu}/cpu_capacity", "1024\n" if big else "414\n")
        freq = "2400000\n" if big else "1800000\n"
        write(root, f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq", freq)
    for policy in (0, 4, 6):
        write(root, f"/sys/devices/system/cpu/cpufreq/policy{policy}/scaling_governor", governor + "\n")
    write(root, "/sys/devices/system/cpu/possible", "0-7\n")


def thermal_zones(root: Path, types: tuple[str, ...], temps_mc: tuple[int, ...]) -> None:
    """/sys/class/thermal/thermal_zoneN links into /sys/devices/virtual/thermal, with type and temp."""
    for index, (zone_type, temp) in enumerate(zip(types, temps_mc, strict=True)):
        name = f"thermal_zone{index}"
        write(root, f"/sys/devices/virtual/thermal/{name}/type", zone_type + "\n")
        write(root, f"/sys/devices/virtual/thermal/{name}/temp", f"{temp}\n")
        link(root, f"/sys/class/thermal/{name}", f"../../devices/virtual/thermal/{name}")


RK3588_THERMAL = (
    "soc-thermal",
    "bigcore0-thermal",
    "bigcore1-thermal",
    "littlecore-thermal",
    "center-thermal",
    "gpu-thermal",
    "npu-thermal",
)


def rk3588_drm(root: Path) -> None:
    """RK3588 with the Mali GPU at card0/renderD128 and the NPU at card1/renderD129."""
    device_tree(root, RK3588_COMPATIBLE)
    gpu = platform_device(root, "fb000000.gpu", "mali")
    drm_node(root, "card0", gpu, 0)
    drm_node(root, "renderD128", gpu, 128)
    npu = platform_device(root, "fdab0000.npu", "RKNPU")
    drm_node(root, "card1", npu, 1)
    drm_node(root, "renderD129", npu, 129)
    driver_files(root, "/sys/kernel/debug/rknpu", RK3588_LOAD)
    write(root, "/sys/module/rknpu/version", "0.9.8\n")
    write(root, "/sys/class/devfreq/fdab0000.npu/cur_freq", "1000000000\n")
    write(root, "/sys/class/devfreq/fdab0000.npu/governor", "rknpu_ondemand\n")
    rk3588_cpus(root)
    thermal_zones(root, RK3588_THERMAL, (41600, 42500, 42100, 41200, 41400, 40700, 43900))


def rk3588_render128(root: Path) -> None:
    """RK3588 without a GPU driver: the NPU is card0/renderD128."""
    device_tree(root, RK3588_COMPATIBLE)
    npu = platform_device(root, "fdab0000.npu", "RKNPU")
    drm_node(root, "card0", npu, 0)
    drm_node(root, "renderD128", npu, 128)
    driver_files(root, "/sys/kernel/debug/rknpu", RK3588_LOAD)


def rk3588_misc(root: Path) -> None:
    """RK3588 with the misc-device (DMA-heap) build of rknpu: /dev/rknpu + /dev/dma_heap/system."""
    device_tree(root, RK3588_COMPATIBLE)
    gpu = platform_device(root, "fb000000.gpu", "mali")
    drm_node(root, "card0", gpu, 0)
    drm_node(root, "renderD128", gpu, 128)
    platform_device(root, "fdab0000.npu", "RKNPU")
    char_device(root, "/dev/rknpu", 10, 122)
    char_device(root, "/dev/dma_heap/system", 251, 0)
    driver_files(root, "/proc/rknpu", RK3588_LOAD, version="RKNPU driver: v0.9.6\n")


def rk3576(root: Path) -> None:
    device_tree(root, RK3576_COMPATIBLE)
    gpu = platform_device(root, "27800000.gpu", "mali")
    drm_node(root, "card0", gpu, 0)
    drm_node(root, "renderD128", gpu, 128)
    npu = platform_device(root, "27700000.npu", "RKNPU")
    drm_node(root, "card1", npu, 1)
    drm_node(root, "renderD129", npu, 129)
    driver_files(root, "/sys/kernel/debug/rknpu", RK3576_LOAD, version="RKNPU driver: v0.9.7\n")
    thermal_zones(root, ("soc-thermal", "bigcore-thermal", "npu-thermal"), (45000, 46000, 47250))


def rk3568(root: Path) -> None:
    device_tree(root, RK3568_COMPATIBLE)
    npu = platform_device(root, "fde40000.npu", "RKNPU")
    drm_node(root, "card1", npu, 1)
    drm_node(root, "renderD129", npu, 129)
    driver_files(root, "/sys/kernel/debug/rknpu", SINGLE_LOAD, version="RKNPU driver: v0.8.2\n")
    write(root, "/sys/module/rknpu/version", "0.8.2\n")
    thermal_zones(root, ("cpu-thermal", "gpu-thermal"), (38000, 37000))  # no NPU sensor on RK356x


def rocket(root: Path) -> None:
    """RK3588 on a mainline kernel: the `rocket` accel driver, no rknpu."""
    device_tree(root, RK3588_COMPATIBLE)
    platform_device(root, "fdab0000.npu", "rocket")
    link(root, "/sys/class/accel/accel0", "../../devices/platform/fdab0000.npu/accel/accel0")
    link(root, "/sys/devices/platform/fdab0000.npu/accel/accel0/device", "../../../fdab0000.npu")
    char_device(root, "/dev/accel/accel0", 261, 0)


def no_npu(root: Path) -> None:
    """A Raspberry Pi 5: a GPU DRM device, no NPU."""
    device_tree(root, b"raspberrypi,5-model-b\0brcm,bcm2712\0")
    gpu = platform_device(root, "1002000000.v3d", "v3d")
    drm_node(root, "card0", gpu, 0)
    drm_node(root, "renderD128", gpu, 128)


def debugfs_unreadable(root: Path) -> None:
    """RK3588 DRM where debugfs is root-only (0700) and the reader is not root."""
    rk3588_drm(root)
    (root / "sys/kernel/debug").chmod(0o700)
    for path in (root / "sys/kernel/debug/rknpu").iterdir():
        path.chmod(0o600)


class UnprivilegedHostRoot(HostRoot):
    """A HostRoot that reads as a non-root user would: files without world-read bits are EACCES.

    Tests run as root (CI does), where chmod does not stop a read; this view mimics the kernel's
    permission check for "others" so the non-root code path is exercised for real.
    """

    def _check(self, host_path: str) -> None:
        resolved = self.resolve(host_path)
        walk = self.root
        for part in resolved.parts[1:]:
            walk = walk / part
            mode = walk.stat().st_mode if walk.exists() else 0o755
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                raise PermissionError(13, "Permission denied", str(resolved))
        if walk.exists() and not walk.stat().st_mode & stat.S_IROTH:
            raise PermissionError(13, "Permission denied", str(resolved))

    def exists(self, host_path: str) -> bool:
        # A non-root stat() inside a 0700 folder fails, so os.path.exists() says False.
        try:
            self._check(host_path)
        except PermissionError:
            return False
        return super().exists(host_path)

    def read_bytes(self, host_path: str) -> bytes:
        self._check(host_path)
        return super().read_bytes(host_path)

    def read_text(self, host_path: str) -> str:
        self._check(host_path)
        return super().read_text(host_path)


MISC_MAJOR = 10
DMA_HEAP_MAJOR = 253
MPP_MAJOR = 241
VIDEO_GID = 44
RK3588_DMA_HEAPS = (
    "cma",
    "cma-uncached",
    "system",
    "system-dma32",
    "system-uncached",
    "system-uncached-dma32",
)
"""The heaps a Rockchip 5.10/6.1 BSP kernel shows on RK3588 (docs/hardware.md#video-blocks)."""


def video_blocks(root: Path, heaps: tuple[str, ...] = RK3588_DMA_HEAPS, rga: bool = True) -> None:
    """The vendor video stack as a BSP kernel shows it (docs/hardware.md#video-blocks): the MPP
    service's char device and its class device (/sys/class/mpp_class/mpp_service, a link into the
    platform device), RGA as a misc device, and one /dev/dma_heap node per heap."""
    service = platform_device(root, "mpp-srv", "mpp_service")
    (root / service.lstrip("/") / "mpp_class" / "mpp_service").mkdir(parents=True, exist_ok=True)
    link(root, "/sys/class/mpp_class/mpp_service", "../../devices/platform/mpp-srv/mpp_class/mpp_service")
    char_device(root, "/dev/mpp_service", MPP_MAJOR, 0, VIDEO_GID)
    if rga:
        write(root, "/sys/class/misc/rga/dev", f"{MISC_MAJOR}:122\n")
        char_device(root, "/dev/rga", MISC_MAJOR, 122, VIDEO_GID)
    for minor, heap in enumerate(heaps):
        char_device(root, f"/dev/dma_heap/{heap}", DMA_HEAP_MAJOR, minor, VIDEO_GID)


def rk3588_video(root: Path) -> None:
    """RK3588 (GPU, NPU as rk3588-drm) on a vendor kernel with MPP, RGA and the DMA heaps."""
    rk3588_drm(root)
    video_blocks(root)


def rk3588_mpp_only(root: Path) -> None:
    """A vendor kernel with the MPP service but no RGA driver and no DMA heaps (DRM buffers)."""
    rk3588_drm(root)
    video_blocks(root, heaps=(), rga=False)


@dataclass(frozen=True)
class FixtureHost:
    name: str
    build: Callable[[Path], None]
    unprivileged: bool = False

    def make(self, root: Path) -> HostRoot:
        root.mkdir(parents=True, exist_ok=True)
        self.build(root)
        return UnprivilegedHostRoot(root) if self.unprivileged else HostRoot(root)


HOSTS: dict[str, FixtureHost] = {
    host.name: host
    for host in (
        FixtureHost("rk3588-drm", rk3588_drm),
        FixtureHost("rk3588-video", rk3588_video),
        FixtureHost("rk3588-mpp-only", rk3588_mpp_only),
        FixtureHost("rk3588-render128", rk3588_render128),
        FixtureHost("rk3588-misc", rk3588_misc),
        FixtureHost("rk3576", rk3576),
        FixtureHost("rk3568", rk3568),
        FixtureHost("rocket", rocket),
        FixtureHost("no-npu", no_npu),
        FixtureHost("debugfs-unreadable", debugfs_unreadable, unprivileged=True),
    )
}


def make_host(name: str, root: Path) -> HostRoot:
    """Build fixture host ``name`` under ``root`` and return the HostRoot to read it through."""
    return HOSTS[name].make(root)
