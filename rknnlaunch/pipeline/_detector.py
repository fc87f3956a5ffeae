"""`rknnlaunch.Detector`: letterbox -> infer -> decode inside the pool's workers, results in order.

Every stage of a frame runs in the worker that holds its context, so with ``workers="process"``
letterbox and decode scale across CPU cores as inference does across NPU cores. ``stream`` keeps
a bounded number of frames in flight (the source is not read ahead: back-pressure), or in
``latest_only`` mode reads the source as fast as it delivers and drops frames that would only
arrive late (live cameras).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._errors import UsageError
from ..model._metadata import class_names, resolve_model
from ..model._rknnfile import read_rknn
from ..runtime._choice import LaunchPlan
from ..runtime._open import Runtime
from ..runtime._pool import CpuAffinity, WorkerFront, WorkerGroup, WorkerKind
from ..runtime._workers import DEPTH, FactorySpec
from ..settings._env import NpuSettings
from ..yolo._decode import class_count
from ..yolo._masks import MaskResolution
from ..yolo._types import Detections
from ._spec import ModelPipeline, shown_names


@dataclass(frozen=True)
class StageTimings:
    """Where a frame's time went, in milliseconds. ``queue``: submitted until a worker took it;
    ``total``: submitted until its result was back (includes the hand-over both ways)."""

    queue_ms: float
    pre_ms: float
    infer_ms: float
    post_ms: float
    total_ms: float


@dataclass(frozen=True)
class DetectResult:
    """One frame's detections, in original-image pixels, with its timings."""

    index: int
    """Position of the frame in its stream (or the detector's submission count)."""
    detections: Detections
    timings: StageTimings
    context: str
    """The context that ran it, e.g. ``NPU rk3588 core 1 (mask 2)``."""
    dropped: int = 0
    """latest_only: frames of the source dropped since the previous result."""
    class_count: int | None = None
    """How many classes the model's outputs carry."""


@dataclass(frozen=True)
class _WorkerResult:
    detections: Detections
    started: float
    pre: float
    infer: float
    post: float
    context: str
    class_count: int | None


@dataclass(frozen=True)
class DetectTask:
    """The worker side of a `Detector` (picklable): its own letterboxer and decoder per worker."""

    pipeline: ModelPipeline

    def bind(self, runtime: Runtime) -> Callable[[np.ndarray[Any, Any]], Any]:
        boxer, decoder = self.pipeline.stages()
        if multiprocessing.parent_process() is not None:
            _one_opencv_thread()  # one process per context already fills the CPUs
        label = runtime.label
        classes: list[int | None] = []
        names: list[tuple[str, ...] | None] = []

        def detect(frame: np.ndarray[Any, Any]) -> _WorkerResult:
            started = time.perf_counter()
            tensor, info = boxer(frame)
            boxed = time.perf_counter()
            outputs = runtime.infer(tensor)
            inferred = time.perf_counter()
            found = decoder(outputs, info)
            done = time.perf_counter()
            if not classes:
                try:
                    classes.append(class_count([tuple(output.shape) for output in outputs]))
                except UsageError:
                    classes.append(None)
                names.append(shown_names(found.names, classes[0]))
            if found.names is None and names[0] is not None:
                found = replace(found, names=names[0])
            return _WorkerResult(
                found, started, boxed - started, inferred - boxed, done - inferred, label, classes[0]
            )

        return detect


def _one_opencv_thread() -> None:
    try:
        import cv2
    except ImportError:
        return
    cv2.setNumThreads(1)


def check_image(frame: Any) -> np.ndarray[Any, Any]:
    """A BGR uint8 H x W x 3 image as an array, or `UsageError` naming what was given."""
    array = frame if isinstance(frame, np.ndarray) else np.asarray(frame)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3 or 0 in array.shape:
        raise UsageError(
            f"frame is {array.dtype} of shape {array.shape}; the detector takes a BGR uint8 image "
            "of shape (H, W, 3) at any size",
            "pass frames as cv2.imread / cv2.VideoCapture.read return them",
        )
    return array


