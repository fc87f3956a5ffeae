"""The /proc/device-tree/compatible redirect: in-process for open(), and its limits."""

from __future__ import annotations

import builtins
import io
import os
import pathlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rknnfile_builder import write_rknn
from rknnlite_fake import FakeNpu

import rknnlaunch
from fakehost import write
from rknnlaunch import RuntimeInitError
from rknnlaunch.npu import HostRoot, soc_by_name
from rknnlaunch.runtime._dtcompat import (
    COMPATIBLE_PATHS,
    install_redirect,
    readable,
    redirect_target,
    replacement_for,
    uninstall_redirect,
)
from rknnlaunch.settings._env import load_settings

HostFactory = Callable[[str], HostRoot]
needs_no_device_tree = pytest.mark.skipif(
    any(readable(p) for p in COMPATIBLE_PATHS), reason="this machine has a real device tree"
)


@pytest.fixture(autouse=True)
def no_redirect_left_behind() -> Iterator[None]:
    uninstall_redirect()
    yield
    uninstall_redirect()


def test_redirect_covers_the_ways_python_reads_a_file(tmp_path: Path) -> None:
    replacement = write(tmp_path, "compatible", b"radxa,rock-5b\0rockchip,rk3588\0")
    install_redirect(replacement)
    install_redirect(replacement)  # idempotent
    assert redirect_target() == str(replacement)
    for path in COMPATIBLE_PATHS:
        with open(path, "rb") as handle:
            assert handle.read().endswith(b"rockchip,rk3588\0")
        # pathlib reads: on Python < 3.11 they bypass io.open/os.open (pathlib's own accessor)
        assert Path(path).read_bytes().startswith(b"radxa")
        assert Path(path).read_text().endswith("rockchip,rk3588\0")
        with Path(path).open("rb") as handle:
            assert handle.read(5) == b"radxa"
        assert os.path.exists(path) and os.path.isfile(path) and os.access(path, os.R_OK)
        fd = os.open(path.encode(), os.O_RDONLY)
        os.close(fd)
    other = write(tmp_path, "other", "untouched")
    assert other.read_text() == "untouched"
    uninstall_redirect()
    assert redirect_target() is None
    assert builtins.open is io.open and not hasattr(builtins.open, "__wrapped__")
    accessor = getattr(pathlib, "_normal_accessor", None)  # Python < 3.11 only
    assert accessor is None or "open" not in vars(accessor)


@needs_no_device_tree
def test_replacement_is_only_used_when_needed(tmp_path: Path) -> None:
    replacement = write(tmp_path, "compatible", b"rockchip,rk3588\0")
    assert replacement_for("/run/rknpu/compatible", replacement) == str(replacement)
    assert replacement_for(None, replacement) is None
    assert replacement_for("/run/rknpu/compatible", tmp_path / "missing") is None


@needs_no_device_tree
def test_open_makes_rknnlite_see_the_plugin_file(host_factory: HostFactory, tmp_path: Path) -> None:
    host = host_factory("rk3588-drm")
    (host.root / "proc/device-tree").unlink()
    soc = soc_by_name("rk3588")
    assert soc is not None
    model = write_rknn(tmp_path / "m.rknn")
    npu = FakeNpu(soc, reads_device_tree=True)
    masked = load_settings({"RKNNLAUNCH_ROOT": str(host.root), "RKNN_NPU_SOC": "rk3588"})
    with pytest.raises(RuntimeInitError) as caught:
        rknnlaunch.open(model, settings=masked, rknnlite=npu.factory)
    assert caught.value.log_lines == ("E init_runtime: Please specify the target in init_runtime!",)
    assert caught.value.fix is not None and "RKNN_NPU_COMPATIBLE_FILE" in caught.value.fix

    write(host.root, "/run/rknpu/compatible", b"radxa,rock-5b\0rockchip,rk3588\0")
    provided = load_settings(
        {"RKNNLAUNCH_ROOT": str(host.root), "RKNN_NPU_COMPATIBLE_FILE": "/run/rknpu/compatible"}
    )
    with rknnlaunch.open(model, settings=provided, rknnlite=npu.factory) as runtime:
        assert runtime.backend == "npu"
    assert redirect_target() == str(host.root / "run/rknpu/compatible")
