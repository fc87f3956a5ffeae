"""Hardware or software decode (`choose_decoder`): the decoder names are those pyav-rkmpp 18.1.0.post2
lists (`h264_rkmpp`, `hevc_rkmpp`, seen in a Debian 12 arm64 root under qemu), /dev/mpp_service is
looked for under the host root as the NPU's nodes are (a plain file stands in for the node)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rknnlaunch.streams import HARDWARE_DECODERS, choose_decoder

PYAV_RKMPP = {"h264", "hevc", "mjpeg", "h264_rkmpp", "hevc_rkmpp", "libx264"}
UPSTREAM_AV = {"h264", "hevc", "mjpeg", "libx264", "libx265"}


@pytest.fixture
def board(tmp_path: Path) -> Path:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "mpp_service").write_bytes(b"")
    return tmp_path


def test_hardware_when_pyav_rkmpp_and_the_node_are_there(board: Path) -> None:
    assert HARDWARE_DECODERS == {"h264": "h264_rkmpp", "hevc": "hevc_rkmpp"}
    assert choose_decoder("h264", PYAV_RKMPP, board) == (
        "h264_rkmpp",
        "hardware h264_rkmpp decode (/dev/mpp_service)",
    )
    assert choose_decoder("hevc", PYAV_RKMPP, board)[0] == "hevc_rkmpp"


def test_software_with_the_reason_and_the_fix(board: Path, tmp_path: Path) -> None:
    decoder, why = choose_decoder("h264", UPSTREAM_AV, board)
    assert decoder is None and "this PyAV has no h264_rkmpp" in why and "rknnlaunch[video]" in why
    decoder, why = choose_decoder("mjpeg", PYAV_RKMPP, board)
    assert decoder is None and "H.264 and H.265 only" in why
    empty = tmp_path / "no-node"
    empty.mkdir()
    decoder, why = choose_decoder("h264", PYAV_RKMPP, empty)
    assert decoder is None and "cannot open /dev/mpp_service (No such file or directory)" in why
    assert "docs/streams.md#hardware-decode" in why


@pytest.mark.skipif(os.geteuid() == 0, reason="root opens a mode-0 file anyway")
def test_a_node_this_user_may_not_open_is_software_with_the_reason(board: Path) -> None:
    (board / "dev" / "mpp_service").chmod(0)
    decoder, why = choose_decoder("hevc", PYAV_RKMPP, board)
    assert decoder is None and "(Permission denied)" in why
