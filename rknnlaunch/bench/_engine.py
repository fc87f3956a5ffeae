"""The bench's runner: timed pre/infer/post per case, through one `Opener`.

Honest by construction: every iteration letterboxes the source image, runs the model and decodes
its fresh outputs (nothing is cached across iterations), times with `time.perf_counter_ns`, and
keeps warm-up iterations out of the statistics (they are reported separately). Runtimes and pools
come from an injected `Opener`, so the NPU path is testable with fakes.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .._errors import BackendUnavailableError, RknnLaunchError
from ..yolo import Letterboxer, YoloDecoder
from ._cases import BenchCase

STAGES = ("pre", "infer", "post", "total")


class BenchRuntime(Protocol):
    """The part of a `rknnlaunch.Runtime` the bench uses."""

    label: str

    def infer(self, x: Any) -> list[np.ndarray[Any, Any]]: ...

    def close(self) -> None: ...


OpenRuntime = Callable[[frozenset[int] | None], BenchRuntime]
"""Opens one runtime on exactly these NPU cores (None: the CPU backend / the default)."""
MakePipeline = Callable[[], tuple[Letterboxer, YoloDecoder]]
"""A fresh letterboxer + decoder (one per thread: the letterbox buffer is reused)."""
Progress = Callable[[str, int, int], None]
"""progress(case name, iterations done, iterations total) - called from worker threads too."""


class StreamResult(Protocol):
    """The part of a `rknnlaunch.DetectResult` the bench reads."""

    @property
    def detections(self) -> Sized: ...

    @property
    def timings(self) -> Any: ...


class StreamPool(Protocol):
    """The part of a `rknnlaunch.Detector` the bench uses (letterbox/infer/decode in its workers)."""

    label: str

    def stream(self, frames: Iterable[Any]) -> Iterator[StreamResult]: ...

    def close(self) -> None: ...


OpenPool = Callable[[BenchCase], StreamPool]
"""Opens a detector pool for a ``stream`` case (`Opener.open_pool`)."""


class Opener(Protocol):
    """How the runner gets what it times: one runtime on a core set, or a detector pool for a
    ``stream`` case (its workers and contexts per core)."""

    def open_runtime(self, cores: frozenset[int] | None) -> BenchRuntime: ...

    def open_pool(self, case: BenchCase) -> StreamPool: ...


@dataclass
class CaseResult:
    """Raw per-iteration timings of one case, in nanoseconds, warm-up excluded."""

    case: BenchCase
    label: str = ""
    warmup_ns: list[int] = field(default_factory=list)
    pre_ns: list[int] = field(default_factory=list)
    infer_ns: list[int] = field(default_factory=list)
    post_ns: list[int] = field(default_factory=list)
    total_ns: list[int] = field(default_factory=list)
    wall_ns: int = 0
    detections: int = 0
    error: str | None = None

    @property
    def iterations(self) -> int:
        return len(self.total_ns)

    @property
    def fps(self) -> float:
        """Frames per second over the timed wall-clock span (pools overlap frames)."""
        return self.iterations / (self.wall_ns / 1e9) if self.wall_ns > 0 else 0.0

    def record(self, pre_ns: int, infer_ns: int, post_ns: int, detections: int) -> None:
        """Add one timed (not warm-up) frame."""
        self.pre_ns.append(pre_ns)
        self.infer_ns.append(infer_ns)
        self.post_ns.append(post_ns)
        self.total_ns.append(pre_ns + infer_ns + post_ns)
        self.detections = detections

    def stage(self, name: str) -> list[int]:
        values: list[int] = getattr(self, f"{name}_ns")
        return values

    def stats(self) -> dict[str, dict[str, float]]:
        return {name: summarise(self.stage(name)) for name in STAGES}


def summarise(values_ns: Sequence[int]) -> dict[str, float]:
    """p50/p90/p99/mean/min/max in milliseconds (all 0.0 when there are no values)."""
    if not values_ns:
        return dict.fromkeys(("p50_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms", "max_ms"), 0.0)
    ms = np.asarray(values_ns, np.float64) / 1e6
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p99_ms": float(p99),
        "mean_ms": float(ms.mean()),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
    }


def _one_frame(
    runtime_infer: Callable[[Any], list[np.ndarray[Any, Any]]],
    image: npt.NDArray[np.uint8],
    boxer: Letterboxer,
    decoder: YoloDecoder,
) -> tuple[int, int, int, int]:
    start = time.perf_counter_ns()
    tensor, info = boxer(image)
    letterboxed = time.perf_counter_ns()
    outputs = runtime_infer(tensor)
    inferred = time.perf_counter_ns()
    found = decoder(outputs, info)
    done = time.perf_counter_ns()
    return letterboxed - start, inferred - letterboxed, done - inferred, len(found)


def run_single(
    case: BenchCase,
    open_runtime: OpenRuntime,
    image: npt.NDArray[np.uint8],
    make_pipeline: MakePipeline,
    warmup: int,
    iterations: int,
    progress: Progress | None = None,
) -> CaseResult:
    """Warm up, then time ``iterations`` frames one after another on one runtime."""
    result = CaseResult(case)
    runtime = open_runtime(case.cores)
    try:
        result.label = runtime.label
        boxer, decoder = make_pipeline()
        total = warmup + iterations
        span_start = 0
        for index in range(total):
            if index == warmup:
                span_start = time.perf_counter_ns()
            pre, infer, post, found = _one_frame(runtime.infer, image, boxer, decoder)
            if index < warmup:
                result.warmup_ns.append(pre + infer + post)
            else:
                result.record(pre, infer, post, found)
            if progress is not None:
                progress(case.name, index + 1, total)
        result.wall_ns = time.perf_counter_ns() - span_start if iterations else 0
    finally:
        runtime.close()
    return result


def run_pool(
    case: BenchCase,
    open_runtime: OpenRuntime,
    image: npt.NDArray[np.uint8],
    make_pipeline: MakePipeline,
    warmup: int,
    iterations: int,
    progress: Progress | None = None,
) -> CaseResult:
    """``case.threads`` threads share one runtime per core: each thread letterboxes, takes a free
    runtime, infers (the wait for a free runtime counts as infer), gives it back and decodes.

    Warm-up: ``warmup`` frames per runtime in total (at least; rounded up to whole frames per
    thread), shared out by the free-runtime queue, before the timed span, which all threads start
    together at a barrier. FPS = timed frames / timed wall clock.
    """
    result = CaseResult(case)
    runtimes: list[BenchRuntime] = []
    try:
        for cores in case.instances:
            runtimes.append(open_runtime(cores))
        result.label = " + ".join(runtime.label for runtime in runtimes)
        free: queue.SimpleQueue[BenchRuntime] = queue.SimpleQueue()
        for runtime in runtimes:
            free.put(runtime)

        def pooled_infer(tensor: Any) -> list[np.ndarray[Any, Any]]:
            runtime = free.get()
            try:
                return runtime.infer(tensor)
            finally:
                free.put(runtime)

        threads = max(1, case.threads)
        warm_each = -(-warmup * len(runtimes) // threads)  # ceil(warmup x runtimes / threads)
        total = warm_each * threads + iterations
        lock = threading.Lock()
        counter = {"next": 0, "done": 0}
        span: list[int] = []
        failures: list[BaseException] = []
        start_line = threading.Barrier(threads, action=lambda: span.append(time.perf_counter_ns()))

        def tick() -> None:
            if progress is not None:
                with lock:
                    counter["done"] += 1
                    done = counter["done"]
                progress(case.name, done, total)

        def worker() -> None:
            boxer, decoder = make_pipeline()
            try:
                for _ in range(warm_each):
                    pre, infer, post, _found = _one_frame(pooled_infer, image, boxer, decoder)
                    with lock:
                        result.warmup_ns.append(pre + infer + post)
                    tick()
                start_line.wait()
                while True:
                    with lock:
                        if counter["next"] >= iterations or failures:
                            return
                        counter["next"] += 1
                    pre, infer, post, found = _one_frame(pooled_infer, image, boxer, decoder)
                    with lock:
                        result.record(pre, infer, post, found)
                    tick()
            except threading.BrokenBarrierError:
                return
            except BaseException as exc:
                with lock:
                    failures.append(exc)
                start_line.abort()

        workers: list[threading.Thread] = []
        try:
            # Started inside the try: fast workers can see Ctrl-C arrive before the last one starts.
            for i in range(threads):
                workers.append(threading.Thread(target=worker, name=f"bench-{i}"))
                workers[-1].start()
            for thread in workers:
                thread.join()
        except BaseException as exc:  # Ctrl-C in the main thread: stop the workers before closing
            with lock:
                failures.append(exc)
            start_line.abort()
            for thread in workers:
                if thread.ident is not None:
                    thread.join()
            raise
        if failures:
            raise failures[0]
        result.wall_ns = time.perf_counter_ns() - span[0] if span and iterations else 0
    finally:
        for runtime in runtimes:
            runtime.close()
    return result


def run_stream(
    case: BenchCase,
    open_pool: OpenPool,
    image: npt.NDArray[np.uint8],
    warmup: int,
    iterations: int,
    progress: Progress | None = None,
) -> CaseResult:
    """``warmup`` frames per context untimed, then ``iterations`` frames streamed through the pool
    (ordered, bounded in flight); stage times come from each result's own timings, and the wait
    for a free context counts as infer, as in the ``pool`` case."""
    result = CaseResult(case)
    pool = open_pool(case)
    try:
        result.label = pool.label
        warm = warmup * max(len(case.instances), 1)
        total = warm + iterations
        done = 0
        for found in pool.stream(itertools.repeat(image, warm)):
            t = found.timings
            result.warmup_ns.append(int((t.pre_ms + t.queue_ms + t.infer_ms + t.post_ms) * 1e6))
            done += 1
            if progress is not None:
                progress(case.name, done, total)
        start = time.perf_counter_ns()
        for found in pool.stream(itertools.repeat(image, iterations)):
            t = found.timings
            infer = t.queue_ms + t.infer_ms
            result.record(int(t.pre_ms * 1e6), int(infer * 1e6), int(t.post_ms * 1e6), len(found.detections))
            done += 1
            if progress is not None:
                progress(case.name, done, total)
        result.wall_ns = time.perf_counter_ns() - start if iterations else 0
    finally:
        pool.close()
    return result


def run_cases(
    cases: Sequence[BenchCase],
    opener: Opener,
    image: npt.NDArray[np.uint8],
    make_pipeline: MakePipeline,
    warmup: int,
    iterations: int,
    progress: Progress | None = None,
) -> list[CaseResult]:
    """Run every case in turn. A case whose runtime fails to open or run is recorded with its
    error (the message says what to do) and the others still run; a missing backend (no
    rknn-toolkit-lite2 / onnxruntime) stops the run at once, as no case could succeed."""
    results = []
    for case in cases:
        try:
            if case.kind == "stream":
                results.append(run_stream(case, opener.open_pool, image, warmup, iterations, progress))
            else:
                runner = run_pool if case.kind == "pool" else run_single
                results.append(
                    runner(case, opener.open_runtime, image, make_pipeline, warmup, iterations, progress)
                )
        except BackendUnavailableError:
            raise
        except RknnLaunchError as exc:
            results.append(CaseResult(case, error=str(exc)))
    return results
