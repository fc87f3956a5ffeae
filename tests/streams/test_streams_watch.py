"""`rknnlaunch.streams.Watcher` on real PyAV decodes of clips made at test time, over a `Detector` on
the simulated RK3588 NPU: what comes out, newest-frame-only, turns, rates, loops, failures."""

from __future__ import annotations

import itertools
import logging
import socket
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from awaiting import PATIENCE
from streams.conftest import ClipMaker, free_port

from rknnlaunch import Detector, DetectResult
from rknnlaunch.streams import Policy, Source, StreamEvent, StreamResult, Watcher

DetectorFactory = Callable[..., Detector]
FAST = Policy(stall_timeout=1.0, open_timeout=1.0, initial_backoff=0.05, max_backoff=0.2, connect_attempts=2)


def collect(watcher: Watcher, duration: float | None = None) -> tuple[list[StreamResult], list[StreamEvent]]:
    results: list[StreamResult] = []
    events: list[StreamEvent] = []
    for item in watcher.results(duration):
        (results if isinstance(item, StreamResult) else events).append(item)
    return results, events


def states(events: list[StreamEvent], stream: str) -> list[str]:
    return [event.event for event in events if event.stream == stream]


def test_h264_720p_and_h265_1080p_are_decoded_and_detected(
    clip: ClipMaker, detector_factory: DetectorFactory
) -> None:
    h264 = clip("h264", (1280, 720), frames=25)
    hevc = clip("hevc", (1920, 1080), frames=10)
    with Watcher([str(h264), Source(str(hevc), name="big")], detector_factory(), policy=FAST) as watcher:
        results, events = collect(watcher)
        stats = watcher.stats()
    assert watcher.names == [h264.stem, "big"]
    for name, size, frames in ((h264.stem, (720, 1280, 3), 25), ("big", (1080, 1920, 3), 10)):
        assert states(events, name) == ["connecting", "live", "ended"]
        live = next(e for e in events if e.stream == name and e.event == "live")
        assert "software" in live.reason and ("h264" in live.reason or "hevc" in live.reason)
        mine = [r for r in results if r.stream == name]
        assert mine and all(r.image is not None and r.image.shape == size for r in mine)
        assert [r.frame for r in mine] == sorted(r.frame for r in mine)
        pts = [r.pts for r in mine]
        assert all(p is not None for p in pts) and pts == sorted(pts)  # type: ignore[type-var]
        assert all(len(r.detections) == 2 and r.latency_ms > 0 and r.context.startswith("NPU") for r in mine)
        figures = stats[name]
        assert figures.decoded == frames and figures.state == "ended"
        assert (
            figures.detected == len(mine) and figures.detected + figures.dropped + figures.skipped == frames
        )
        assert sum(r.dropped for r in mine) == figures.dropped
        assert figures.decoder in ("software h264", "software hevc")


def test_busy_cores_keep_only_the_newest_frame(clip: ClipMaker, detector_factory: DetectorFactory) -> None:
    # One core at 100 ms a frame against a 25 FPS clip: most frames must be dropped, none queued.
    source = clip("h264", (320, 180), frames=50)
    with Watcher([str(source)], detector_factory(100.0, cores=[0]), in_flight=1) as watcher:
        results, _ = collect(watcher)
        figures = watcher.stats()[source.stem]
    assert figures.decoded == 50 and figures.dropped >= 20
    assert figures.detected + figures.dropped == 50 and sum(r.dropped for r in results) == figures.dropped
    # no queue: a frame waits at most for the frame ahead of it, never for a backlog (50 x 100 ms)
    assert max(r.latency_ms for r in results) < 1000


def test_streams_take_turns_on_busy_cores(clip: ClipMaker, detector_factory: DetectorFactory) -> None:
    source = clip("h264", (320, 180), frames=50)
    sources = [Source(str(source), name=f"cam{i}", loop=True) for i in range(3)]
    with Watcher(sources, detector_factory(30.0, cores=[0]), in_flight=1) as watcher:
        # until the three have had 30 turns between them (an event, not 2.5 s that load can eat)
        for _ in watcher.results(120.0):
            if sum(s.detected for s in watcher.stats().values()) >= 30:
                break
        stats = watcher.stats()
    detected = [stats[f"cam{i}"].detected for i in range(3)]
    assert min(detected) > 0 and max(detected) <= 1.5 * min(detected), detected