class Detector(WorkerFront):
    """YOLO detection on every allocated NPU core: ``detector(frame) -> Detections``.

    ``detect(frame)`` returns a `DetectResult` (detections, per-stage timings, the context);
    ``submit(frame) -> Future[DetectResult]``; ``stream(frames)`` yields results in input order
    with at most ``in_flight`` frames queued, or with ``latest_only=True`` drops stale frames.
    Model, cores, backend and the worker options are as for `rknnlaunch.Pool`; ``max_contexts``
    caps the contexts opened; ``one_context=True`` opens one context over the chosen cores instead
    (the latency path of `rknnlaunch.open`: one image at a time, each as fast as it can be).
    ``launch_plan``: a plan already made by the caller (tools that discovered the NPU once).
    ``pad`` None = the default for the model's format; ``conf``/``iou`` are the decoder's thresholds.
    ``task`` / ``layout`` force the YOLO task or output layout (default: from the model's metadata
    and output shapes, docs/yolo.md); ``masks`` "proto" or "image" for segmentation models.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        cores: Iterable[int] | str | None = None,
        backend: str = "auto",
        *,
        settings: NpuSettings | None = None,
        rknnlite: FactorySpec = None,
        contexts_per_core: int = 1,
        workers: WorkerKind = "thread",
        cpu_affinity: CpuAffinity = None,
        conf: float = 0.25,
        iou: float = 0.45,
        pad: int | None = None,
        max_contexts: int | None = None,
        one_context: bool = False,
        launch_plan: LaunchPlan | None = None,
        task: str | None = None,
        layout: str | None = None,
        masks: MaskResolution = "proto",
    ) -> None:
        path = resolve_model(model)
        if path.suffix.lower() != ".onnx":
            # Read first: a file that is no .rknn (bad magic, truncated) is named as such, not as a
            # missing .onnx twin when the CPU backend looks for one.
            read_rknn(path)
        if max_contexts is not None and max_contexts < 1:
            raise UsageError(f"max_contexts={max_contexts} opens nothing", "use 1 or more, or None for all")

        def make_task(plan: LaunchPlan) -> DetectTask:
            # The file the plan loads (the .onnx beside an .rknn on the CPU); checked before any
            # context opens.
            return DetectTask(
                ModelPipeline.for_model(plan.model, pad, conf, iou, task=task, layout=layout, masks=masks)
            )

        group = WorkerGroup(
            path,
            cores,
            backend,
            settings,
            rknnlite,
            contexts_per_core,
            workers,
            cpu_affinity,
            make_task,
            max_contexts=max_contexts,
            layout="one" if one_context else "per-core",
            launch_plan=launch_plan,
        )
        self._adopt(group)
        detect_task = group.task
        if not isinstance(detect_task, DetectTask):  # make_task above is the group's only factory
            raise TypeError(f"the detector's worker task is {type(detect_task).__name__}, not DetectTask")
        self.pipeline: ModelPipeline = detect_task.pipeline
        self.class_names: list[str] | None = class_names(self.pipeline.metadata)
        self._count = 0
        self._count_lock = threading.Lock()

    def submit(self, frame: Any, index: int | None = None, dropped: int = 0) -> Future[DetectResult]:
        """Queue one BGR frame; the Future resolves to its `DetectResult`."""
        image = check_image(frame)
        with self._count_lock:
            number = self._count if index is None else index
            self._count += 1
        submitted = time.perf_counter()
        inner = self._workers.submit(image)
        outer: Future[DetectResult] = Future()

        def finish(done: Future[Any]) -> None:
            error = done.exception()
            if error is not None:
                outer.set_exception(error)
                return
            result: _WorkerResult = done.result()
            timings = StageTimings(
                queue_ms=max(result.started - submitted, 0.0) * 1e3,
                pre_ms=result.pre * 1e3,
                infer_ms=result.infer * 1e3,
                post_ms=result.post * 1e3,
                total_ms=(time.perf_counter() - submitted) * 1e3,
            )
            outer.set_result(
                DetectResult(number, result.detections, timings, result.context, dropped, result.class_count)
            )

        outer.set_running_or_notify_cancel()
        inner.add_done_callback(finish)
        return outer

    def detect(self, frame: Any) -> DetectResult:
        """Detections and timings for one frame (blocks)."""
        return self.submit(frame).result()

    def __call__(self, frame: Any) -> Detections:
        """Detections for one frame, in its own pixels (blocks)."""
        return self.detect(frame).detections

    def stream(
        self, frames: Iterable[Any], in_flight: int | None = None, latest_only: bool = False
    ) -> Iterator[DetectResult]:
        """Results for ``frames`` in input order.

        At most ``in_flight`` frames (default 2 per context) are queued; the source is read only as
        results are taken (back-pressure). ``latest_only``: a reader thread takes frames as fast as
        the source delivers them and only the newest waiting frame is run; each result says how
        many frames were dropped before it. Errors of a frame are raised when its turn comes.
        """
        limit = max(1, in_flight if in_flight is not None else DEPTH * self.size)
        if latest_only:
            yield from self._latest_only(frames, limit)
            return
        pending: deque[Future[DetectResult]] = deque()
        try:
            for index, frame in enumerate(frames):
                pending.append(self.submit(frame, index))
                if len(pending) >= limit:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()

    def _latest_only(self, frames: Iterable[Any], limit: int) -> Iterator[DetectResult]:
        source = _LatestFrame(frames)
        pending: deque[Future[DetectResult]] = deque()
        try:
            while True:
                while len(pending) < limit:
                    taken = source.take(wait=not pending)
                    if taken is None:
                        break
                    index, frame, dropped = taken
                    pending.append(self.submit(frame, index, dropped))
                if not pending:
                    source.raise_error()
                    return
                yield pending.popleft().result()
        finally:
            source.stop()

    def __repr__(self) -> str:
        return f"<Detector {self.label!r}>"


class _LatestFrame:
    """A reader thread keeping only the newest frame of a source (and counting the ones it replaced)."""

    def __init__(self, frames: Iterable[Any]) -> None:
        self._frames = iter(frames)
        self._cond = threading.Condition()
        self._frame: Any = None
        self._index = -1
        self._dropped = 0
        self._done = False
        self._stopped = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, name="rknnlaunch-latest-frame", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for index, frame in enumerate(self._frames):
                with self._cond:
                    if self._stopped:
                        return
                    if self._frame is not None:
                        self._dropped += 1
                    self._frame, self._index = frame, index
                    self._cond.notify_all()
        except BaseException as exc:
            with self._cond:
                self._error = exc
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def take(self, wait: bool) -> tuple[int, Any, int] | None:
        """The newest frame (index, frame, dropped since the last take), or None when there is none
        (after waiting for one when ``wait``, until the source ends)."""
        with self._cond:
            if wait:
                self._cond.wait_for(lambda: self._frame is not None or self._done)
            if self._frame is None:
                return None
            taken = (self._index, self._frame, self._dropped)
            self._frame, self._dropped = None, 0
            return taken

    def raise_error(self) -> None:
        with self._cond:
            if self._error is not None:
                raise self._error

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
