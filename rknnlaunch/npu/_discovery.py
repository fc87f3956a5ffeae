"""Host discovery of the Rockchip NPU under an injectable host root, and driver-file parsing."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from .._errors import NpuNotFoundError, UnknownSocError, UnsupportedDriverError
from ._soc import SOCS, SocSpec, soc_from_compatible, split_compatible

NodeRole = Literal["render", "card", "misc", "dma_heap"]
DriverKind = Literal["drm", "misc"]

COMPATIBLE_PATH = "/proc/device-tree/compatible"
# Where /proc/device-tree points on real hosts; read directly if the /proc link is missing.
FIRMWARE_COMPATIBLE_PATH = "/sys/firmware/devicetree/base/compatible"
DRIVER_DIRS = ("/sys/kernel/debug/rknpu", "/proc/rknpu")
MODULE_VERSION_PATH = "/sys/module/rknpu/version"
MISC_NODE = "/dev/rknpu"
DMA_HEAP_NODE = "/dev/dma_heap/system"
_MAX_SYMLINKS = 40


class HostRoot:
    """The host's filesystem as seen from here: ``/`` on the node, ``/host`` in the DaemonSet.

    Every path we report is a host path (what kubelet and the container runtime see). Symlinks
    are resolved inside the root, so an absolute link such as ``/proc/device-tree ->
    /sys/firmware/devicetree/base`` never escapes to the container's own ``/``.
    """

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"HostRoot({str(self.root)!r})"

    def resolve(self, host_path: str) -> PurePosixPath:
        """The host path that ``host_path`` names once every symlink is followed (inside the root)."""
        pending = list(PurePosixPath("/", host_path).parts[1:])
        current = PurePosixPath("/")
        hops = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                current = current.parent
                continue
            candidate = current / part
            local = self.local(candidate)
            if local.is_symlink():
                hops += 1
                if hops > _MAX_SYMLINKS:
                    raise OSError(f"too many symlinks resolving {host_path} under {self.root}")
                target = PurePosixPath(os.readlink(local))
                pending = list(target.parts[1:] if target.is_absolute() else target.parts) + pending
                if target.is_absolute():
                    current = PurePosixPath("/")
                continue
            current = candidate
        return current

    def local(self, host_path: str | PurePosixPath) -> Path:
        """The path to open from this process for a host path, without resolving links."""
        return self.root / str(host_path).lstrip("/")

    def open_path(self, host_path: str) -> Path:
        """The path to open from this process for a host path, links resolved inside the root."""
        return self.local(self.resolve(host_path))

    def exists(self, host_path: str) -> bool:
        try:
            return self.open_path(host_path).exists()
        except OSError:
            return False

    def read_bytes(self, host_path: str) -> bytes:
        return self.open_path(host_path).read_bytes()

    def read_text(self, host_path: str) -> str:
        return self.open_path(host_path).read_text(encoding="utf-8", errors="replace")

    def listdir(self, host_path: str) -> list[str]:
        try:
            return sorted(os.listdir(self.open_path(host_path)))
        except OSError:
            return []


@dataclass(frozen=True)
class DeviceNode:
    """One device node the NPU needs in a container, by its host path."""

    path: str
    role: NodeRole


@dataclass(frozen=True)
class NpuInfo:
    """Everything discovery learned about the host's NPU. Immutable; compare and hash freely."""

    soc: SocSpec
    compatible: tuple[str, ...]
    core_count: int
    core_count_source: str
    driver_kind: DriverKind
    nodes: tuple[DeviceNode, ...]
    driver_version: str | None = None
    driver_version_source: str | None = None
    load_path: str | None = None
    frequency_path: str | None = None
    debugfs_readable: bool = False
    notes: tuple[str, ...] = field(default=())
    compatible_path: str | None = None
    """Host path (links resolved) of the device-tree `compatible` file read; None if none was."""

    @property
    def cores(self) -> frozenset[int]:
        return frozenset(range(self.core_count))

    @property
    def device_paths(self) -> tuple[str, ...]:
        return tuple(node.path for node in self.nodes)

    @property
    def primary_device(self) -> str:
        """The node an app opens: the render node (DRM build) or /dev/rknpu (misc build)."""
        for role in ("render", "misc"):
            for node in self.nodes:
                if node.role == role:
                    return node.path
        return self.nodes[0].path


