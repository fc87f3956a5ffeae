"""Sample inference app: frames (files, cameras, RTSP) -> YOLOv8 via rknnlaunch -> logged detections and FPS.

Runs on the NPU cores the device plugin allocated to this pod (``rknnlaunch.Detector`` reads the
injected ``RKNN_NPU_*`` settings; letterbox, inference and decode run in one worker per core), or on
the CPU backend with an ``.onnx`` model (``--backend cpu``). Decoding, reconnecting and dropping
stale frames are `rknnlaunch.streams`' (docs/streams.md): this app only logs what comes out.
Every option also reads an environment variable (``SOURCE``, ``MODEL``, ...) so manifests can set
them without rewriting the command. Exit status: 0 done, 1 failure (message says what to do), 2
usage error.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

import rknnlaunch
from rknnlaunch.streams import Source, StreamEvent, StreamResult, Watcher
from rknnlaunch.yolo import COCO_NAMES, Detections, class_name
from rknnlaunch.yolo import class_count as yolo_class_count

log = logging.getLogger("detect")

Frame = npt.NDArray[np.uint8]
STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")


class SourceError(rknnlaunch.RknnLaunchError):
    """No source delivered a frame (every one failed; the events logged above say why)."""


class FrameDetector(Protocol):
    """What the app needs from `rknnlaunch.Detector`: a label, ``submit``/``size`` (what
    `rknnlaunch.streams.Watcher` drives) and ``with``."""

    label: str

    @property
    def size(self) -> int: ...

    def submit(
        self, frame: Any, index: int | None = None, dropped: int = 0
    ) -> Future[rknnlaunch.DetectResult]: ...

    def __enter__(self) -> FrameDetector: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


OpenDetector = Callable[[argparse.Namespace], FrameDetector]


def open_detector(args: argparse.Namespace) -> FrameDetector:
    """Letterbox, inference and decode in one worker per allocated core (threads or processes)."""
    detector: FrameDetector = rknnlaunch.Detector(
        args.model,
        backend=args.backend,
        conf=args.conf,
        iou=args.iou,
        pad=args.pad,
        workers=args.workers,
    )
    return detector


# --- frame sources ------------------------------------------------------------------------------


def is_stream(source: str) -> bool:
    return source.lower().startswith(STREAM_SCHEMES)


def stream_sources(args: argparse.Namespace) -> list[Source]:
    """The app's sources as `rknnlaunch.streams` sources: a camera index is its V4L2 device; files
    are detected frame by frame unless ``--latest-only yes`` (then read at their own rate, as a
    camera would send them, dropping what the cores cannot take)."""
    sources = []
    for given in args.source:
        url = f"/dev/video{given}" if given.isdigit() else given
        live = is_stream(url) or url.startswith("/dev/video")
        keep_up = latest_only_for(args.latest_only, live)
        sources.append(Source(url, loop=args.loop, every_frame=not keep_up))
    return sources


# --- FPS and detection logging (pure) -----------------------------------------------------------


@dataclass
class StageTimes:
    """Seconds spent per stage since the last report."""

    pre: float = 0.0
    infer: float = 0.0
    post: float = 0.0


@dataclass
class FpsMeter:
    """Counts frames and stage times; ``due(now)`` says when the next periodic report is owed."""

    interval_s: float
    started: float
    frames: int = 0
    total_frames: int = 0
    window_start: float = 0.0
    times: StageTimes = field(default_factory=StageTimes)
    objects: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.window_start = self.started

    def add(self, pre: float, infer: float, post: float, names: Sequence[str]) -> None:
        self.frames += 1
        self.total_frames += 1
        self.times.pre += pre
        self.times.infer += infer
        self.times.post += post
        self.objects.update(names)

    def due(self, now: float) -> bool:
        return self.frames > 0 and now - self.window_start >= self.interval_s

    def report(self, now: float) -> str:
        """One log line for the frames since the last report, then start a new window."""
        elapsed = max(now - self.window_start, 1e-9)
        n = max(self.frames, 1)
        counts = ", ".join(f"{name} {count}" for name, count in self.objects.most_common()) or "none"
        line = (
            f"{self.frames / elapsed:.1f} FPS over {elapsed:.1f} s ({self.frames} frames, "
            f"{self.total_frames} total); per frame: pre {1000 * self.times.pre / n:.1f} ms, "
            f"queue+infer {1000 * self.times.infer / n:.1f} ms, "
            f"post {1000 * self.times.post / n:.1f} ms; "
            f"objects: {counts}"
        )
        self.frames = 0
        self.window_start = now
        self.times = StageTimes()
        self.objects = Counter()
        return line


def label_of(class_id: int, names: Sequence[str] | None) -> str:
    """The name of a class, else ``class N`` (the SDK's `rknnlaunch.yolo.class_name`, as `detect` prints)."""
    return class_name(class_id, names)


def describe(detections: Detections, names: Sequence[str] | None, limit: int = 10) -> str:
    """``3 objects: person 0.91 [12,40,200,380], ...`` (highest scores first, at most ``limit``)."""
    count = len(detections)
    if count == 0:
        return "0 objects"
    parts = []
    for box, score, class_id in list(
        zip(detections.boxes, detections.scores, detections.class_ids, strict=True)
    )[:limit]:
        x1, y1, x2, y2 = (round(float(v)) for v in box)
        parts.append(f"{label_of(int(class_id), names)} {float(score):.2f} [{x1},{y1},{x2},{y2}]")
    more = f", +{count - limit} more" if count > limit else ""
    return f"{count} object{'s' if count != 1 else ''}: " + ", ".join(parts) + more


FROM_MODEL = "model"
"""``--labels model`` (the default): the names each result carries, by the SDK's one rule (the
model's own names, from its metadata or what `rknnlaunch convert` embedded; COCO's 80 for an
80-class model without names; else class ids), exactly as ``rknnlaunch detect`` prints them."""


def load_labels(spec: str) -> tuple[str, ...] | None:
    """``coco`` -> the 80 COCO names, ``none`` -> numeric ids, else a file with one name per line
    (``model`` is not loaded here: the results carry those names)."""
    if spec.lower() == "coco":
        return COCO_NAMES
    if spec.lower() == "none":
        return None
    try:
        lines = Path(spec).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise rknnlaunch.UsageError(
            f"cannot read labels file {spec}: {exc.strerror}",
            "pass --labels coco, --labels none, or a file with one class name per line",
        ) from None
    return tuple(line.strip() for line in lines if line.strip())


def class_count(shapes: Sequence[tuple[int, ...]]) -> int | None:
    """How many classes a YOLOv8 model predicts, from its output shapes (None if not YOLOv8)."""
    try:
        return yolo_class_count(shapes)
    except rknnlaunch.RknnLaunchError:
        return None


def fit_labels(
    names: tuple[str, ...] | None, classes: int | None, spec: str
) -> tuple[tuple[str, ...] | None, str | None]:
    """Labels that match the model, and a warning when they did not (then ids are logged)."""
    if names is None or classes is None or len(names) == classes:
        return names, None
    return None, (
        f"--labels {spec} has {len(names)} names but the model predicts {classes} classes: "
        f"logging class ids instead (pass --labels FILE with one name per line)"
    )


# --- the app ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get  # string defaults: argparse converts them, so a bad env value is a usage error
    parser = argparse.ArgumentParser(prog="detect", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source",
        nargs="+",
        default=env("SOURCE", "/app/model/sample.jpg").split(),
        help="image/video files, camera indexes or rtsp:// URLs, one or more, each its own stream (env "
        "SOURCE, separated by spaces); a password is best given as ${VAR} in the URL (docs/streams.md)",
    )
    parser.add_argument(
        "--model",
        default=env("MODEL", "/app/model/yolov8n.rknn"),
        help=".rknn model (NPU) or .onnx (CPU backend) (env MODEL)",
    )
    parser.add_argument(
        "--backend",
        default=env("BACKEND", "auto"),
        choices=("auto", "npu", "cpu"),
        help="auto: the NPU when present, else the CPU (env BACKEND)",
    )
    parser.add_argument(
        "--labels",
        default=env("LABELS", FROM_MODEL),
        help="model (default: the names the model carries, as `rknnlaunch detect` shows them), coco, "
        "none, or a file with one class name per line (env LABELS)",
    )
    parser.add_argument(
        "--conf", type=float, default=env("CONF", "0.25"), help="confidence threshold (env CONF)"
    )
    parser.add_argument("--iou", type=float, default=env("IOU", "0.45"), help="NMS IoU threshold")
    parser.add_argument(
        "--workers",
        default=env("WORKERS", "thread"),
        choices=("thread", "process"),
        help="one worker thread or process per NPU core; process scales letterbox/decode over "
        "the CPUs (env WORKERS)",
    )
    parser.add_argument(
        "--latest-only",
        default=env("LATEST_ONLY", "auto"),
        choices=("auto", "yes", "no"),
        help="drop frames the NPU cannot keep up with instead of falling behind; auto: yes for "
        "cameras and streams, no for files (env LATEST_ONLY)",
    )
    parser.add_argument(
        "--pad",
        type=int,
        default=None,
        help="letterbox pad value; default: the model's (embedded by rknnlaunch convert, else 114 for "
        "Ultralytics heads, 0 for rknn_model_zoo heads)",
    )
    parser.add_argument(
        "--max-frames",
        type=int,
        default=env("MAX_FRAMES", "0"),
        help="stop after N frames; 0 = until the source ends (env MAX_FRAMES)",
    )
    parser.add_argument(
        "--loop",
        action="store_true",
        default=env("LOOP", "") in ("1", "true", "yes"),
        help="restart a file source at its end (env LOOP=1)",
    )
    parser.add_argument(
        "--log-every",
        type=float,
        default=env("LOG_EVERY", "5"),
        help="seconds between FPS/detection log lines (env LOG_EVERY)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every frame's detections")
    return parser


def latest_only_for(setting: str, live: bool) -> bool:
    """Live sources (camera, network stream) drop stale frames unless told otherwise; files do not."""
    if setting != "auto":
        return setting == "yes"
    return live


def latest_only(args: argparse.Namespace) -> bool:
    """Whether the (first) source drops the frames the cores cannot keep up with."""
    first = args.source[0]
    return latest_only_for(args.latest_only, is_stream(first) or first.isdigit())


def run(args: argparse.Namespace, open_detector: OpenDetector, stop: threading.Event) -> int:
    from_model = args.labels.lower() == FROM_MODEL
    names = None if from_model else load_labels(args.labels)
    clock = time.monotonic
    shown = ", ".join(source.shown for source in stream_sources(args))
    with open_detector(args) as detector, Watcher(stream_sources(args), detector) as watcher:
        log.info("model %s on %s; source %s", args.model, detector.label, shown)

        # SIGTERM (the `stop` event) ends the watch: frames in flight finish, then the summary.
        def stop_on_signal() -> None:
            stop.wait()
            watcher.stop()

        threading.Thread(target=stop_on_signal, daemon=True).start()
        meter = FpsMeter(interval_s=args.log_every, started=clock())
        labels: list[tuple[str, ...] | None] = []  # fitted to the model on the first result
        dropped = 0
        for item in watcher:
            if isinstance(item, StreamEvent):
                continue  # rknnlaunch.streams logs each state change itself
            if args.max_frames and meter.total_frames >= args.max_frames:
                continue  # frames still in flight when the limit was reached
            result: StreamResult = item
            if not labels:
                if from_model:
                    labels.append(result.detections.names)
                else:
                    fitted, warning = fit_labels(names, result.class_count, args.labels)
                    if warning:
                        log.warning("%s", warning)
                    labels.append(fitted)
            detections = result.detections
            timings = result.timings
            dropped += result.dropped
            meter.add(
                timings.pre_ms / 1000,
                (timings.queue_ms + timings.infer_ms) / 1000,
                timings.post_ms / 1000,
                [label_of(int(c), labels[0]) for c in detections.class_ids],
            )
            now = clock()
            shown_frame = args.verbose or meter.total_frames == 1
            if shown_frame:
                log.info("frame %d: %s", meter.total_frames, describe(detections, labels[0]))
            if meter.due(now):
                if not shown_frame:
                    log.info("frame %d: %s", meter.total_frames, describe(detections, labels[0]))
                log.info("%s", meter.report(now))
            if args.max_frames and meter.total_frames >= args.max_frames:
                watcher.stop()
        stop.set()  # releases the stop thread
        if meter.frames:
            log.info("%s", meter.report(clock()))
        if watcher.all_failed:
            raise SourceError(
                f"no source delivered a frame ({shown})", "see the failed lines above for each source's fix"
            )
        skipped = f" ({dropped} stale frames dropped)" if dropped else ""
        log.info("done: %d frames from %s%s", meter.total_frames, shown, skipped)
    return 0


def main(argv: Sequence[str] | None = None, open_detector: OpenDetector = open_detector) -> int:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    args = build_parser().parse_args(argv)
    stop = threading.Event()

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: finishing the current frame", signum)
        stop.set()

    # SIGTERM (pod deletion) finishes the current frame and logs the final FPS line.
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, _stop)
    try:
        return run(args, open_detector, stop)
    except rknnlaunch.RknnLaunchError as exc:
        log.error("%s", exc)
        return exc.exit_code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
