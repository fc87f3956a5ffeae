"""`bench --streams`: how many streams of one video an allocation sustains. Streams are added one
step at a time until one falls below its rate or its p99 latency (arrival -> result) passes a bound;
each step's per-stream figures, the figure, its JSON and its plot."""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import UsageError
from .._version import __version__
from ..pipeline import Detector, ModelPipeline
from ..runtime import LaunchPlan, RknnLiteFactory
from ..settings import NpuSettings
from ..streams import FrameDetector, Source, StreamResult, Watcher
from ._video import VideoInfo, make_video, probe_video

SCHEMA = "rknnlaunch.bench-streams/1"
KEEP_FRACTION = 0.95
"""A stream keeps its rate when it gets at least this share of it: over a 10 s step at 25 FPS that
allows 12 late frames (pacing jitter on a busy machine), not a stream that steadily falls behind."""
DEFAULT_STEP_SECONDS = 10.0
DEFAULT_WARMUP_SECONDS = 2.0
DEFAULT_MAX_STREAMS = 32
DEFAULT_CONTEXTS_PER_CORE = 2
"""Streams are run as `watch` runs them: with one context per core, the core idles while its frame
is converted, letterboxed and decoded on the CPU (simulated RK3588: 7 streams sustained with one,
9 of an 8.8 NPU bound with two). A single-core NPU opens two contexts on its one core; the CPU
backend ignores it."""
MADE_CLIP_SECONDS = 10
"""The made clip's length: it loops, and each loop reopens the file (fewer, the longer it is)."""
MAX_STREAMS = 256
RETRIES = 1
"""A count that falls short is measured this many more times before the ramp stops there."""
BOUND_INTERVALS = 3
"""The default latency bound, in frame intervals at the rate: a result later than that means frames
queue somewhere (each stream keeps only its newest frame, so at most one waits)."""


def percentile(values: Sequence[float], percent: float) -> float | None:
    """The nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class StreamFigures:
    """One stream over one step's measured window."""

    stream: str
    results: int
    fps: float
    p50_ms: float | None
    p99_ms: float | None
    dropped: int

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "results": self.results,
            "fps": round(self.fps, 2),
            "p50_ms": None if self.p50_ms is None else round(self.p50_ms, 1),
            "p99_ms": None if self.p99_ms is None else round(self.p99_ms, 1),
            "dropped": self.dropped,
        }


