"""What a watch yields: per-frame `StreamResult`, per-state-change `StreamEvent`, per-stream
`StreamStats` (the summary), and the `StreamObserver` seam (live view, metrics) that receives them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..pipeline import StageTimings
from ..yolo import Detections

STATES = ("connecting", "live", "stalled", "reconnecting", "ended", "failed")
"""The states a stream passes through; each change is a `StreamEvent`."""


@dataclass(frozen=True)
class StreamResult:
    """One detected frame of one stream."""

    stream: str
    """The stream's name."""
    frame: int
    """The frame's index among the frames this stream decoded (0-based, across reconnects)."""
    pts: float | None
    """The frame's presentation timestamp in the stream, in seconds (None when it carries none)."""
    arrival: float
    """`time.monotonic()` when the decoded frame arrived."""
    latency_ms: float
    """From arrival to this result: the wait for a free core plus the detection."""
    dropped: int
    """Frames of this stream decoded but replaced by a newer one (cores busy) since the last result."""
    detections: Detections
    timings: StageTimings
    context: str
    """The runtime context that ran it (``NPU rk3588 core 1 (mask 2)``, ``CPU ...``)."""
    class_count: int | None = None
    """How many classes the model's outputs carry (`rknnlaunch.DetectResult.class_count`)."""
    image: np.ndarray[Any, Any] | None = field(default=None, repr=False, compare=False)
    """The decoded BGR frame (what a live view draws the detections on)."""

    def to_json(self, decimals: int = 1) -> dict[str, Any]:
        """``{"stream", "frame", "pts", "latency_ms", "dropped", "detections": [{"class", "score", "box"}]}``
        (``class``: the class name when the model names it, else its number)."""
        rows = self.detections.to_json(decimals)["detections"]
        return {
            "stream": self.stream,
            "frame": self.frame,
            "pts": None if self.pts is None else round(self.pts, 3),
            "latency_ms": round(self.latency_ms, 1),
            "dropped": self.dropped,
            "detections": [
                {
                    "class": row["name"] if row.get("name") is not None else row["class_id"],
                    "score": row["score"],
                    "box": row["box"],
                }
                for row in rows
            ],
        }


@dataclass(frozen=True)
class StreamEvent:
    """A stream changed state (``connecting``, ``live``, ``stalled``, ``reconnecting``, ``ended``,
    ``failed``); ``reason`` says why in one line (passwords masked), with the fix where there is one."""

    stream: str
    event: str
    reason: str
    source: str
    """The source, password masked."""
    time: float
    """`time.monotonic()` of the change."""

    def to_json(self) -> dict[str, Any]:
        """``{"stream", "event", "reason"}``."""
        return {"stream": self.stream, "event": self.event, "reason": self.reason}


@dataclass(frozen=True)
class StreamStats:
    """One stream's figures so far (a snapshot; `Watcher.stats`)."""

    stream: str
    source: str
    """Password masked."""
    state: str
    decoder: str
    """``software h264``, ``hardware h264_rkmpp``, or empty before the first open."""
    decoded: int
    """Frames decoded."""
    skipped: int
    """Frames not detected because of the stream's rate (not counted as dropped)."""
    detected: int
    dropped: int
    reconnects: int
    corrupt: int
    """Packets the decoder rejected."""
    decode_ms: float
    """Mean decode time per decoded frame."""
    seconds: float
    """Since the stream was first live."""
    latencies_ms: tuple[float, ...] = field(repr=False, default=())
    """The most recent latencies (up to 4096), for percentiles and histograms."""
    convert_ms: float = 0.0
    """Mean conversion to BGR per detected frame (frames dropped are never converted)."""

    @property
    def fps(self) -> float:
        """Detected frames a second since the stream was first live."""
        return self.detected / self.seconds if self.seconds > 0 else 0.0

    def latency_percentile(self, percent: float) -> float | None:
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        rank = max(0, math.ceil(percent / 100 * len(ordered)) - 1)
        return ordered[rank]

    def to_json(self) -> dict[str, Any]:
        """``{"stream", "summary": {decoded, detected, dropped, skipped, reconnects, fps, p50_ms, ...}}``."""
        p50, p99 = self.latency_percentile(50), self.latency_percentile(99)
        return {
            "stream": self.stream,
            "summary": {
                "state": self.state,
                "decoder": self.decoder,
                "decoded": self.decoded,
                "detected": self.detected,
                "dropped": self.dropped,
                "skipped": self.skipped,
                "reconnects": self.reconnects,
                "corrupt": self.corrupt,
                "fps": round(self.fps, 2),
                "p50_ms": None if p50 is None else round(p50, 1),
                "p99_ms": None if p99 is None else round(p99, 1),
                "decode_ms": round(self.decode_ms, 2),
                "convert_ms": round(self.convert_ms, 2),
            },
        }


class StreamObserver(Protocol):
    """Receives everything a `Watcher` produces, in the thread that runs the watcher (``for item in
    watcher`` or `Watcher.run`), before the item is yielded. Keep each call short (hand work to your
    own thread); an exception is logged once per observer and the watch goes on.

    The seam for a live view (``on_result``'s ``result.image`` is the frame) and metrics (the
    figures of `Watcher.stats` plus these calls)."""

    def on_result(self, result: StreamResult) -> None: ...

    def on_event(self, event: StreamEvent) -> None: ...