# --- pure parsers ------------------------------------------------------------------------------

_VERSION = re.compile(r"v?(\d+\.\d+\.\d+)")
_CORE_LOAD = re.compile(r"Core(\d+)\s*:\s*(-?\d+)\s*%", re.IGNORECASE)
_SINGLE_LOAD = re.compile(r"NPU load\s*:\s*(-?\d+)\s*%", re.IGNORECASE)


def parse_driver_version(text: str) -> str | None:
    """``"RKNPU driver: v0.9.8\\n"``, ``"0.9.6"`` or the dmesg line -> ``"0.9.8"``; None if absent."""
    match = _VERSION.search(text)
    return match.group(1) if match else None


_LEADING_RELEASE = re.compile(r"\s*v?(\d+(?:\.\d+)*)")


def version_tuple(version: str) -> tuple[int, ...]:
    """The leading release numbers: ``"0.9.8"`` -> ``(0, 9, 8)``; ``"2.3.2+81f21f4d"`` ->
    ``(2, 3, 2)``; ``"v2.1.0b3"`` -> ``(2, 1, 0)``; ``()`` when there are none."""
    match = _LEADING_RELEASE.match(version)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def parse_load(text: str) -> tuple[float, ...]:
    """The driver's ``load`` file -> per-core load as a ratio in [0, 1].

    ``"NPU load:  Core0:  5%, Core1:  0%, Core2:  0%,"`` -> ``(0.05, 0.0, 0.0)``;
    single-core ``"NPU load:  7%"`` -> ``(0.07,)``. Absurd values (``429496%``) are clamped.
    Raises ValueError when the text holds no load figure at all.
    """
    per_core = {int(core): int(value) for core, value in _CORE_LOAD.findall(text)}
    if per_core:
        count = max(per_core) + 1
        return tuple(_clamp_percent(per_core.get(core, 0)) for core in range(count))
    single = _SINGLE_LOAD.search(text)
    if single:
        return (_clamp_percent(int(single.group(1))),)
    raise ValueError(f"no NPU load figure in {text[:80]!r}")


def _clamp_percent(value: int) -> float:
    return min(max(value, 0), 100) / 100.0


def parse_frequency(text: str) -> int:
    """A bare number of Hz (``freq``, devfreq ``cur_freq``) -> int; raises ValueError otherwise."""
    value = int(text.strip().split()[0])
    if value < 0:
        raise ValueError(f"negative frequency {value}")
    return value


# --- discovery --------------------------------------------------------------------------------


def discover(
    root: HostRoot | str | os.PathLike[str] = "/",
    *,
    soc_hint: SocSpec | None = None,
    extra_compatible_paths: Sequence[str] = (),
) -> NpuInfo:
    """Find the NPU on the host under ``root``.

    ``soc_hint`` is used when the device tree cannot be read (a container with /proc masked and
    no replacement file); ``extra_compatible_paths`` are read before the standard locations.
    Raises a `DiscoveryError` subclass whose message lists what was looked at.
    """
    host = root if isinstance(root, HostRoot) else HostRoot(root)
    looked_at: list[str] = []
    nodes, kind = _find_nodes(host, looked_at)
    if not nodes:
        _raise_not_found(host, looked_at)

    compatible, compatible_path = _read_compatible(
        host, (*extra_compatible_paths, COMPATIBLE_PATH, FIRMWARE_COMPATIBLE_PATH)
    )
    soc = soc_from_compatible("\0".join(compatible)) if compatible else None
    if soc is None:
        soc = soc_hint
    if soc is None:
        if compatible:
            raise UnknownSocError(
                f"the device tree names no Rockchip SoC with an NPU we know: {', '.join(compatible)}",
                "rknnlaunch supports " + ", ".join(s.name for s in SOCS) + "; set RKNN_NPU_SOC if "
                "your board is one of them under another name",
            )
        raise UnknownSocError(
            f"cannot read the SoC from {COMPATIBLE_PATH} or {FIRMWARE_COMPATIBLE_PATH} under {host.root} "
            "(container runtimes mask /proc and /sys/firmware by default)",
            "run through the rknpu device plugin (it injects RKNN_NPU_SOC), or set RKNN_NPU_SOC=rk3588 "
            "(your SoC) yourself",
        )

    notes: list[str] = []
    version, version_source, debugfs_readable = _read_driver_version(host, notes)
    load_path, load = _read_first_load(host)
    if load is not None and 0 < len(load) <= soc.npu_cores:
        core_count, core_source = len(load), f"driver ({load_path})"
    else:
        core_count, core_source = soc.npu_cores, "SoC table"
        if load_path is None:
            notes.append("the driver's load file is not readable here; core count taken from the SoC table")
    return NpuInfo(
        soc=soc,
        compatible=compatible,
        core_count=core_count,
        core_count_source=core_source,
        driver_kind=kind,
        nodes=nodes,
        driver_version=version,
        driver_version_source=version_source,
        load_path=load_path,
        frequency_path=_find_frequency(host, soc),
        debugfs_readable=debugfs_readable,
        notes=tuple(notes),
        compatible_path=compatible_path,
    )


