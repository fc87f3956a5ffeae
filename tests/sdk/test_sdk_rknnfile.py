""".rknn header parsing: hand-built files, truncations, foreign files, real toolkit output when available."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rknnfile_builder import flatbuffer_block, rknn_bytes, write_rknn

from rknnlaunch import ModelError
from rknnlaunch.cli._main import main
from rknnlaunch.model._rknnfile import parse_rknn, read_rknn
from rknnlaunch.npu import version_tuple

GOOD = rknn_bytes(version="2.3.2+81f21f4d", targets=("rk3588",))


def test_hand_built_header_and_metadata() -> None:
    info = parse_rknn(GOOD, "y.rknn")
    assert info.format_version == 6
    assert info.toolkit_version == "2.3.2+81f21f4d"
    assert info.target_platforms == ("rk3588",)
    # As real files: the NCHW graph shape, exchanged NHWC (docs/hardware.md#real-rknn-headers)
    assert [t.shape for t in info.inputs] == [(1, 3, 640, 640)]
    assert [t.describe() for t in info.inputs] == ["images [1x640x640x3] NHWC int8"]
    assert [(t.name, t.shape) for t in info.outputs] == [("output0", (1, 6, 8400))]
    assert info.source_platform == "ONNX"


def test_old_format_has_a_24_byte_header() -> None:
    info = parse_rknn(rknn_bytes(format_version=1, version="1.7.1", targets=("rk3566",)))
    assert info.format_version == 1 and info.target_platforms == ("rk3566",)


@pytest.mark.parametrize("cut", [0, 3, 10, 23, 40, 63, 64, 100, len(GOOD) - 30, len(GOOD) - 1])
def test_truncated_files_are_clear_errors(cut: int) -> None:
    with pytest.raises(ModelError) as caught:
        parse_rknn(GOOD[:cut], "cut.rknn")
    message = str(caught.value)
    assert "cut.rknn" in message and "fix:" in message
    assert "truncated" in message or "empty" in message


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(GOOD)), noise=st.binary(max_size=64))
def test_no_prefix_or_garbage_raises_anything_but_model_error(cut: int, noise: bytes) -> None:
    for data in (GOOD[:cut], GOOD[:cut] + noise, b"RKNN" + noise, noise):
        with contextlib.suppress(ModelError):
            parse_rknn(data)


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"\x08\x07\x12\x07pytorch\x1a\x052.1.0" + b"\x00" * 64, "an ONNX model"),
        (b"PK\x03\x04" + b"\x00" * 64, "zip archive"),
        (b"<!DOCTYPE html><html>" + b" " * 64, "HTML"),
        (b"version https://git-lfs.github.com/spec/v1\n" + b" " * 40, "Git LFS pointer"),
        (b"\x7fELF" + b"\x00" * 64, "ELF"),
    ],
)
def test_foreign_files_say_what_they_are(data: bytes, kind: str) -> None:
    with pytest.raises(ModelError, match=kind):
        parse_rknn(data, "model.rknn")


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        read_rknn(tmp_path / "nope.rknn")
    with pytest.raises(ModelError, match="is a folder"):
        read_rknn(tmp_path)
    (tmp_path / "empty.rknn").write_bytes(b"")
    with pytest.raises(ModelError, match="empty file"):
        read_rknn(tmp_path / "empty.rknn")


def test_version_tuple_reads_toolkit_versions() -> None:
    assert version_tuple("2.3.2+81f21f4d") == (2, 3, 2)
    assert version_tuple("v2.1.0b3") == (2, 1, 0)
    assert version_tuple("x") == ()


def test_model_inspect_prints_the_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_rknn(tmp_path / "yolo.rknn", version="2.5.0", targets=("rk3576",))
    assert main(["model", "inspect", str(model)]) == 0
    out = capsys.readouterr().out
    assert "toolkit version  2.5.0" in out and "target platform  rk3576" in out
    assert "input 0          images [1x640x640x3] NHWC int8" in out
    assert main(["model", "inspect", "--json", str(model)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["toolkit_version"] == "2.5.0" and data["outputs"][0]["shape"] == [1, 6, 8400]


def test_model_inspect_on_a_foreign_file_fails_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "model.rknn"
    bad.write_bytes(b"\x08\x07\x12\x07pytorch" + b"\x00" * 80)
    assert main(["model", "inspect", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "is not an .rknn model: it looks like an ONNX model" in err and "Traceback" not in err
    assert main(["model", "inspect"]) == 2


def test_a_large_model_is_not_read_whole(tmp_path: Path) -> None:
    """Only the header and the trailing metadata are touched: a (sparse) 1 GiB block costs nothing."""
    small = rknn_bytes(block=b"")
    header, trailer = small[:64], small[64:]
    block = 1 << 30
    model = tmp_path / "big.rknn"
    with model.open("wb") as handle:
        handle.write(header[:16] + block.to_bytes(8, "little") + header[24:])
        handle.write(flatbuffer_block({}))  # the root table a real block starts with; the rest is a hole
        handle.seek(64 + block)
        handle.write(trailer)
    info = read_rknn(model)
    assert info.size == 64 + block + len(trailer) and info.target_platforms == ("rk3588",)


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "model.rknn"
    os.mkfifo(fifo)
    with pytest.raises(ModelError, match="not a regular file"):
        read_rknn(fifo)


def test_a_closed_pipe_is_no_traceback(tmp_path: Path) -> None:
    """`rknnlaunch model inspect --json M | head -1`: the reader leaves early; no traceback, exit 141."""
    model = write_rknn(tmp_path / "m.rknn")
    process = subprocess.Popen(
        [sys.executable, "-m", "rknnlaunch", "model", "inspect", "--json", str(model)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    error = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141
    assert "Traceback" not in error


@pytest.mark.skipif(
    importlib.util.find_spec("rknn") is None, reason="rknn-toolkit2 is not installed (optional)"
)
def test_real_toolkit2_output(tmp_path: Path) -> None:  # pragma: no cover - needs rknn-toolkit2 (x86, torch)
    import onnx
    from onnx import TensorProto, helper
    from rknn.api import RKNN

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    onnx_path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), onnx_path)
    rknn = RKNN()
    rknn.config(target_platform="rk3588")
    assert rknn.load_onnx(model=str(onnx_path)) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / "relu.rknn")) == 0
    rknn.release()
    info = read_rknn(tmp_path / "relu.rknn")
    assert info.format_version >= 6 and info.target_platforms == ("rk3588",)
    assert info.toolkit_version and version_tuple(info.toolkit_version) >= (1, 5)


@pytest.mark.parametrize("filler", [b"\xaa", b"\0"])
def test_overwritten_model_block_is_corrupt_not_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], filler: bytes
) -> None:
    """Bytes 64-200 overwritten (issue 27): the tensors' I/O info vanished silently and `model
    inspect` and `doctor --model` said OK; now the file is named corrupt, exit 1, with a fix."""
    data = bytearray(rknn_bytes())
    assert parse_rknn(bytes(data)).inputs[0].layout == "NHWC"
    data[64:200] = filler * 136
    model = tmp_path / "m.rknn"
    model.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"m\.rknn is corrupt: its model block \(bytes 64\.\.324\)"):
        read_rknn(model)
    assert main(["model", "inspect", str(model)]) == 1
    err = capsys.readouterr().err
    assert "is corrupt" in err and "fix: copy or download it again" in err
    assert main(["doctor", "--model", str(model), "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  model" in out and "is corrupt" in out
