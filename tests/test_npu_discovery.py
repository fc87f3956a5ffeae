"""Table-driven discovery over every fixture host tree (tests/fakehost.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from fakehost import UnprivilegedHostRoot, link, write
from rknnlaunch import NpuNotFoundError, UnknownSocError, UnsupportedDriverError
from rknnlaunch.npu import (
    HostRoot,
    discover,
    parse_driver_version,
    parse_frequency,
    parse_load,
    read_frequency,
    read_load,
    soc_by_name,
)


@dataclass(frozen=True)
class Expected:
    soc: str
    cores: int
    kind: str
    nodes: tuple[str, ...]
    primary: str
    version: str | None
    debugfs: bool


CASES: dict[str, Expected] = {
    "rk3588-drm": Expected(
        "rk3588", 3, "drm", ("/dev/dri/card1", "/dev/dri/renderD129"), "/dev/dri/renderD129", "0.9.8", True
    ),
    "rk3588-render128": Expected(
        "rk3588", 3, "drm", ("/dev/dri/card0", "/dev/dri/renderD128"), "/dev/dri/renderD128", "0.9.8", True
    ),
    "rk3588-misc": Expected(
        "rk3588", 3, "misc", ("/dev/rknpu", "/dev/dma_heap/system"), "/dev/rknpu", "0.9.6", False
    ),
    "rk3576": Expected(
        "rk3576", 2, "drm", ("/dev/dri/card1", "/dev/dri/renderD129"), "/dev/dri/renderD129", "0.9.7", True
    ),
    "rk3568": Expected(
        "rk3568", 1, "drm", ("/dev/dri/card1", "/dev/dri/renderD129"), "/dev/dri/renderD129", "0.8.2", True
    ),
    "debugfs-unreadable": Expected(
        "rk3588", 3, "drm", ("/dev/dri/card1", "/dev/dri/renderD129"), "/dev/dri/renderD129", "0.9.8", False
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_discovery_finds_the_npu(name: str, host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory(name)
    expected = CASES[name]
    info = discover(host)
    assert info.soc.name == expected.soc
    assert info.core_count == expected.cores
    assert info.driver_kind == expected.kind
    assert info.device_paths == expected.nodes
    assert info.primary_device == expected.primary
    assert info.driver_version == expected.version
    assert info.debugfs_readable is expected.debugfs
    # Host paths, never prefixed with the host root.
    assert all(not p.startswith(str(host.root)) for p in info.device_paths)
    assert hash(info) == hash(discover(host))  # immutable value


def test_unreadable_debugfs_says_so_and_falls_back(host_factory: Callable[[str], HostRoot]) -> None:
    info = discover(host_factory("debugfs-unreadable"))
    assert info.load_path is None
    assert info.driver_version_source == "/sys/module/rknpu/version"
    assert info.core_count_source == "SoC table"
    assert any("debugfs" in note for note in info.notes)


def test_rocket_driver_is_named(host_factory: Callable[[str], HostRoot]) -> None:
    with pytest.raises(UnsupportedDriverError) as err:
        discover(host_factory("rocket"))
    message = str(err.value)
    assert "/dev/accel/accel0" in message and "rocket" in message and "fix:" in message


def test_no_npu_lists_what_was_looked_at(host_factory: Callable[[str], HostRoot]) -> None:
    with pytest.raises(NpuNotFoundError) as err:
        discover(host_factory("no-npu"))
    assert "/sys/class/drm" in str(err.value) and "/dev/rknpu" in str(err.value)


def test_device_tree_link_resolves_inside_the_host_root(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("rk3588-drm")
    # The absolute /proc/device-tree link must land in the fixture, not in this machine's /sys.
    expected = host.root / "sys/firmware/devicetree/base/compatible"
    assert host.open_path("/proc/device-tree/compatible") == expected
    assert host.local("/proc/device-tree").is_symlink()
    # Reported as the host path the link resolves to (what a DaemonSet mount can name).
    assert discover(host).compatible_path == "/sys/firmware/devicetree/base/compatible"


def test_masked_device_tree_needs_a_soc_hint(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("rk3588-drm")
    (host.root / "proc/device-tree").unlink()
    (host.root / "sys/firmware/devicetree/base/compatible").unlink()
    with pytest.raises(UnknownSocError, match="RKNN_NPU_SOC"):
        discover(host)
    rk3576 = soc_by_name("rk3576")
    assert discover(host, soc_hint=rk3576).soc == rk3576
    write(host.root, "/run/rknpu/compatible", b"rockchip,rk3588\0")
    replaced = discover(host, extra_compatible_paths=["/run/rknpu/compatible"])
    assert (replaced.soc.name, replaced.compatible_path) == ("rk3588", "/run/rknpu/compatible")
    assert discover(host, soc_hint=rk3576).compatible_path is None


def test_rknpu_symlink_to_render_node_is_not_the_misc_build(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("no-npu")
    link(host.root, "/dev/rknpu", "/dev/dri/renderD128")
    with pytest.raises(NpuNotFoundError):
        discover(host)


def test_fused_rk3582_counts_cores_from_the_driver(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("rk3588-drm")
    write(host.root, "/sys/kernel/debug/rknpu/load", "NPU load:  Core0:  3%, Core1:  0%,\n")
    info = discover(host)
    assert info.core_count == 2 and info.core_count_source.startswith("driver")


def test_live_load_and_frequency(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("rk3588-drm")
    info = discover(host)
    write(host.root, "/sys/kernel/debug/rknpu/load", "NPU load:  Core0: 45%, Core1:  0%, Core2: 429496%,\n")
    assert read_load(host, info) == (0.45, 0.0, 1.0)
    assert read_frequency(host, info) == 1_000_000_000


def test_unprivileged_view_blocks_debugfs(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("debugfs-unreadable")
    assert isinstance(host, UnprivilegedHostRoot)
    with pytest.raises(PermissionError):
        host.read_text("/sys/kernel/debug/rknpu/load")


@pytest.mark.parametrize(
    ("text", "loads"),
    [
        ("NPU load:  Core0:  0%, Core1:  0%, Core2:  0%,\n", (0.0, 0.0, 0.0)),
        ("NPU load:  Core0: 12%, Core1: 100%,\n", (0.12, 1.0)),
        ("NPU load:  7%\n", (0.07,)),
        ("NPU load:  Core0: 429496%, Core1: -3%, Core2: 50%,", (1.0, 0.0, 0.5)),
    ],
)
def test_parse_load(text: str, loads: tuple[float, ...]) -> None:
    assert parse_load(text) == loads


@pytest.mark.parametrize("text", ["", "garbage", "NPU load:", "Core0: x%"])
def test_parse_load_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_load(text)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("RKNPU driver: v0.9.8\n", "0.9.8"),
        ("0.9.6\n", "0.9.6"),
        ("[drm] Initialized rknpu 0.9.6 20240322 for fdab0000.npu on minor 1", "0.9.6"),
        ("RKNPU: Initialized RKNPU driver: v0.9.6 for 20240322", "0.9.6"),
        ("nothing", None),
    ],
)
def test_parse_driver_version(text: str, version: str | None) -> None:
    assert parse_driver_version(text) == version


def test_parse_frequency() -> None:
    assert parse_frequency("1000000000\n") == 1_000_000_000
    with pytest.raises(ValueError):
        parse_frequency("fast")
