"""The one output-path rule (`rknnlaunch._files.check_output`) and the one image reader
(`rknnlaunch.yolo.read_image`): what they refuse, before any work, and how they say it."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from rknnlaunch import UsageError
from rknnlaunch._files import PLOT_SUFFIXES, check_output
from rknnlaunch.yolo import MAX_IMAGE_PIXELS, check_image, image_header, read_image


def forged_png(width: int, height: int) -> bytes:
    """A valid PNG signature and IHDR chunk claiming ``width`` x ``height``, then one tiny IDAT."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    idat = zlib.compress(b"\0")
    body = struct.pack(">I", len(idat)) + b"IDAT" + idat + struct.pack(">I", zlib.crc32(b"IDAT" + idat))
    return b"\x89PNG\r\n\x1a\n" + chunk + body + b"\0\0\0\0IEND\xaeB`\x82"


def test_plot_suffixes_are_all_saved_by_the_installed_matplotlib() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure()
    try:
        supported = {f".{name}" for name in figure.canvas.get_supported_filetypes()}
    finally:
        plt.close(figure)
    assert set(PLOT_SUFFIXES) <= supported


def test_output_rule_refuses_each_bad_path_with_a_fix(tmp_path: Path) -> None:
    def refused(path: str | Path, **kwargs: object) -> UsageError:
        with pytest.raises(UsageError) as caught:
            check_output(path, "--plot", suffixes=PLOT_SUFFIXES, example="bench.png", **kwargs)  # type: ignore[arg-type]
        assert caught.value.fix and caught.value.exit_code == 2
        return caught.value

    assert "does not exist" in refused(tmp_path / "no" / "b.png").problem
    folder = refused(tmp_path)
    assert (
        "is a folder" in folder.problem
        and folder.fix == f"name a file in it, e.g. --plot {tmp_path / 'bench.png'}"
    )
    assert "'.xyz' is not a format" in refused(tmp_path / "out.xyz").problem
    assert "no extension" in refused(tmp_path / "out").problem  # matplotlib would write out.png
    (tmp_path / "file").write_text("")
    assert "is not a folder" in refused(tmp_path / "file" / "b.png").problem
    # Writability is a real access check; injected here so it is tested as root too.
    denied = refused(tmp_path / "b.png", access=lambda _path, _mode: False)
    assert "Permission denied" in denied.problem and "cannot write in" in denied.problem
    (tmp_path / "old.png").write_text("")
    mine = refused(tmp_path / "old.png", access=lambda path, _mode: Path(path).is_dir())
    assert "cannot overwrite it" in mine.problem
    check_output(tmp_path / "B.PNG", "--plot", suffixes=PLOT_SUFFIXES)  # case-insensitive
    check_output(None, "--json")
    check_output(tmp_path / "report", "--json")  # JSON: any name


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only folder")
def test_output_rule_with_a_real_read_only_folder(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(UsageError, match="Permission denied"):
            check_output(locked / "x.json", "--json")
    finally:
        locked.chmod(0o755)


def test_image_header_reads_each_format_opencv_writes(tmp_path: Path) -> None:
    cv2 = pytest.importorskip("cv2")
    image = np.zeros((37, 53, 3), np.uint8)
    for suffix, name in [
        (".png", "PNG"),
        (".jpg", "JPEG"),
        (".bmp", "BMP"),
        (".webp", "WebP"),
        (".tiff", "TIFF"),
        (".ppm", "PNM"),
    ]:
        ok, data = cv2.imencode(suffix, image)
        assert ok
        header = image_header(data.tobytes())
        assert header is not None and (header.format, header.width, header.height) == (name, 53, 37), suffix
        (tmp_path / f"x{suffix}").write_bytes(data.tobytes())
        assert read_image(tmp_path / f"x{suffix}").shape == (37, 53, 3)
    assert image_header(b"hello, a text file") is None
    assert image_header(b"\x89PNG\r\n\x1a\n\0\0") is None  # cut short: None, not an exception


def test_a_tiny_png_claiming_65535_squared_is_refused_before_decoding(tmp_path: Path) -> None:
    forged = tmp_path / "huge.png"
    forged.write_bytes(forged_png(65535, 65535))
    assert len(forged.read_bytes()) < 80
    with pytest.raises(UsageError) as caught:
        read_image(forged, "--image")
    assert (
        f"its PNG header claims 65535x65535 pixels (more than the {MAX_IMAGE_PIXELS:,}"
        in caught.value.problem
    )
    assert caught.value.fix is not None
    (tmp_path / "zero.png").write_bytes(forged_png(0, 10))
    with pytest.raises(UsageError, match="claims 0x10 pixels"):
        check_image(tmp_path / "zero.png")


def test_unreadable_image_says_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rknnlaunch._files as files

    picture = tmp_path / "secret.png"
    picture.write_bytes(forged_png(4, 4))

    def denied(path: object, mode: str = "r") -> object:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(files, "open", denied, raising=False)  # root reads mode 000; the rule is tested
    with pytest.raises(UsageError) as caught:
        read_image(picture)
    assert "Permission denied" in caught.value.problem and "chmod a+r" in (caught.value.fix or "")


def test_a_header_without_data_is_a_clear_decode_error(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    cut = tmp_path / "cut.png"
    cut.write_bytes(forged_png(64, 64)[:40])
    with pytest.raises(UsageError, match=r"header is there but the data is not"):
        read_image(cut)