@dataclass(frozen=True)
class StreamStep:
    """``count`` streams together for ``seconds`` (after a warm-up): each one's figures."""

    count: int
    seconds: float
    streams: tuple[StreamFigures, ...]
    load: float
    """The 1-minute load average at the step's end (this machine's neighbours shift figures)."""
    failures: tuple[str, ...] = ()
    """Streams that failed or ended during the step (their reasons)."""

    @property
    def min_fps(self) -> float:
        return min((s.fps for s in self.streams), default=0.0)

    @property
    def max_fps(self) -> float:
        return max((s.fps for s in self.streams), default=0.0)

    @property
    def mean_fps(self) -> float:
        return sum(s.fps for s in self.streams) / len(self.streams) if self.streams else 0.0

    @property
    def worst_p99_ms(self) -> float | None:
        known = [s.p99_ms for s in self.streams if s.p99_ms is not None]
        return max(known) if known else None

    @property
    def total_fps(self) -> float:
        return sum(s.fps for s in self.streams)

    def shortfall(self, rate: float, bound_ms: float) -> str | None:
        """Why this step does not sustain its streams (None: it does)."""
        if self.failures:
            return f"a stream stopped: {self.failures[0]}"
        slow = [s for s in self.streams if s.fps < rate * KEEP_FRACTION]
        if slow:
            worst = min(slow, key=lambda s: s.fps)
            return f"{worst.stream} got {worst.fps:.1f} FPS < {KEEP_FRACTION:.0%} of {rate:g}"
        worst_p99 = self.worst_p99_ms
        if worst_p99 is None or worst_p99 > bound_ms:
            late = max(self.streams, key=lambda s: s.p99_ms or math.inf)
            shown = "no result" if late.p99_ms is None else f"p99 {late.p99_ms:.0f} ms"
            return f"{late.stream} {shown} > {bound_ms:.0f} ms"
        return None

    def line(self, rate: float, bound_ms: float) -> str:
        """One line: streams, per-stream FPS (min/mean/max), worst p50/p99, drops, load, verdict."""
        why = self.shortfall(rate, bound_ms)
        p50 = max((s.p50_ms for s in self.streams if s.p50_ms is not None), default=None)
        p99 = self.worst_p99_ms
        dropped = sum(s.dropped for s in self.streams)
        return (
            f"{self.count:>3} stream{'' if self.count == 1 else 's'}: FPS per stream min {self.min_fps:5.1f} "
            f"mean {self.mean_fps:5.1f} "
            f"max {self.max_fps:5.1f} (total {self.total_fps:6.1f}), latency worst p50 "
            f"{_ms(p50)} p99 {_ms(p99)} ms, dropped {dropped}, load {self.load:.1f}: "
            + ("sustained" if why is None else f"not sustained ({why})")
        )

    def to_json(self, rate: float, bound_ms: float) -> dict[str, Any]:
        return {
            "count": self.count,
            "seconds": round(self.seconds, 3),
            "load_average": round(self.load, 2),
            "sustained": self.shortfall(rate, bound_ms) is None,
            "shortfall": self.shortfall(rate, bound_ms),
            "failures": list(self.failures),
            "streams": [s.to_json() for s in self.streams],
        }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def stream_sources(video: VideoInfo, count: int, rate: float | None) -> list[Source]:
    """``count`` looping streams of ``video``, paced as cameras, named ``s1``..``sN``; ``rate``
    None or the video's own rate: every frame."""
    every = rate is None or rate >= video.fps
    return [
        Source(str(video.path), name=f"s{i + 1}", rate=None if every else rate, loop=True)
        for i in range(count)
    ]


def measure_step(
    detector: FrameDetector,
    video: VideoInfo,
    count: int,
    rate: float | None = None,
    seconds: float = DEFAULT_STEP_SECONDS,
    warmup: float = DEFAULT_WARMUP_SECONDS,
    on_result: Callable[[StreamResult], None] | None = None,
) -> StreamStep:
    """Run ``count`` streams of ``video`` over ``detector`` for ``warmup`` + ``seconds``; the figures
    count only results of frames that arrived in the last ``seconds``."""
    sources = stream_sources(video, count, rate)
    latencies: dict[str, list[float]] = {source.name or "": [] for source in sources}
    dropped = dict.fromkeys(latencies, 0)
    failures: list[str] = []
    with Watcher(sources, detector, keep_images=False) as watcher:
        start = time.monotonic()
        window = (start + warmup, start + warmup + seconds)
        for item in watcher.results(warmup + seconds):
            if isinstance(item, StreamResult):
                if on_result is not None:
                    on_result(item)
                if window[0] <= item.arrival < window[1]:
                    latencies[item.stream].append(item.latency_ms)
                    dropped[item.stream] += item.dropped
            elif item.event in ("failed", "ended", "stalled", "reconnecting"):
                failures.append(f"{item.stream} {item.event}: {item.reason}")
    figures = tuple(
        StreamFigures(
            name,
            len(values),
            len(values) / seconds,
            percentile(values, 50),
            percentile(values, 99),
            dropped[name],
        )
        for name, values in latencies.items()
    )
    return StreamStep(count, seconds, figures, os.getloadavg()[0], tuple(failures))