class GatedDetector:
    """A `Detector` whose results the test hands out one at a time: each submitted frame runs, but
    its Future resolves only on `release_one`; counts the frames submitted and the most held at once."""

    def __init__(self, inner: Detector) -> None:
        self.inner = inner
        self.size = inner.size
        self._cond = threading.Condition()
        self._held: deque[tuple[Future[DetectResult], Future[DetectResult]]] = deque()
        self.submitted = 0
        self.peak = 0
        self._open = False

    def submit(self, frame: Any, index: int | None = None, dropped: int = 0) -> Future[DetectResult]:
        ran = self.inner.submit(frame, index, dropped)
        with self._cond:
            self.submitted += 1
            if self._open:
                return ran
            shown: Future[DetectResult] = Future()
            self._held.append((ran, shown))
            self.peak = max(self.peak, len(self._held))
            self._cond.notify_all()
            return shown

    def wait_submitted(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.submitted >= count, PATIENCE), (count, self.submitted)

    def _pass(self, ran: Future[DetectResult], shown: Future[DetectResult]) -> None:
        # Outside the lock: resolving runs the watcher's callback, which may submit the next frame.
        shown.set_result(ran.result(PATIENCE))

    def release_one(self) -> None:
        with self._cond:
            ran, shown = self._held.popleft()
        self._pass(ran, shown)

    def open(self) -> None:
        """Release every held frame and hold no more (the watch can then end)."""
        with self._cond:
            self._open = True
            held, self._held = list(self._held), deque()
        for ran, shown in held:
            self._pass(ran, shown)


def test_one_frame_per_context_in_flight_by_default(
    clip: ClipMaker, detector_factory: DetectorFactory
) -> None:
    # Six looping streams always have a frame waiting; the detector has 3 contexts. The watcher
    # submits one frame per context and no more: a fourth would wait in the detector's queue, where
    # a newer frame of its stream could not replace it. Each release lets exactly one more in.
    source = clip("h264", (320, 180), frames=25)
    gated = GatedDetector(detector_factory())
    assert gated.size == 3
    sources = [Source(str(source), name=f"cam{i}", loop=True) for i in range(6)]
    with Watcher(sources, gated, keep_images=False) as watcher:
        watcher.start()
        for count in range(3, 12):
            gated.wait_submitted(count)
            gated.release_one()
        gated.wait_submitted(12)
        watcher.stop()
        gated.open()
        results = [item for item in watcher.results() if isinstance(item, StreamResult)]
    assert gated.peak == 3, gated.peak
    assert len(results) >= 9


def test_a_rate_spaces_detections_evenly_and_skips_decoding_where_it_can(
    clip: ClipMaker, detector_factory: DetectorFactory
) -> None:
    every_frame_keyed = clip("h264", (320, 180), frames=50, gop=5)
    sources = [
        Source(str(clip("h264", (320, 180), frames=50)), name="five", rate=5),
        Source(str(every_frame_keyed), name="keys", rate=2),
    ]
    with Watcher(sources, detector_factory()) as watcher:
        results, _ = collect(watcher)
        stats = watcher.stats()
    five = [r.pts for r in results if r.stream == "five"]
    assert 9 <= len(five) <= 11
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(five)]  # type: ignore[operator]
    assert all(abs(gap - 0.2) < 0.05 for gap in gaps), gaps
    assert stats["five"].decoded == 50 and stats["five"].skipped == 50 - len(five)
    # 2 a second is slower than a keyframe every 0.2 s: once the keyframe distance is known (the
    # first 5 frames), only keyframes are decoded: 5 + 9 of the 50
    assert stats["keys"].decoded <= 15 and stats["keys"].detected >= 4