def read_compatible(host: HostRoot, path: str) -> tuple[str, ...]:
    """The device-tree `compatible` strings in the file at host path ``path`` (empty if unreadable)."""
    try:
        return split_compatible(host.read_bytes(path).decode("ascii", "replace"))
    except OSError:
        return ()


def _read_compatible(host: HostRoot, paths: Iterable[str]) -> tuple[tuple[str, ...], str | None]:
    """The first readable `compatible` among ``paths`` and its host path, links resolved."""
    for path in paths:
        entries = read_compatible(host, path)
        if entries:
            try:
                return entries, str(host.resolve(path))
            except OSError:
                continue
    return (), None


def _driver_name(host: HostRoot, device_dir: str) -> str | None:
    """The kernel driver bound to a sysfs device folder (its `driver` link, else `uevent`)."""
    try:
        link = host.local(host.resolve(device_dir) / "driver")
        if link.is_symlink():
            return PurePosixPath(os.readlink(link)).name
    except OSError:
        pass
    try:
        for line in host.read_text(f"{device_dir}/uevent").splitlines():
            if line.startswith("DRIVER="):
                return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def _find_nodes(host: HostRoot, looked_at: list[str]) -> tuple[tuple[DeviceNode, ...], DriverKind]:
    looked_at.append("/sys/class/drm/*/device/driver")
    drm: list[DeviceNode] = []
    for name in host.listdir("/sys/class/drm"):
        role: NodeRole | None = (
            "card"
            if re.fullmatch(r"card\d+", name)
            else ("render" if re.fullmatch(r"renderD\d+", name) else None)
        )
        if role is None:
            continue
        driver = _driver_name(host, f"/sys/class/drm/{name}/device")
        # The platform driver registers as "RKNPU", the DRM driver as "rknpu": compare folded.
        if driver is not None and driver.casefold() == "rknpu":
            drm.append(DeviceNode(f"/dev/dri/{name}", role))
    if drm:
        drm.sort(key=lambda node: (node.role != "card", node.path))
        return tuple(drm), "drm"
    looked_at.append(MISC_NODE)
    misc = host.local(MISC_NODE)
    # A /dev/rknpu symlink to a render node is a distro hack that breaks librknnrt 2.x: not the misc build.
    if misc.exists() and not misc.is_symlink():
        nodes = [DeviceNode(MISC_NODE, "misc")]
        if host.exists(DMA_HEAP_NODE):
            nodes.append(DeviceNode(DMA_HEAP_NODE, "dma_heap"))
        return tuple(nodes), "misc"
    return (), "drm"


def _raise_not_found(host: HostRoot, looked_at: list[str]) -> None:
    for name in host.listdir("/sys/class/accel"):
        driver = _driver_name(host, f"/sys/class/accel/{name}/device")
        if driver is not None and driver.casefold() == "rocket":
            raise UnsupportedDriverError(
                f"found /dev/accel/{name} (mainline rocket driver): librknnrt needs the vendor rknpu driver",
                "boot a Rockchip vendor kernel (or a kernel with the rknpu driver) instead of the mainline "
                "rocket NPU driver",
            )
    accel = host.listdir("/dev/accel")
    if accel:
        raise UnsupportedDriverError(
            f"found /dev/accel/{accel[0]} but no rknpu device: librknnrt needs the vendor rknpu driver",
            "load the rknpu kernel module (vendor kernel) and check `dmesg | grep -i rknpu`",
        )
    raise NpuNotFoundError(
        f"no Rockchip NPU found under {host.root}: looked at {', '.join(looked_at)}",
        "run on an RK3588/RK3576/RK356x board with the rknpu driver loaded (`dmesg | grep -i rknpu`); "
        "in a pod, request rockchip.com/npu so the device plugin hands the NPU's device nodes in",
    )


