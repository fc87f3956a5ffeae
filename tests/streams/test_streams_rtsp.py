"""A real RTSP server (GStreamer's, tests/streams/rtsp.py) in front of `Watcher`: credentials from the
environment and a netrc mapping, a 401 and a wrong path failing alone, no password in any output,
and a server stopped and started again mid-run with the stream resuming."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from streams.conftest import ClipMaker, free_port
from streams.rtsp import RtspServer, require_gstreamer

from rknnlaunch import Detector
from rknnlaunch.streams import Policy, Source, StreamEvent, StreamResult, Watcher

DetectorFactory = Callable[..., Detector]
PASSWORD = "s3cret-Pw"
WRONG = "wr0ng-Pw"


@pytest.fixture
def server(clip: ClipMaker) -> Iterator[RtspServer]:
    require_gstreamer()
    # 30 s of a small clip: every client gets its own pipeline from the start of the file
    rtsp = RtspServer(
        clip("h264", (320, 180), frames=300, fps=10), free_port(), ("/cam", "/cam2"), "admin", PASSWORD
    )
    rtsp.start()
    yield rtsp
    rtsp.stop()


def test_rtsp_credentials_from_env_and_file_and_failures_that_need_a_fix(
    server: RtspServer, detector_factory: DetectorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sources = [
        Source(server.url("/cam", "admin:${CAM_PW}"), name="env"),
        Source(server.url("/cam2"), name="netrc"),
        Source(server.url("/cam", f"admin:{WRONG}"), name="wrong-password"),
        Source(server.url("/nope", f"admin:{PASSWORD}"), name="wrong-path"),
    ]
    policy = Policy(stall_timeout=3.0, open_timeout=5.0)
    items: list[StreamResult | StreamEvent] = []
    with Watcher(
        sources,
        detector_factory(),
        policy=policy,
        environ={"CAM_PW": PASSWORD},
        credentials={"127.0.0.1": ("admin", PASSWORD)},
    ) as watcher:
        for item in watcher.results(duration=4.0):
            items.append(item)
        stats = watcher.stats()
    events = [item for item in items if isinstance(item, StreamEvent)]
    assert stats["env"].detected > 0 and stats["netrc"].detected > 0
    failed = {e.stream: e.reason for e in events if e.event == "failed"}
    assert set(failed) == {"wrong-password", "wrong-path"}
    assert "refused the credentials (401 Unauthorized)" in failed["wrong-password"]
    assert "--credentials-file" in failed["wrong-password"]
    assert "no such stream (404 Not Found)" in failed["wrong-path"]
    shown = "\n".join(
        [str(item.to_json()) for item in items]
        + [str(s.to_json()) for s in stats.values()]
        + [record.getMessage() for record in caplog.records]
        + [repr(source) for source in sources]
    )
    assert f"admin:***@127.0.0.1:{server.port}/nope" in shown
    assert PASSWORD not in shown and WRONG not in shown


@pytest.mark.slow
def test_a_restarted_rtsp_server_resumes_and_the_other_streams_go_on(
    server: RtspServer, clip: ClipMaker, detector_factory: DetectorFactory
) -> None:
    down_s = 5.0
    policy = Policy(stall_timeout=3.0, open_timeout=3.0, max_backoff=1.0)
    sources = [
        Source(server.url("/cam", f"admin:{PASSWORD}"), name="camera"),
        Source(str(clip("h264", (320, 180), frames=50, fps=10)), name="file", loop=True),
    ]
    times: dict[str, float] = {}
    file_results: list[float] = []
    camera_after: list[float] = []
    restarter: threading.Timer | None = None
    with Watcher(sources, detector_factory(), policy=policy) as watcher:
        camera_before = 0
        for item in watcher.results(duration=60.0):
            now = time.monotonic()
            if isinstance(item, StreamResult) and item.stream == "file":
                file_results.append(now)
            if item.stream != "camera":
                continue
            if isinstance(item, StreamResult):
                if "stopped" not in times:
                    camera_before += 1
                    if camera_before == 10:
                        server.stop()
                        times["stopped"] = now
                        restarter = threading.Timer(
                            down_s, lambda: (server.start(), times.setdefault("restarted", time.monotonic()))
                        )
                        restarter.start()
                elif "restarted" in times:
                    camera_after.append(now)
                    if len(camera_after) >= 10:
                        watcher.stop()
            elif item.event in ("reconnecting", "stalled") and "stopped" in times:
                times.setdefault("noticed", now)
            elif item.event == "live" and "restarted" in times:
                times.setdefault("live_again", now)
        stats = watcher.stats()
    if restarter is not None:
        restarter.join()
    assert {"stopped", "noticed", "restarted", "live_again"} <= set(times), times
    resumed_s = camera_after[0] - times["restarted"]
    print(f"live again {times['live_again'] - times['restarted']:.2f} s after the restart")
    assert resumed_s < 3.0, f"results resumed {resumed_s:.2f} s after the restart"
    assert stats["camera"].reconnects >= 1 and stats["camera"].state == "live"
    # the file stream's results went on while the camera was away
    since = max(file_results[0], times["stopped"] - down_s)
    before = [t for t in file_results if since <= t < times["stopped"]]
    during = [t for t in file_results if times["stopped"] <= t < times["restarted"]]
    rate_before = len(before) / (times["stopped"] - since)
    rate_during = len(during) / (times["restarted"] - times["stopped"])
    print(
        f"camera resumed {resumed_s:.2f} s after the restart; "
        f"file FPS {rate_before:.1f} before, {rate_during:.1f} during"
    )
    assert rate_during >= 0.8 * rate_before