@dataclass
class StreamRamp:
    """The steps of one ramp and what they add up to."""

    video: VideoInfo
    rate: float
    bound_ms: float
    context: str
    """What ran the frames (``NPU rk3588 cores 0,1,2 (...), 6 contexts (2 per core)``, ``CPU
    (onnxruntime) ..., 1 context``)."""
    steps: list[StreamStep] = field(default_factory=list)
    max_streams: int = DEFAULT_MAX_STREAMS
    contexts: int | None = None
    """How many contexts ran the frames (None: not known, e.g. a detector made by the caller)."""
    contexts_per_core: int | None = None
    """NPU contexts per core (None on the CPU, which opens one session whatever was asked)."""

    @property
    def sustained(self) -> int:
        """The most streams a step sustained, counting up from the first step to the first count
        that fell short twice (a step that falls short once is measured again: `run_ramp`)."""
        best = 0
        for index, step in enumerate(self.steps):
            if step.shortfall(self.rate, self.bound_ms) is None:
                best = step.count
                continue
            retried = index + 1 < len(self.steps) and self.steps[index + 1].count == step.count
            if not retried:
                break
        return best

    @property
    def capped(self) -> bool:
        """The ramp stopped at ``max_streams`` with every step sustained."""
        return bool(self.steps) and self.sustained == self.steps[-1].count >= self.max_streams

    def figure(self) -> str:
        """``this allocation sustains N streams of 1280x720@25 (rate 25/s, p99 <= 120 ms)``."""
        what = f"{self.video.width}x{self.video.height}@{self.video.fps:g}"
        line = (
            f"this allocation sustains {self.sustained} stream{'' if self.sustained == 1 else 's'} of "
            f"{what} ({self.video.codec}, {self.rate:g} detections/s each, p99 latency <= "
            f"{self.bound_ms:.0f} ms) on {self.context}"
        )
        if self.capped:
            line += f"; every step passed up to --max-streams {self.max_streams}: raise it to find the limit"
        elif self.sustained == 0:
            line += "; even one stream falls short: try a lower --rate, a smaller model or an NPU"
        return line

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "rknnlaunch_version": __version__,
            "context": self.context,
            "contexts": self.contexts,
            "contexts_per_core": self.contexts_per_core,
            "video": {
                "path": str(self.video.path) if not self.video.made else None,
                "made_from_photo": self.video.made,
                "width": self.video.width,
                "height": self.video.height,
                "fps": self.video.fps,
                "codec": self.video.codec,
            },
            "rate": self.rate,
            "latency_bound_ms": self.bound_ms,
            "keep_fraction": KEEP_FRACTION,
            "max_streams": self.max_streams,
            "sustained": self.sustained,
            "figure": self.figure(),
            "steps": [step.to_json(self.rate, self.bound_ms) for step in self.steps],
        }

    def plot(self, path: str) -> None:
        """Per-stream FPS (each stream a dot, min-max band) and worst p50/p99 latency per stream
        count, with the rate and the bound drawn (a repeated measurement faded); ``path``'s
        extension picks the format."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        # Lines and the band follow each count's last measurement (the one that decided it); a
        # measurement that was repeated shows as faded dots.
        last = {step.count: step for step in self.steps}
        decided = list(last.values())
        counts = [step.count for step in decided]
        fig, (fps_axes, latency_axes) = plt.subplots(1, 2, figsize=(12, 4.5))
        for step in self.steps:
            faded = last[step.count] is not step
            fps_axes.scatter(
                [step.count] * len(step.streams),
                [s.fps for s in step.streams],
                s=12,
                color="tab:blue",
                alpha=0.25 if faded else 1.0,
            )
        fps_axes.fill_between(
            counts, [s.min_fps for s in decided], [s.max_fps for s in decided], alpha=0.2, color="tab:blue"
        )
        fps_axes.axhline(self.rate, color="tab:green", linestyle="--", label=f"rate {self.rate:g}/s")
        fps_axes.axhline(
            self.rate * KEEP_FRACTION, color="tab:red", linestyle=":", label=f"{KEEP_FRACTION:.0%} of rate"
        )
        fps_axes.set_xlabel("streams")
        fps_axes.set_ylabel("detections/s per stream")
        fps_axes.set_title("FPS of each stream")
        fps_axes.legend(loc="lower left")
        p50 = [max((s.p50_ms or 0.0) for s in step.streams) for step in decided]
        p99 = [step.worst_p99_ms or 0.0 for step in decided]
        latency_axes.plot(counts, p50, marker="o", label="worst p50")
        latency_axes.plot(counts, p99, marker="o", label="worst p99")
        for step in self.steps:
            if last[step.count] is not step and step.worst_p99_ms is not None:
                latency_axes.scatter([step.count], [step.worst_p99_ms], color="tab:orange", alpha=0.3)
        latency_axes.axhline(
            self.bound_ms, color="tab:red", linestyle="--", label=f"bound {self.bound_ms:.0f} ms"
        )
        latency_axes.set_xlabel("streams")
        latency_axes.set_ylabel("ms, frame arrival -> result")
        latency_axes.set_title("latency")
        latency_axes.legend(loc="upper left")
        for axes in (fps_axes, latency_axes):
            axes.axvline(self.sustained, color="grey", alpha=0.4)
            axes.set_xticks(counts)
        fig.suptitle(f"{self.sustained} streams of {self.video.shape} sustained on {self.context}")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def check_ramp_options(
    video: VideoInfo,
    rate: float | None,
    bound_ms: float | None,
    step_seconds: float,
    max_streams: int,
    warmup: float = DEFAULT_WARMUP_SECONDS,
) -> tuple[float, float]:
    """The rate and latency bound to use (defaults: the video's FPS, 3 frame intervals); each
    flag's bad value is a `UsageError` naming it."""
    if rate is not None:
        if not math.isfinite(rate) or rate <= 0:
            raise UsageError(
                f"--rate {rate} is not a number of frames a second", "give a positive rate such as 5"
            )
        if rate > video.fps:
            raise UsageError(
                f"--rate {rate:g} is more than the video's {video.fps:g} FPS",
                f"use --rate {video.fps:g} or less (a stream cannot detect frames it does not have)",
            )
    chosen_rate = video.fps if rate is None else rate
    if bound_ms is not None and (not math.isfinite(bound_ms) or bound_ms <= 0):
        raise UsageError(
            f"--latency-bound {bound_ms} is no time",
            "give milliseconds, e.g. 120 (3 frame intervals at 25 FPS)",
        )
    chosen_bound = BOUND_INTERVALS * 1000.0 / chosen_rate if bound_ms is None else bound_ms
    if not math.isfinite(step_seconds) or not 1.0 <= step_seconds <= 3600:
        raise UsageError(f"--step-seconds {step_seconds} is out of range", "use 1..3600 seconds (default 10)")
    if not math.isfinite(warmup) or warmup < 0:
        raise UsageError(f"stream warm-up {warmup} is no time", "use 0 or more seconds")
    if not 1 <= max_streams <= MAX_STREAMS:
        raise UsageError(
            f"--max-streams {max_streams} is out of range",
            f"use 1..{MAX_STREAMS} (each stream is a decoding thread)",
        )
    if step_seconds * chosen_rate < 5:
        raise UsageError(
            f"--step-seconds {step_seconds:g} at rate {chosen_rate:g} gives under 5 frames a stream",
            "use a longer step (a p99 needs frames)",
        )
    return chosen_rate, chosen_bound


def run_ramp(
    detector: FrameDetector,
    ramp: StreamRamp,
    step_seconds: float = DEFAULT_STEP_SECONDS,
    warmup: float = DEFAULT_WARMUP_SECONDS,
    on_step: Callable[[StreamStep], None] | None = None,
) -> StreamRamp:
    """Add streams one at a time (a fresh set each step, the detector kept open) until a count does
    not sustain them twice in a row or ``ramp.max_streams`` is reached; fills and returns ``ramp``.

    A step that falls short is measured once more before the ramp stops: on a shared machine one
    neighbour's burst can put three late frames in a step's p99 (seen at a load of 30 on 2 CPUs:
    p99 164 ms at 2 streams, then 63 ms at the same 2 streams); a count the hardware cannot
    sustain falls short both times."""
    rate = None if ramp.rate >= ramp.video.fps else ramp.rate
    for count in range(1, ramp.max_streams + 1):
        for _attempt in range(RETRIES + 1):
            step = measure_step(detector, ramp.video, count, rate, step_seconds, warmup)
            ramp.steps.append(step)
            if on_step is not None:
                on_step(step)
            if step.shortfall(ramp.rate, ramp.bound_ms) is None:
                break
        else:
            break
    return ramp


@dataclass(frozen=True)
class StreamBench:
    """`bench --streams` ready to run: options and video checked, backend planned, nothing opened
    (`rknnlaunch.bench.prepare_streams` builds it)."""

    plan: LaunchPlan
    settings: NpuSettings
    pipeline: ModelPipeline
    rknnlite: RknnLiteFactory | None
    video: VideoInfo
    rate: float
    bound_ms: float
    step_seconds: float
    max_streams: int
    label: str
    warmup: float = DEFAULT_WARMUP_SECONDS
    contexts_per_core: int = DEFAULT_CONTEXTS_PER_CORE

    @property
    def on_npu(self) -> bool:
        return self.plan.backend == "npu"

    def heading(self) -> list[str]:
        """The lines printed before the run."""
        video = "a clip made from a photo" if self.video.made else str(self.video.path)
        per_core = (
            f", {self.contexts_per_core} context{'' if self.contexts_per_core == 1 else 's'} per core"
            if self.on_npu
            else ""
        )
        return [
            f"rknnlaunch bench --streams: {self.label}{per_core}",
            f"  model {self.plan.model.name}; {video} ({self.video.shape} {self.video.codec}), looped, paced "
            f"as a camera; each step adds a stream and runs {self.warmup:g} s + {self.step_seconds:g} s "
            f"(up to {self.max_streams} streams)",
            f"  a step sustains its streams when each gets >= {KEEP_FRACTION:.0%} of {self.rate:g} "
            f"detections/s and p99 latency (frame arrival -> result) <= {self.bound_ms:.0f} ms; a count "
            "that falls short is measured once more",
        ]

    def run(self, on_step: Callable[[StreamStep], None] | None = None) -> StreamRamp:
        """Open the detector on the plan (the allocation's cores, or the CPU), make the clip if no
        video was given, and ramp."""
        with tempfile.TemporaryDirectory(prefix="rknnlaunch-bench-streams-") as folder:
            video = self.video
            if video.made:
                made = make_video(
                    Path(folder) / video.path.name,
                    video.codec,
                    (video.width, video.height),
                    frames=int(MADE_CLIP_SECONDS * video.fps),
                    fps=int(video.fps),
                )
                video = dataclasses.replace(probe_video(made), made=True)
            with Detector(
                self.plan.model,
                settings=self.settings,
                rknnlite=self.rknnlite,
                conf=self.pipeline.conf,
                iou=self.pipeline.iou,
                pad=self.pipeline.pad_value,
                launch_plan=self.plan,
                contexts_per_core=self.contexts_per_core,
            ) as detector:
                context = f"{self.label}, {detector.size} context{'' if detector.size == 1 else 's'}"
                per_core = self.contexts_per_core if self.on_npu else None
                if per_core is not None:
                    context += f" ({per_core} per core)"
                ramp = StreamRamp(
                    video,
                    self.rate,
                    self.bound_ms,
                    context,
                    max_streams=self.max_streams,
                    contexts=detector.size,
                    contexts_per_core=per_core,
                )
                return run_ramp(detector, ramp, self.step_seconds, self.warmup, on_step)
