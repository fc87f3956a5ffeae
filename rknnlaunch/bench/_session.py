"""One bench run from its options: the plan, the cases, the opener, the run, and its report."""

from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import UsageError
from .._files import PLOT_SUFFIXES, check_output
from .._version import __version__
from ..model import resolve_model, sha256
from ..npu import LIBRKNNRT_PATH, HostRoot, find_librknnrt, format_cores
from ..pipeline import ModelPipeline
from ..runtime import LaunchPlan, RknnLiteFactory, plan
from ..settings import NpuSettings
from ..yolo import check_image, read_image
from ._board import Governors, PublishedFigure, governor_warnings, published_figure, read_governors
from ._cases import BenchCase, plan_cases
from ._engine import Progress, run_cases
from ._opener import PlanOpener
from ._report import BenchReport
from ._streams import (
    DEFAULT_CONTEXTS_PER_CORE,
    DEFAULT_MAX_STREAMS,
    DEFAULT_STEP_SECONDS,
    StreamBench,
    check_ramp_options,
)
from ._video import VideoInfo, probe_video

CPU_DEFAULTS = (3, 20)
"""(warm-up, iterations) on the CPU: the README's first command must finish quickly on 2 cores."""
NPU_DEFAULTS = (20, 200)


@dataclass(frozen=True)
class BenchOptions:
    """What the user asked for (the command's flags); None: this backend's default."""

    model: str | None = None
    backend: str = "auto"
    image: str | None = None
    iterations: int | None = None
    warmup: int | None = None
    threads: int | None = None
    all_cores: bool = False
    pools: bool = True
    process_pool: bool = True
    conf: float = 0.25
    iou: float = 0.45
    pad: int | None = None
    json: str | None = None
    plot: str | None = None
    streams: bool = False
    """`bench --streams`: how many streams of one video the allocation sustains (`prepare_streams`)."""
    video: str | None = None
    rate: float | None = None
    latency_bound_ms: float | None = None
    step_seconds: float | None = None
    max_streams: int | None = None
    contexts_per_core: int | None = None
    """`bench --streams`: NPU contexts per core (None: `DEFAULT_CONTEXTS_PER_CORE`, 2)."""


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


BOUNDS: dict[str, tuple[int, str]] = {
    "-n": (
        100_000,
        "the report keeps every frame's latencies; 100000 frames is about 17 min per case at 100 FPS",
    ),
    "--warmup": (10_000, "the NPU's clocks and caches settle within a few dozen frames"),
    "--threads": (256, "a pool has a few runtimes per NPU core; more threads only wait in its queue"),
}
"""Each count flag's upper bound and its reason: a larger value is a typo, not a benchmark."""


def _at_least(value: int | None, default: int, flag: str, minimum: int = 1) -> int:
    """``value`` (None: ``default``) when it is within ``minimum`` .. the flag's maximum, else a
    `UsageError` naming the bound and its reason."""
    if value is None:
        return default
    if value < minimum:
        raise UsageError(f"{flag} {value} is too small", f"use {flag} {minimum} or more")
    maximum, why = BOUNDS[flag]
    if value > maximum:
        raise UsageError(
            f"{flag} {value} is too large (at most {maximum}: {why})",
            f"use {flag} {minimum}..{maximum}",
        )
    return value


