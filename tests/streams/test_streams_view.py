"""The live view (`LiveView`, ``watch --view``): its pages, read-only, a port in use as one line, and
(slow, real) headless Chromium showing every stream's picture."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streams.observed import FakeStreams, WatchProcess, get, result_for, solid_video, stats_for, until

from rknnlaunch import UsageError
from rknnlaunch.streams import LiveView, StreamEvent, StreamMetrics, parse_address

cv2 = pytest.importorskip("cv2")


def decode_jpeg(data: bytes) -> np.ndarray[Any, Any]:
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None, data[:40]
    return image


@pytest.fixture
def view() -> Iterator[tuple[LiveView, FakeStreams, str]]:
    streams = FakeStreams(["door", "<yard>"])
    with LiveView("127.0.0.1:0", streams) as served:
        yield served, streams, f"http://127.0.0.1:{served.port}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":8080", ("0.0.0.0", 8080)),
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("[::1]:9102", ("::1", 9102)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_addresses_in_the_servers_forms(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text, "--view") == expected


@pytest.mark.parametrize("text", ["8080", "host:", ":65536", "a/b:80", "admin@cam:80", ":http"])
def test_a_bad_address_is_one_line_naming_the_flag(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_address(text, "--view")
    error = caught.value
    assert "\n" not in error.problem and "\n" not in (error.fix or "\n")
    assert error.problem == f"--view {text!r} is not host:port"


@pytest.mark.parametrize(("server", "flag"), [(LiveView, "--view"), (StreamMetrics, "--metrics-address")])
def test_a_port_in_use_is_one_line_naming_the_flag_and_the_fix(server: Any, flag: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError) as caught:
            server(f"127.0.0.1:{port}", FakeStreams(["door"]), flag=flag)
    error = caught.value
    assert "\n" not in error.problem and "\n" not in (error.fix or "\n")
    assert error.problem == f"{flag} 127.0.0.1:{port}: port {port} is in use"
    assert error.fix == f"give {flag} another port, or stop what listens on {port}"


def test_the_page_lists_every_stream_escaped_with_its_figures(
    view: tuple[LiveView, FakeStreams, str],
) -> None:
    served, streams, base = view
    streams.figures["door"] = stats_for("door", state="live", dropped=7, source="rtsp://admin:***@door/live")
    served.on_event(StreamEvent("<yard>", "reconnecting", "cannot reach the source", "yard.mp4", 0.0))
    status, headers, body = get(base + "/")
    page = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "&lt;yard&gt;" in page and "<yard>" not in page
    assert 'src="/frame/0.jpg"' in page and 'src="/frame/1.jpg"' in page
    assert "7 dropped" in page and "rtsp://admin:***@door/live" in page
    assert "cannot reach the source" in page
    rows = {row["stream"]: row for row in served.figures()}
    assert rows["door"]["state"] == "live"
    assert rows["<yard>"]["state"] == "connecting"  # the figures' state wins over the last event
    assert rows["<yard>"]["reason"] == "cannot reach the source"


def test_a_frame_is_the_newest_result_drawn_and_a_placeholder_before(
    view: tuple[LiveView, FakeStreams, str],
) -> None:
    served, _, base = view
    status, headers, body = get(base + "/frame/0.jpg")
    assert status == 200 and headers["Content-Type"] == "image/jpeg"
    assert decode_jpeg(body).shape == (180, 320, 3)  # the grey placeholder
    green = np.zeros((120, 160, 3), np.uint8)
    green[:] = (0, 200, 0)  # class 0's box is red
    served.on_result(result_for("door", green, frame=3))
    shown = decode_jpeg(get(base + "/frame/0.jpg")[2])
    assert shown.shape == (120, 160, 3)
    assert np.abs(shown[100, 140].astype(int) - (0, 200, 0)).max() < 20  # the frame
    assert np.abs(shown[35, 10].astype(int) - (0, 200, 0)).max() > 80  # the box drawn on it
    assert served.figures()[0]["frame"] == 3
    # a big frame is scaled down before encoding
    served.on_result(result_for("door", np.zeros((1080, 1920, 3), np.uint8), frame=4))
    assert decode_jpeg(get(base + "/frame/0.jpg")[2]).shape == (720, 1280, 3)
    assert served.figures()[0]["fps"] > 0  # two results within the FPS window
    assert served.figures()[1]["fps"] == 0 and served.figures()[1]["frame"] is None


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_the_view_serves_read_only(view: tuple[LiveView, FakeStreams, str], method: str) -> None:
    status, _, _ = get(view[2] + "/", method=method)
    assert status == 501


@pytest.mark.parametrize("path", ["/frame/2.jpg", "/frame/x.jpg", "/etc/passwd", "/../streams.json"])
def test_unknown_paths_are_not_found(view: tuple[LiveView, FakeStreams, str], path: str) -> None:
    assert get(view[2] + path)[0] == 404


def test_the_script_and_the_figures_are_served(view: tuple[LiveView, FakeStreams, str]) -> None:
    status, headers, body = get(view[2] + "/view.js")
    assert status == 200 and b"setInterval(refresh, 500)" in body
    status, headers, body = get(view[2] + "/streams.json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert b'"stream": "door"' in body


# --- real: headless Chromium on `rknnlaunch watch --view` -------------------------------------

COLOURS = {"red": (0, 0, 230), "green": (0, 200, 0), "blue": (230, 0, 0), "yellow": (0, 220, 220)}
"""Each stream's frames are one colour (BGR); each is looked for in the screenshot."""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(url: str, folder: Path, size: tuple[int, int] = (1280, 1000)) -> np.ndarray[Any, Any]:
    browser = chromium()
    assert browser is not None
    png = folder / "view.png"
    command = [
        browser,
        "--headless",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={folder / 'chromium-profile'}",
        f"--screenshot={png}",
        f"--window-size={size[0]},{size[1]}",
        url,
    ]
    if os.geteuid() == 0:
        command.insert(2, "--no-sandbox")  # Chromium refuses root without it (CI runs as root)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]
    image = cv2.imread(str(png))
    assert image is not None
    return image


