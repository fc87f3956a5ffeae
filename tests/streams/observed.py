"""Helpers for the live view's and the metrics' tests: a stand-in for a `Watcher`'s names and figures,
results with a chosen frame, solid-colour test videos (PyAV), and `rknnlaunch watch` run as a
child process whose servers are found from its stderr line."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from awaiting import sigint_as_in_a_terminal

from rknnlaunch.pipeline import StageTimings
from rknnlaunch.streams import StreamResult, StreamStats
from rknnlaunch.yolo import Detections


@dataclass
class FakeStreams:
    """What `LiveView` and `StreamMetrics` read of a Watcher (`WatchedStreams`): names and figures."""

    names: list[str]
    figures: dict[str, StreamStats] = field(default_factory=dict)

    def stats(self) -> dict[str, StreamStats]:
        return {name: self.figures.get(name, stats_for(name)) for name in self.names}


def stats_for(name: str, **values: Any) -> StreamStats:
    base: dict[str, Any] = {
        "stream": name,
        "source": name + ".mp4",
        "state": "connecting",
        "decoder": "",
        "decoded": 0,
        "skipped": 0,
        "detected": 0,
        "dropped": 0,
        "reconnects": 0,
        "corrupt": 0,
        "decode_ms": 0.0,
        "convert_ms": 0.0,
        "seconds": 0.0,
    }
    base.update(values)
    return StreamStats(**base)


def result_for(
    name: str, image: np.ndarray[Any, Any], frame: int = 0, latency_ms: float = 20.0
) -> StreamResult:
    """A result of ``name`` carrying ``image`` and one box (so the drawing path runs)."""
    detections = Detections(
        boxes=np.array([[10, 10, 60, 60]], np.float32),
        scores=np.array([0.9], np.float32),
        class_ids=np.array([0], np.int64),
    )
    return StreamResult(
        stream=name,
        frame=frame,
        pts=frame / 25,
        arrival=time.monotonic(),
        latency_ms=latency_ms,
        dropped=0,
        detections=detections,
        timings=StageTimings(0.0, 0.0, 0.0, 0.0, 0.0),
        context="CPU test",
        image=image,
    )


def solid_video(
    path: Path, bgr: tuple[int, int, int], size: tuple[int, int] = (320, 240), frames: int = 20
) -> Path:
    """A short H.264 clip (PyAV, libx264) whose every frame is one colour: found again in a screenshot."""
    import av

    width, height = size
    image = np.zeros((height, width, 3), np.uint8)
    image[:] = bgr
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        assert isinstance(stream, av.video.stream.VideoStream)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, 10)
        stream.options = {"preset": "ultrafast"}
        for _ in range(frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="bgr24")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def get(url: str, method: str = "GET", timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; an HTTP error status is an answer, not an exception."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, dict(answer.headers.items()), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers.items()), error.read()


class WatchProcess:
    """``rknnlaunch watch ARGS`` as a child process (stdout and stderr to files in ``folder``)."""

    def __init__(self, folder: Path, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.stdout_path = folder / "watch.stdout"
        self.stderr_path = folder / "watch.stderr"
        self._stdout = self.stdout_path.open("wb")
        self._stderr = self.stderr_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rknnlaunch", "watch", *args],
            stdout=self._stdout,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=sigint_as_in_a_terminal,  # the test stops it with SIGINT
        )

    def address(self, what: str, deadline_s: float = 120.0) -> str:
        """``http://host:port`` from the stderr line ``<what> on http://host:port/...`` (the
        servers are bound before that line is written)."""
        pattern = re.compile(re.escape(what) + r" on (http://[^/\s]+)/")
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            found = pattern.search(self.stderr_path.read_text(errors="replace"))
            if found:
                return found.group(1)
            if self.process.poll() is not None:
                raise AssertionError(
                    f"watch exited {self.process.returncode}: {self.stderr_path.read_text()}"
                )
            time.sleep(0.1)  # a child's file: there is no event to wait on
        raise AssertionError(f"no '{what} on' line in time: {self.stderr_path.read_text()}")

    def wait(self, timeout: float = 120.0) -> int:
        code = self.process.wait(timeout)
        self._stdout.close()
        self._stderr.close()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._stdout.close()
        self._stderr.close()


def until(check: Any, what: str, deadline_s: float = 120.0) -> Any:
    """Poll ``check()`` (an HTTP page of a child process) until it returns something true."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not in {deadline_s} s: {what}")