def _read_driver_version(host: HostRoot, notes: list[str]) -> tuple[str | None, str | None, bool]:
    debugfs_readable = False
    candidates = [f"{folder}/version" for folder in DRIVER_DIRS] + [MODULE_VERSION_PATH]
    found: tuple[str | None, str | None] = (None, None)
    for path in candidates:
        try:
            text = host.read_text(path)
        except PermissionError:
            if path.startswith("/sys/kernel/debug"):
                notes.append("debugfs (/sys/kernel/debug/rknpu) is not readable: run as root to read load")
            continue
        except OSError:
            continue
        if path.startswith("/sys/kernel/debug"):
            debugfs_readable = True
        version = parse_driver_version(text)
        if version is not None and found[0] is None:
            found = (version, path)
    return found[0], found[1], debugfs_readable


def _read_first_load(host: HostRoot) -> tuple[str | None, tuple[float, ...] | None]:
    for folder in DRIVER_DIRS:
        path = f"{folder}/load"
        try:
            text = host.read_text(path)
        except OSError:
            continue
        try:
            return path, parse_load(text)
        except ValueError:
            return path, None
    return None, None


def _find_frequency(host: HostRoot, soc: SocSpec) -> str | None:
    for folder in DRIVER_DIRS:
        if host.exists(f"{folder}/freq"):
            return f"{folder}/freq"
    names = [soc.devfreq_node] if soc.devfreq_node else []
    names += [name for name in host.listdir("/sys/class/devfreq") if name.endswith(".npu")]
    for name in names:
        path = f"/sys/class/devfreq/{name}/cur_freq"
        if host.exists(path):
            return path
    return None


def read_load(host: HostRoot, info: NpuInfo) -> tuple[float, ...]:
    """Per-core load now (ratio). Raises OSError if unreadable, ValueError if unparsable."""
    if info.load_path is None:
        raise FileNotFoundError("the NPU driver's load file was not found or is not readable")
    return parse_load(host.read_text(info.load_path))


def read_frequency(host: HostRoot, info: NpuInfo) -> int:
    """NPU clock now, in Hz. Raises OSError if unreadable, ValueError if unparsable."""
    if info.frequency_path is None:
        raise FileNotFoundError("no NPU frequency file found (debugfs freq or devfreq cur_freq)")
    return parse_frequency(host.read_text(info.frequency_path))


# --- NPU temperature (thermal zones) -----------------------------------------------------------

THERMAL_DIR = "/sys/class/thermal"
# Kernel thermal zones say what they measure in `type`: RK3588/RK3576 device trees name the NPU's
# sensor "npu-thermal"; RK356x has none (its NPU shares the SoC's sensor), so none is reported.
_NPU_ZONE_TYPE = re.compile(r"\bnpu\b", re.IGNORECASE)


def find_npu_thermal_zone(host: HostRoot) -> str | None:
    """Host path of the thermal zone whose ``type`` names the NPU (e.g. ``npu-thermal``), or None."""
    try:
        names = [path.name for path in host.local(THERMAL_DIR).iterdir()]
    except OSError:
        return None
    numbered = [name for name in names if name.removeprefix("thermal_zone").isdigit()]
    zones = sorted(numbered, key=lambda name: int(name.removeprefix("thermal_zone")))
    for name in zones:
        zone = f"{THERMAL_DIR}/{name}"
        try:
            zone_type = host.read_text(f"{zone}/type").strip()
        except OSError:
            continue
        if _NPU_ZONE_TYPE.search(zone_type.replace("_", "-")):
            return zone
    return None


def parse_temperature(text: str) -> float:
    """A thermal zone's ``temp`` (millidegrees Celsius, ``41600``) -> degrees (41.6)."""
    return int(text.strip().split()[0]) / 1000.0


def read_temperature(host: HostRoot, zone: str) -> float:
    """The zone's temperature now in degrees Celsius. Raises OSError / ValueError."""
    return parse_temperature(host.read_text(f"{zone}/temp"))
