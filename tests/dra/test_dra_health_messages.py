"""The health message the kubelet shows in pod status names what broke: the ResourceManager's scan
(a missing device node) or the functional probe's verdict, per core."""

from __future__ import annotations

from pathlib import Path

from fakehost import make_host
from rknnlaunch.npu import HostRoot
from rknpu_dra_driver.kubelet._health import HealthBoard
from rknpu_node import NullEvents, ResourceManager


def _board(tmp_path: Path) -> tuple[ResourceManager, HealthBoard]:
    make_host("rk3588-drm", tmp_path / "host")
    resources = ResourceManager(HostRoot(tmp_path / "host"), NullEvents())
    resources.scan()
    return resources, HealthBoard(resources, "node-a")


def _messages(board: HealthBoard) -> dict[str, str]:
    return {record.device: record.message for record in board.current()}


def test_a_failed_probe_is_named_in_the_message(tmp_path: Path) -> None:
    resources, board = _board(tmp_path)
    assert "healthy" in _messages(board)["npu-core-1"]
    resources.set_probe_failures({1: "the probe hung after 5 s"}, pending=[2])
    messages = _messages(board)
    hung = "failed its probe: the probe hung after 5 s"
    assert messages["npu-core-1"] == f"NPU core 1: core 1 not usable: {hung}"
    assert messages["npu-core-2"] == "NPU core 2: core 2 not usable: waits for its first probe"
    assert messages["npu-cores-0-1-2"] == (
        "NPU cores 0, 1, 2: core 1 not usable: failed its probe: the probe hung after 5 s; "
        "core 2 not usable: waits for its first probe"
    )
    assert "healthy" in messages["npu-core-0"]
    board.close()


def test_a_missing_device_node_is_named_in_the_message(tmp_path: Path) -> None:
    resources, board = _board(tmp_path)
    render = tmp_path / "host/dev/dri/renderD129"
    render.rename(render.with_suffix(".gone"))
    resources.scan()
    message = _messages(board)["npu-core-0"]
    assert message.startswith("NPU core 0: core 0 not usable: device node(s) missing: ")
    assert "renderD129" in message
    board.close()