def test_a_looping_file_never_ends(clip: ClipMaker, detector_factory: DetectorFactory) -> None:
    source = clip("h264", (320, 180), frames=10, fps=25)
    results: list[StreamResult] = []
    events: list[StreamEvent] = []
    with Watcher([Source(str(source), loop=True)], detector_factory()) as watcher:
        # until a frame past the file's end is detected (an event); the bound only stops a hang
        for item in watcher.results(60.0):
            (results if isinstance(item, StreamResult) else events).append(item)
            if results and results[-1].frame >= 20:
                break
    assert states(events, source.stem) == ["connecting", "live"]
    assert max(r.frame for r in results) >= 20  # past the 10 frames of the file


def text_file(path: Path) -> Path:
    path.write_text("this is not a video\n" * 100)
    return path


def cut_in_half(source: Path, path: Path) -> Path:
    data = source.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def unknown_codec(source: Path, path: Path) -> Path:
    # An AVI whose codec tag FFmpeg knows no decoder for (the H.264 fourcc overwritten).
    data = source.read_bytes()
    path.write_bytes(data[:4096].replace(b"H264", b"ZZZZ") + data[4096:])
    return path


def test_bad_files_fail_alone_with_one_line_each_and_the_others_go_on(
    clip: ClipMaker, detector_factory: DetectorFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = clip("h264", (320, 180), frames=10)
    sources = [
        Source(str(good), name="good"),
        Source(str(tmp_path / "missing.mp4"), name="missing"),
        Source(str(text_file(tmp_path / "notes.mp4")), name="text"),
        Source(str(cut_in_half(clip("h264", (320, 180), frames=25), tmp_path / "half.mp4")), name="half"),
        Source(
            str(unknown_codec(clip("h264", (160, 96), frames=5, suffix=".avi"), tmp_path / "odd.avi")),
            name="codec",
        ),
        Source(str(good)),  # the same file again, with no name of its own: a mistake
    ]
    caplog.set_level(logging.INFO, "rknnlaunch.streams")
    with Watcher(sources, detector_factory(), policy=FAST) as watcher:
        results, events = collect(watcher)
    twice = watcher.names[5]
    events = [
        e if e.stream != twice else StreamEvent("twice", e.event, e.reason, e.source, e.time) for e in events
    ]
    assert {r.stream for r in results} == {"good"}
    assert states(events, "good") == ["connecting", "live", "ended"]
    reasons = {}
    for name in ("missing", "text", "half", "codec", "twice"):
        failed = [e for e in events if e.stream == name and e.event == "failed"]
        assert len(failed) == 1, (name, events)
        reasons[name] = failed[0].reason
        logged = name if name != "twice" else twice
        lines = [
            r.getMessage()
            for r in caplog.records
            if r.getMessage().startswith(f"stream {logged} ") and "failed" in r.getMessage()
        ]
        assert len(lines) == 1 and "fix:" in lines[0], lines
    assert "missing.mp4: no such file" in reasons["missing"]
    assert "not a video FFmpeg can read" in reasons["text"] and "ffprobe" in reasons["text"]
    assert "not a video FFmpeg can read" in reasons["half"]
    assert "has no decoder" in reasons["codec"] and "libx264" in reasons["codec"]
    assert "given twice" in reasons["twice"]


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers (a hung camera)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def test_a_hung_or_refused_source_never_holds_up_another(
    clip: ClipMaker, detector_factory: DetectorFactory, silent_server: int
) -> None:
    good = clip("h264", (320, 180), frames=25)
    sources = [
        Source(f"rtsp://admin:secret@127.0.0.1:{silent_server}/hung", name="hung"),
        Source(f"rtsp://127.0.0.1:{free_port()}/refused", name="refused"),
        Source(str(good), name="good"),
    ]
    policy = Policy(
        stall_timeout=0.5, open_timeout=0.5, initial_backoff=0.05, max_backoff=0.1, connect_attempts=2
    )
    with Watcher(sources, detector_factory(), policy=policy) as watcher:
        results, events = collect(watcher)
        stats = watcher.stats()
    good_results = [r for r in results if r.stream == "good"]
    assert stats["good"].detected + stats["good"].dropped == 25 and good_results
    assert max(r.latency_ms for r in good_results) < 1000
    for name, reason in (("hung", "no answer within the timeout"), ("refused", "Connection refused")):
        assert states(events, name) == ["connecting", "reconnecting", "failed"], events
        assert any(reason in e.reason for e in events if e.stream == name and e.event == "failed"), events
        assert stats[name].reconnects == 1  # connect_attempts=2: one open and one reopen
    assert all("secret" not in e.reason for e in events)
    assert watcher.all_failed is False


class Recorder:
    def __init__(self) -> None:
        self.items: list[object] = []

    def on_result(self, result: StreamResult) -> None:
        self.items.append(result)

    def on_event(self, event: StreamEvent) -> None:
        self.items.append(event)


class Broken:
    calls = 0

    def on_result(self, result: StreamResult) -> None:
        Broken.calls += 1
        raise RuntimeError("observer bug")

    def on_event(self, event: StreamEvent) -> None:
        raise RuntimeError("observer bug")


def test_observers_see_every_item_and_a_broken_one_is_logged_once(
    clip: ClipMaker, detector_factory: DetectorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    with Watcher(
        [str(clip("h264", (320, 180), frames=10))], detector_factory(), observers=[Broken(), recorder]
    ) as watcher:
        stats = watcher.run()
    kinds = Counter(type(item).__name__ for item in recorder.items)
    name = next(iter(stats))
    assert kinds["StreamEvent"] == 3 and kinds["StreamResult"] == stats[name].detected
    assert Broken.calls == stats[name].detected
    assert len([r for r in caplog.records if "observer" in r.getMessage()]) == 1


def test_every_frame_waits_for_a_core_instead_of_dropping(
    clip: ClipMaker, detector_factory: DetectorFactory
) -> None:
    source = clip("h264", (320, 180), frames=25)
    with Watcher(
        [Source(str(source), every_frame=True)], detector_factory(20.0, cores=[0]), in_flight=1
    ) as watcher:
        results, _ = collect(watcher)
        figures = watcher.stats()[source.stem]
    assert [r.frame for r in results] == list(range(25))
    assert figures.detected == figures.decoded == 25 and figures.dropped == 0


def test_a_rate_above_the_source_s_says_so_and_detects_every_frame(
    clip: ClipMaker, detector_factory: DetectorFactory
) -> None:
    source = clip("h264", (320, 180), frames=10)
    with Watcher([Source(str(source), rate=60, every_frame=True)], detector_factory()) as watcher:
        results, events = collect(watcher)
    live = next(e for e in events if e.event == "live")
    assert "rate 60 is more than the source's 25 fps: every frame is detected" in live.reason
    assert len(results) == 10


@pytest.fixture
def udp_sender(clip: ClipMaker) -> Iterator[str]:
    """A real MPEG-TS over UDP stream to 127.0.0.1 (PyAV muxing the clip at its own rate, looped)."""
    import time

    import av

    source = clip("h264", (320, 180), frames=50)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            with (
                av.open(str(source)) as src,
                av.open(f"udp://127.0.0.1:{port}?pkt_size=1316", "w", format="mpegts") as out,
            ):
                video = src.streams.video[0]
                sent = out.add_stream_from_template(video)
                started = time.monotonic()
                for packet in src.demux(video):
                    if packet.dts is None or stop.is_set():
                        continue
                    stop.wait(max(0.0, started + float(packet.pts * video.time_base) - time.monotonic()))
                    packet.stream = sent
                    out.mux(packet)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    yield f"udp://127.0.0.1:{port}"
    stop.set()
    thread.join(timeout=10)


def test_an_mpeg_ts_stream_over_udp(udp_sender: str, detector_factory: DetectorFactory) -> None:
    results: list[StreamResult] = []
    events: list[StreamEvent] = []
    with Watcher([Source(udp_sender, name="udp")], detector_factory()) as watcher:
        # until the figures asserted below are reached (an event), not a fixed 3 s that load can eat;
        # the generous bound only keeps a broken sender from hanging the suite
        for item in watcher.results(60.0):
            (results if isinstance(item, StreamResult) else events).append(item)
            if len(results) >= 10 and watcher.stats()["udp"].decoded >= 25:
                break
        figures = watcher.stats()["udp"]
    assert states(events, "udp") == ["connecting", "live"]
    assert figures.decoded >= 25 and len(results) >= 10 and figures.state == "live"
