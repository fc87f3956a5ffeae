"""One source's thread: open, decode, keep only the newest frame (counting the ones it replaces),
pace files and rates, and reopen with capped exponential backoff, announcing each state change."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._decode import (
    OpenOptions,
    SourceFailure,
    av_module,
    choose_decoder,
    describe_failure,
    hardware_context,
    open_container,
    software_context,
    timeout_failure,
)
from ._results import StreamEvent, StreamStats
from ._sources import PlannedSource, Redactor

log = logging.getLogger("rknnlaunch.streams")

_CORRUPT_IN_A_ROW = 50  # packets the decoder rejects in a row before the source is reopened
_LATENCIES_KEPT = 4096
_LOUD_STATES = ("stalled", "reconnecting", "failed")


@dataclass(frozen=True)
class Policy:
    """Timeouts and retries (seconds): ``stall_timeout`` with no packet -> stalled and reopened;
    reopen after ``initial_backoff`` doubling up to ``max_backoff``; a source never live gives up
    after ``connect_attempts`` failed opens, one that was live after ``retries`` (None: never)."""

    stall_timeout: float = 10.0
    open_timeout: float = 10.0
    initial_backoff: float = 0.25
    max_backoff: float = 2.0
    connect_attempts: int = 5
    retries: int | None = None
    rtsp_transport: str = "tcp"

    def backoff(self, failures: int) -> float:
        """The wait before reopening after ``failures`` (>= 1) failures in a row."""
        return float(min(self.max_backoff, self.initial_backoff * 2 ** max(failures - 1, 0)))


@dataclass
class DecodedFrame:
    """The newest decoded frame of a stream, waiting for a core. ``picture`` is the decoder's
    frame: converted to BGR only when a core takes it (`bgr`), so a dropped frame costs no
    conversion."""

    picture: Any
    index: int
    pts: float | None
    arrival: float

    def bgr(self) -> np.ndarray[Any, Any]:
        """The frame as a BGR uint8 H x W x 3 array (what the detector takes)."""
        if isinstance(self.picture, np.ndarray):
            return self.picture
        image: np.ndarray[Any, Any] = self.picture.to_ndarray(format="bgr24")
        return image


@dataclass
class _Counters:
    decoded: int = 0
    skipped: int = 0
    detected: int = 0
    dropped: int = 0
    reconnects: int = 0
    corrupt: int = 0
    decode_s: float = 0.0
    convert_s: float = 0.0
    first_live: float | None = None
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCIES_KEPT))


class StreamReader:
    """Decodes one source in its own thread into a one-frame slot the scheduler takes from."""

    def __init__(
        self,
        planned: PlannedSource,
        policy: Policy,
        host_root: str,
        redact: Redactor,
        emit: Callable[[StreamEvent], None],
        wake: Callable[[], None],
    ) -> None:
        self.name = planned.name
        self.planned = planned
        self.source = planned.source
        self.shown = planned.source.shown
        self._policy = policy
        self._host_root = host_root
        self._redact = redact
        self._emit = emit
        self._wake = wake
        self._lock = threading.Lock()
        self._taken = threading.Condition(self._lock)  # every_frame: the slot was emptied
        self._slot: DecodedFrame | None = None
        self._pending_dropped = 0
        self._counts = _Counters()
        self._state = "connecting"
        self._decoder = ""
        self._stop = threading.Event()
        self._done = threading.Event()
        self._clock: tuple[float, float] | None = None
        self._next_due: float | None = None
        self._said_decoder = False
        self._last_packet = 0.0
        self._thread = threading.Thread(target=self._run, name=f"rknnlaunch-stream-{self.name}", daemon=True)

    # --- the scheduler's side -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._taken.notify_all()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def done(self) -> bool:
        """The thread has finished (ended, failed or stopped)."""
        return self._done.is_set()

    @property
    def state(self) -> str:
        return self._state

    def has_frame(self) -> bool:
        with self._lock:
            return self._slot is not None

    def take(self) -> tuple[DecodedFrame, int] | None:
        """The newest frame and how many were dropped before it; the slot is emptied."""
        with self._lock:
            frame, dropped = self._slot, self._pending_dropped
            self._slot, self._pending_dropped = None, 0
            self._taken.notify_all()
        return None if frame is None else (frame, dropped)

    def record_conversion(self, seconds: float) -> None:
        with self._lock:
            self._counts.convert_s += seconds

    def record_result(self, latency_ms: float) -> None:
        with self._lock:
            self._counts.detected += 1
            self._counts.latencies_ms.append(latency_ms)

    def stats(self, now: float) -> StreamStats:
        with self._lock:
            counts = self._counts
            return StreamStats(
                stream=self.name,
                source=self.shown,
                state=self._state,
                decoder=self._decoder,
                decoded=counts.decoded,
                skipped=counts.skipped,
                detected=counts.detected,
                dropped=counts.dropped + (1 if self._slot is not None and self.done else 0),
                reconnects=counts.reconnects,
                corrupt=counts.corrupt,
                decode_ms=counts.decode_s * 1e3 / counts.decoded if counts.decoded else 0.0,
                convert_ms=counts.convert_s * 1e3 / counts.detected if counts.detected else 0.0,
                seconds=0.0 if counts.first_live is None else now - counts.first_live,
                latencies_ms=tuple(counts.latencies_ms),
            )

    # --- the thread ---------------------------------------------------------------------------

    def _set_state(self, state: str, reason: str) -> None:
        if state == self._state and state not in ("connecting",):
            return
        reason = self._redact(reason)
        with self._lock:
            self._state = state
            if state == "live" and self._counts.first_live is None:
                self._counts.first_live = time.monotonic()
        level = logging.WARNING if state in _LOUD_STATES else logging.INFO
        log.log(level, "stream %s (%s): %s: %s", self.name, self.shown, state, reason)
        self._emit(StreamEvent(self.name, state, reason, self.shown, time.monotonic()))

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug in this thread must not pass silently
            self._set_state("failed", f"internal error: {type(exc).__name__}: {exc}")
            log.exception("stream %s: reader crashed", self.name)
        finally:
            self._done.set()
            self._wake()

    def _loop(self) -> None:
        planned = self.planned
        if planned.problem is not None:
            self._set_state("failed", _line(planned.problem, planned.fix))
            return
        policy = self._policy
        failures = 0
        ever_live = False
        reason = f"opening {self.shown}"
        first, looping = True, False
        while not self._stop.is_set():
            if not first and not looping:
                with self._lock:
                    self._counts.reconnects += 1
            if not looping:
                self._set_state("connecting" if first else "reconnecting", reason)
            first, looping = False, False
            went_live = threading.Event()
            decoded_before = self._counts.decoded
            try:
                self._session(went_live)
            except SourceFailure as failure:
                if self._stop.is_set():
                    return
                failures = 1 if went_live.is_set() else failures + 1
                ever_live = ever_live or went_live.is_set()
                reason = _line(failure.problem, failure.fix)
                if not failure.retry:
                    self._set_state("failed", reason)
                    return
                if ever_live:
                    give_up = policy.retries is not None and failures > policy.retries
                else:
                    give_up = failures >= policy.connect_attempts
                if give_up:
                    self._set_state("failed", f"gave up after {failures} failed attempts: {reason}")
                    return
                if went_live.is_set() and failure.problem.startswith("no answer"):
                    self._set_state("stalled", f"no packet for {policy.stall_timeout:g} s")
                delay = policy.backoff(failures)
                reason = f"{reason} (retry in {delay:g} s)"
                if self._stop.wait(delay):
                    return
                continue
            if self._stop.is_set():
                return
            ever_live = ever_live or went_live.is_set()
            if self.source.is_live:
                failures = 1 if went_live.is_set() else failures + 1
                reason = "the source ended the stream"
                delay = policy.backoff(failures)
                if self._stop.wait(delay):
                    return
                continue
            if self.source.loop and went_live.is_set() and self._counts.decoded:
                self._clock = None
                self._next_due = None
                looping = True  # a loop is no reconnect and no state change
                continue
            if self._counts.decoded == decoded_before:
                self._set_state(
                    "failed",
                    "no frame could be decoded (not a video or image, or its data is corrupt); "
                    "fix: check the file: ffprobe FILE",
                )
                return
            self._set_state("ended", "end of file")
            return

    def _session(self, went_live: threading.Event) -> None:
        av = av_module()
        options = OpenOptions(
            self._policy.open_timeout, self._policy.stall_timeout, self._policy.rtsp_transport
        )
        container = open_container(self.planned.url, options)
        self._last_packet = time.monotonic()
        kind = self.source.kind
        try:
            videos = container.streams.video
            if not videos:
                raise SourceFailure("it has no video stream", "give a video source")
            stream = videos[0]
            if stream.codec_context is None:  # FFmpeg knows no decoder for the stream's codec tag
                raise SourceFailure(
                    "its video codec has no decoder in this PyAV (FFmpeg)",
                    "transcode it to H.264: ffmpeg -i IN -c:v libx264 OUT.mp4",
                )
            codec = stream.codec_context.name
            hardware, why = choose_decoder(codec, av.codecs_available, self._host_root)
            context = software_context(stream)
            decoder = f"software {codec}"
            if hardware is not None:
                try:
                    context, decoder = hardware_context(av, hardware, stream), f"hardware {hardware}"
                except Exception as exc:
                    why = f"software {codec} decode: {hardware} did not open ({self._redact(str(exc))})"
            if not self._said_decoder:
                self._said_decoder = True
                log.info("stream %s: %s", self.name, why)
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            live_reason = f"{stream.codec_context.width}x{stream.codec_context.height} {codec}" + (
                f" {fps:g} fps" if fps else ""
            )
            live_reason += f", {why}"
            rate = self.source.rate
            if rate is not None and fps and rate > fps:
                live_reason += (
                    f"; rate {rate:g} is more than the source's {fps:g} fps: every frame is detected"
                )
            with self._lock:
                self._decoder = decoder
            self._set_state("live", live_reason)
            went_live.set()
            self._decode(
                av, container, stream, context, hardware is not None and decoder.startswith("hardware")
            )
        except SourceFailure:
            raise
        except Exception as exc:
            if (
                self.source.is_live
                and time.monotonic() - self._last_packet >= 0.9 * self._policy.stall_timeout
            ):
                raise timeout_failure("read") from None
            raise describe_failure(exc, kind, opening=False) from None
        finally:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing left to do
                container.close()

    def _decode(self, av: Any, container: Any, stream: Any, context: Any, hardware: bool) -> None:
        time_base = float(stream.time_base) if stream.time_base else None
        rate = self.source.rate
        interval = 1.0 / rate if rate else None
        last_key: float | None = None
        gop: float | None = None
        corrupt_in_a_row = 0
        for packet in container.demux(stream):
            self._last_packet = time.monotonic()
            if self._stop.is_set():
                return
            if packet.is_corrupt:
                with self._lock:
                    self._counts.corrupt += 1
            packet_time = packet.pts * time_base if packet.pts is not None and time_base else None
            if packet.is_keyframe and packet_time is not None:
                if last_key is not None and packet_time > last_key:
                    gop = packet_time - last_key
                last_key = packet_time
            # A rate slower than the keyframes: decode keyframes only (each frame between them would
            # be decoded only to be skipped).
            if (
                interval is not None
                and gop is not None
                and interval >= gop
                and not packet.is_keyframe
                and packet.size
            ):
                with self._lock:
                    self._counts.skipped += 1
                continue
            started = time.perf_counter()
            try:
                frames = context.decode(packet)
            except av.error.InvalidDataError as exc:
                corrupt_in_a_row += 1
                with self._lock:
                    self._counts.corrupt += 1
                if corrupt_in_a_row >= _CORRUPT_IN_A_ROW:
                    raise SourceFailure(
                        f"{corrupt_in_a_row} corrupt packets in a row ({exc})", "check the source", retry=True
                    ) from None
                continue
            except av.error.FFmpegError:
                if hardware and not self._counts.decoded:
                    context, hardware = software_context(stream), False
                    log.info(
                        "stream %s: the hardware decoder failed on the first frame: software decode",
                        self.name,
                    )
                    with self._lock:
                        self._decoder = f"software {stream.codec_context.name}"
                    frames = context.decode(packet)
                else:
                    raise
            corrupt_in_a_row = 0
            spent = time.perf_counter() - started
            for frame in frames:
                self._deliver(frame, interval, spent)
                spent = 0.0
                if self._stop.is_set():
                    return

    def _deliver(self, frame: Any, interval: float | None, decode_s: float) -> None:
        pts = frame.time
        pts_s = float(pts) if pts is not None else None
        if self.source.paced:
            self._pace(pts_s)
        now = time.monotonic()
        with self._lock:
            index = self._counts.decoded
            self._counts.decoded += 1
            self._counts.decode_s += decode_s
        if interval is not None:
            moment = pts_s if pts_s is not None else now
            due = self._next_due
            if due is not None and moment < due - interval * 0.25:
                with self._lock:
                    self._counts.skipped += 1
                return
            # Evenly spaced on the stream's own clock; a jump (a loop, a gap) restarts the spacing.
            self._next_due = (moment if due is None or abs(moment - due) > interval * 2 else due) + interval
        arrival = time.monotonic()
        with self._lock:
            if self.source.every_frame:  # wait for a core rather than drop
                self._taken.wait_for(lambda: self._slot is None or self._stop.is_set())
            if self._slot is not None:
                self._counts.dropped += 1
                self._pending_dropped += 1
            self._slot = DecodedFrame(frame, index, pts_s, arrival)
        self._wake()

    def _pace(self, pts: float | None) -> None:
        # A file is read as a camera delivers it: frame at its PTS on the wall clock.
        if pts is None:
            return
        now = time.monotonic()
        if self._clock is None or pts < self._clock[1]:
            self._clock = (now, pts)
            return
        due = self._clock[0] + (pts - self._clock[1])
        if due - now > 1.0:  # a gap in the timestamps: carry on from here
            self._clock = (now, pts)
            return
        if due > now:
            self._stop.wait(due - now)


def _line(problem: str, fix: str | None) -> str:
    return problem if not fix else f"{problem}; fix: {fix}"
