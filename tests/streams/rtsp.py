"""Runs tests/streams/rtsp_server.py (GStreamer's RTSP server) as a child of Debian's python3, on
127.0.0.1 and a free port, and stops and starts it again on the same port."""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from functools import cache
from pathlib import Path

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"  # python3-gi is built for Debian's python3, not the test venv
SERVER = Path(__file__).with_name("rtsp_server.py")
PACKAGES = (
    "gstreamer1.0-rtsp gir1.2-gst-rtsp-server-1.0 python3-gi "
    "gstreamer1.0-plugins-good gstreamer1.0-plugins-bad"
)
_PROBE = (
    "import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0');"
    "from gi.repository import Gst, GstRtspServer; Gst.init(None);"
    "names = ('filesrc', 'qtdemux', 'h264parse', 'rtph264pay');"
    "missing = [e for e in names if not Gst.ElementFactory.find(e)];"
    "print(' '.join(missing))"
)


@cache
def missing_gstreamer() -> str | None:
    """Why GStreamer's RTSP server cannot run here (None: it can)."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"no {SYSTEM_PYTHON}"
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["cannot import it"])[-1]
    if done.stdout.strip():
        return f"GStreamer elements missing: {done.stdout.strip()}"
    return None


def require_gstreamer() -> None:
    reason = missing_gstreamer()
    if reason is not None:
        pytest.skip(
            f"GStreamer's RTSP server is not usable ({reason}): "
            f"apt-get install {PACKAGES} (images/prepare-host.sh)"
        )


class RtspServer:
    """One RTSP server child serving ``clip`` at ``rtsp://127.0.0.1:PORT/<path>`` for each path."""

    def __init__(
        self,
        clip: Path,
        port: int,
        paths: tuple[str, ...] = ("/cam",),
        user: str | None = None,
        password: str = "",
    ) -> None:
        self.clip, self.port, self.paths, self.user, self.password = clip, port, paths, user, password
        self.process: subprocess.Popen[str] | None = None

    def url(self, path: str = "/cam", userinfo: str = "") -> str:
        return f"rtsp://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}{path}"

    def start(self, timeout: float = 30.0) -> None:
        command = [SYSTEM_PYTHON, str(SERVER), "--port", str(self.port), "--file", str(self.clip)]
        for path in self.paths:
            command += ["--path", path]
        env = {"PATH": "/usr/bin:/bin", "RTSP_TEST_PASSWORD": self.password}
        if self.user:
            command += ["--user", self.user, "--password-env", "RTSP_TEST_PASSWORD"]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.process = process
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if selector.select(deadline - time.monotonic()):
                    line = process.stdout.readline()
                    if line.strip() == "ready":
                        return
                    if not line:  # exited before listening
                        break
        process.kill()
        _, errors = process.communicate(timeout=10)
        raise AssertionError(f"the RTSP server did not start: {errors.strip()}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=10)