def colour_box(
    image: np.ndarray[Any, Any], bgr: tuple[int, int, int], tolerance: int = 40
) -> tuple[int, int, int]:
    """(pixels of that colour, width, height of their bounding box)."""
    near = np.all(np.abs(image.astype(np.int16) - np.array(bgr, np.int16)) <= tolerance, axis=2)
    ys, xs = np.nonzero(near)
    if len(xs) == 0:
        return 0, 0, 0
    return int(near.sum()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)


@pytest.mark.slow
def test_chromium_shows_every_streams_picture(tmp_path: Path) -> None:
    if chromium() is None:
        pytest.skip("Debian's chromium is not installed (images/prepare-host.sh installs it)")
    videos = [solid_video(tmp_path / f"{name}.mp4", bgr) for name, bgr in COLOURS.items()]
    watch = WatchProcess(
        tmp_path,
        [*map(str, videos), "--loop", "--rate", "2", "--duration", "120", "--view", "127.0.0.1:0"],
    )
    try:
        base = watch.address("live view")
        until(
            lambda: all(row["frame"] is not None for row in json.loads(get(base + "/streams.json")[2])),
            "every stream has a detected frame",
        )
        image = screenshot(base + "/", tmp_path)
    finally:
        watch.kill()
    # the page's images are 4 columns of ~310 px or 2-3 per row of ~410-620 px; every stream's
    # picture is a solid block of its colour at least 250 x 180 px (the frames are 4:3)
    found = {}
    for name, bgr in COLOURS.items():
        pixels, width, height = colour_box(image, bgr)
        found[name] = (pixels, width, height)
    print("screenshot colour blocks (pixels, width, height):", found)
    for name, (pixels, width, height) in found.items():
        assert width >= 250 and height >= 180, (name, found)
        assert pixels >= 0.9 * width * height, (name, found)  # one solid block, not scattered pixels


def test_watch_with_its_view_port_in_use_stops_before_decoding_with_one_line(
    tmp_path: Path,
) -> None:
    video = solid_video(tmp_path / "red.mp4", COLOURS["red"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        watch = WatchProcess(tmp_path, [str(video), "--backend=cpu", f"--view=127.0.0.1:{port}"])
        try:
            assert watch.wait(120) == 2
        finally:
            watch.kill()
    errors = watch.stderr_path.read_text()
    assert errors == (
        f"rknnlaunch: error: --view 127.0.0.1:{port}: port {port} is in use\n"
        f"  fix: give --view another port, or stop what listens on {port}\n"
    )
    assert watch.stdout_path.read_text() == ""


@pytest.mark.parametrize("flag", ["--view", "--metrics-address"])
def test_watch_with_a_bad_address_stops_before_loading_anything(tmp_path: Path, flag: str) -> None:
    watch = WatchProcess(tmp_path, [str(tmp_path / "missing.mp4"), f"{flag}=8080"])
    try:
        assert watch.wait(120) == 2
    finally:
        watch.kill()
    assert watch.stderr_path.read_text().startswith(f"rknnlaunch: error: {flag} '8080' is not host:port\n")