@dataclass(frozen=True)
class Bench:
    """A bench ready to run: everything checked, nothing opened yet (`prepare` builds it)."""

    options: BenchOptions
    plan: LaunchPlan
    pipeline: ModelPipeline
    image: npt.NDArray[np.uint8]
    image_source: str
    cases: list[BenchCase]
    opener: PlanOpener
    warmup: int
    iterations: int
    label: str
    versions: dict[str, Any]
    npu: dict[str, Any] | None
    governors: Governors | None
    published: PublishedFigure | None

    @property
    def long_run(self) -> bool:
        """Long enough to deserve a progress bar."""
        return (self.warmup + self.iterations) * len(self.cases) >= 50

    def heading(self) -> list[str]:
        """The lines printed before the run: backend, cores, versions, warnings, model, image."""
        lines = [self._title()]
        if self.governors is not None:
            lines += [f"  warning: {warning}" for warning in governor_warnings(self.governors)]
        meta = self.pipeline.metadata
        lines.append(
            f"  model {self.plan.model.name} ({meta['format']}, input {self.pipeline.input_width}x"
            f"{self.pipeline.input_height}), image {self.image_source}, "
            f"{self.warmup} warm-up + {self.iterations} timed frames per case"
        )
        return lines

    def _title(self) -> str:
        if self.npu is None:
            return f"rknnlaunch bench: {self.label}"
        library = self.versions.get("librknnrt") or {}
        where = (
            "--all-cores: node-level, outside the pod's allocation"
            if self.options.all_cores
            else self.npu["allocation"]["source"]
        )
        cores = format_cores(frozenset(self.npu["benchmarked_cores"]))
        return (
            f"rknnlaunch bench: {self.label} cores {cores} ({where})\n"
            f"  driver {self.npu['driver_version'] or 'unknown'}, librknnrt "
            f"{library.get('version') or 'not found'}, rknn-toolkit-lite2 "
            f"{self.versions.get('rknn_toolkit_lite2') or 'not installed'}"
        )

    def run(self, progress: Progress | None = None) -> BenchReport:
        """Run every case; the report holds the results and their context."""
        results = run_cases(
            self.cases, self.opener, self.image, self.pipeline.stages, self.warmup, self.iterations, progress
        )
        return BenchReport(
            results, self._context(), self.label, self.plan.model.name, self.iterations, self.published
        )

    def _context(self) -> dict[str, Any]:
        pipeline, image = self.pipeline, self.image
        return {
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "rknnlaunch_version": __version__,
            "backend": self.plan.backend,
            "label": self.label,
            "host": {
                "machine": platform.machine(),
                "system": platform.platform(),
                "python": platform.python_version(),
                "cpu_count": os.cpu_count(),
            },
            "npu": self.npu,
            "governors": self.governors.as_dict() if self.governors is not None else None,
            "published": self.published.as_dict() if self.published is not None else None,
            "runtime": self.versions,
            "model": {**pipeline.metadata, "sha256": sha256(self.plan.model)},
            "image": {
                "source": self.image_source,
                "width": int(image.shape[1]),
                "height": int(image.shape[0]),
            },
            "settings": {
                "warmup": self.warmup,
                "iterations": self.iterations,
                "conf_threshold": pipeline.conf,
                "iou_threshold": pipeline.iou,
                "pad_value": pipeline.pad_value,
                "input_width": pipeline.input_width,
                "input_height": pipeline.input_height,
                "clock": "time.perf_counter_ns",
            },
        }


def prepare(options: BenchOptions, settings: NpuSettings, rknnlite: RknnLiteFactory | None = None) -> Bench:
    """Check every option, plan the backend and the cases; opens nothing (a bad flag fails here, in
    seconds, not after minutes of benchmarking)."""
    for name, flag in STREAM_ONLY.items():
        if getattr(options, name) is not None:
            raise UsageError(f"{flag} is an option of bench --streams", f"add --streams, or drop {flag}")
    _at_least(options.threads, 1, "--threads")  # a bad value is an error on every backend, not only the pool
    _at_least(options.warmup, 0, "--warmup", minimum=0)
    _at_least(options.iterations, 1, "-n")
    _check_outputs(options.json, options.plot)  # before the model is looked for or anything opens
    # Every input by the one rule (exit 2, the flag named) before the NPU is looked for.
    model = resolve_model(options.model, "--model")
    if options.image is not None:
        check_image(options.image, "--image")
    if options.all_cores:
        settings = settings.model_copy(update={"core_mask": None, "cores": None})
    the_plan = plan(model, None, options.backend, settings, "per-core")
    # Validates --pad/--conf/--iou, and below the output paths, before any runtime is opened.
    pipeline = ModelPipeline.for_model(the_plan.model, options.pad, options.conf, options.iou)
    if options.image is None:
        image, image_source = synthetic_frame(), "synthetic 1280x720"
    else:
        image, image_source = read_image(options.image, "--image"), options.image
    target = the_plan.target
    npu_target = target if the_plan.backend == "npu" else None
    allocation = npu_target.allocation if npu_target is not None else None
    cases = plan_cases(
        allocation, threads=options.threads, pools=options.pools, process_pool=options.process_pool
    )
    warmup, iterations = NPU_DEFAULTS if npu_target is not None else CPU_DEFAULTS
    if npu_target is not None:
        label = f"NPU {npu_target.info.soc.name}"
    else:
        label = f"CPU (onnxruntime): {the_plan.cpu_reason}"
    return Bench(
        options,
        the_plan,
        pipeline,
        image,
        image_source,
        cases,
        PlanOpener(the_plan, settings, pipeline, rknnlite),
        _at_least(options.warmup, warmup, "--warmup", minimum=0),
        _at_least(options.iterations, iterations, "-n"),
        label,
        _versions(the_plan.backend, target.host if target is not None else None),
        _npu_context(the_plan, options.all_cores) if npu_target is not None else None,
        read_governors(target.host, target.info) if target is not None else None,
        published_figure(the_plan.model.name, target.info.soc.name) if target is not None else None,
    )


STREAM_ONLY = {
    "video": "--video",
    "rate": "--rate",
    "latency_bound_ms": "--latency-bound",
    "step_seconds": "--step-seconds",
    "max_streams": "--max-streams",
    "contexts_per_core": "--contexts-per-core",
}
"""Options that mean something only with ``--streams``."""
FRAME_ONLY = {"image": "--image", "iterations": "-n", "warmup": "--warmup", "threads": "--threads"}
"""Options of the per-frame bench that ``--streams`` does not use."""
MADE_CLIP = VideoInfo(Path("panned-photo-1280x720.mp4"), 1280, 720, 25.0, "h264", made=True)
"""The clip `bench --streams` makes when no ``--video`` is given (H.264 720p25, 10 s)."""


def prepare_streams(
    options: BenchOptions, settings: NpuSettings, rknnlite: RknnLiteFactory | None = None
) -> StreamBench:
    """`bench --streams`: every option and the video checked, the backend planned; opens nothing."""
    for name, flag in FRAME_ONLY.items():
        if getattr(options, name) is not None:
            raise UsageError(
                f"{flag} is for the per-frame bench, not --streams",
                "drop it (--streams plays --video, or a clip it makes, and measures whole streams)",
            )
    _check_outputs(options.json, options.plot)
    model = resolve_model(options.model, "--model")  # the one input rule, before the video is probed
    video = probe_video(options.video) if options.video is not None else _check_clip_tools()
    step_seconds = DEFAULT_STEP_SECONDS if options.step_seconds is None else options.step_seconds
    max_streams = DEFAULT_MAX_STREAMS if options.max_streams is None else options.max_streams
    rate, bound = check_ramp_options(video, options.rate, options.latency_bound_ms, step_seconds, max_streams)
    if options.all_cores:
        settings = settings.model_copy(update={"core_mask": None, "cores": None})
    per_core = DEFAULT_CONTEXTS_PER_CORE if options.contexts_per_core is None else options.contexts_per_core
    the_plan = plan(model, None, options.backend, settings, "per-core", per_core)
    pipeline = ModelPipeline.for_model(the_plan.model, options.pad, options.conf, options.iou)
    target = the_plan.target if the_plan.backend == "npu" else None
    if target is not None:
        cores = format_cores(target.allocation.cores)
        label = f"NPU {target.info.soc.name} cores {cores} ({target.allocation.source})"
    else:
        label = f"CPU (onnxruntime): {the_plan.cpu_reason}"
    return StreamBench(
        the_plan,
        settings,
        pipeline,
        rknnlite,
        video,
        rate,
        bound,
        step_seconds,
        max_streams,
        label,
        contexts_per_core=per_core,
    )


def _check_clip_tools() -> VideoInfo:
    """The made clip's description, once PyAV and what makes the clip are known to be installed."""
    missing = [name for name in ("av", "cv2", "matplotlib") if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"bench --streams makes its clip with PyAV, OpenCV and matplotlib; missing: {', '.join(missing)}",
            "pip install 'rknnlaunch[video,vision,bench]', or pass --video FILE",
        )
    return MADE_CLIP


def _check_outputs(json_path: str | None, plot_path: str | None) -> None:
    """Refuse unwritable report paths up front, not after minutes of benchmarking."""
    check_output(json_path, "--json", example="bench.json")
    check_output(plot_path, "--plot", suffixes=PLOT_SUFFIXES, example="bench.png")
    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        raise UsageError(
            f"--plot {plot_path} needs matplotlib, which is not installed",
            "pip install 'rknnlaunch[bench]', or drop --plot",
        )


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


def _npu_context(the_plan: LaunchPlan, all_cores: bool) -> dict[str, Any] | None:
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
        "benchmarked_cores": sorted(allocation.cores),
        "all_cores": all_cores,
    }
