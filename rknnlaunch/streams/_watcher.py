"""`Watcher`: many sources over one detector. Each stream keeps its newest frame; a scheduler thread
gives free core slots to the streams in turn; results and state events come out in one iterator."""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._errors import UsageError
from ..pipeline import DetectResult
from ._reader import DecodedFrame, Policy, StreamReader
from ._results import StreamEvent, StreamObserver, StreamResult, StreamStats
from ._sources import PlannedSource, Redactor, Source, plan_sources

log = logging.getLogger("rknnlaunch.streams")


class FrameDetector(Protocol):
    """What the watcher needs of `rknnlaunch.Detector`: ``submit`` and its number of contexts."""

    @property
    def size(self) -> int: ...

    def submit(self, frame: Any, index: int | None = None, dropped: int = 0) -> Future[DetectResult]: ...


@dataclass(frozen=True)
class _Failure:
    error: BaseException


_END = object()
WAKE_S = 0.2
"""The longest the iterating thread waits at once for a result (see `Watcher.results`)."""


class Watcher:
    """Watch many video sources with one `Detector`: ``for item in watcher`` yields `StreamResult`
    (a detected frame) and `StreamEvent` (a state change) as they happen.

    ``sources``: `Source` objects or source strings (file, ``rtsp://``, ``http(s)://``, ``udp://``,
    ``/dev/videoN``). Each is decoded by PyAV in its own thread (Rockchip MPP hardware decode when
    available, see `choose_decoder`); only its newest frame waits for a core (the ones it replaces
    are counted in ``dropped``); free cores go to the streams in turn. Failing sources are reopened
    with capped exponential backoff (``policy``); a stalled one never holds up another.

    ``credentials``: host -> (user, password) for URLs that carry none (`read_credentials`);
    ``environ``: where ``${NAME}`` in a source is looked up (default `os.environ`); ``host_root``:
    where ``/dev/mpp_service`` is looked for; ``observers``: `StreamObserver` s called with every
    item (a live view, metrics); ``in_flight``: frames submitted to the detector at once (default
    one per context: a frame waits in its stream's slot, where a newer one replaces it, rather than
    in the detector's queue; open the detector with ``contexts_per_core=2`` so a core infers one
    context's frame while the other's is prepared); ``keep_images``: results carry their frame
    (``result.image``).

    Use it as a context manager, or call `close`. `run` consumes everything (observers only);
    `stats` gives every stream's figures at any time; `stop` (any thread) ends the iteration after
    the frames in flight are done.
    """

    def __init__(
        self,
        sources: Iterable[Source | str],
        detector: FrameDetector,
        *,
        policy: Policy | None = None,
        host_root: str | os.PathLike[str] = "/",
        environ: Mapping[str, str] | None = None,
        credentials: Mapping[str, tuple[str, str]] | None = None,
        observers: Sequence[StreamObserver] = (),
        in_flight: int | None = None,
        keep_images: bool = True,
    ) -> None:
        given = [source if isinstance(source, Source) else Source(source) for source in sources]
        if not given:
            raise UsageError("no source to watch", "give at least one file, URL or /dev/videoN")
        self._detector = detector
        self._policy = policy or Policy()
        self._redact = Redactor()
        self.planned: list[PlannedSource] = plan_sources(given, environ, credentials)
        for planned in self.planned:
            self._redact.add_url(planned.source.url)
            self._redact.add_url(planned.url)
        self._out: queue.Queue[Any] = queue.Queue()
        self._cond = threading.Condition()
        self._readers = [
            StreamReader(planned, self._policy, os.fspath(host_root), self._redact, self._out.put, self._wake)
            for planned in self.planned
        ]
        # One frame per context by default, not `Detector.stream`'s two: a second frame per context
        # would only wait in the detector's queue, ageing, where a newer frame cannot replace it
        # (p99 148 -> 111 ms at 18 streams on the simulated RK3588 with 2 contexts per core,
        # throughput unchanged: benchmarks/streams_bench.py).
        self._limit = max(1, in_flight if in_flight is not None else max(detector.size, 1))
        self._in_flight = 0
        self._per_stream = dict.fromkeys(range(len(self._readers)), 0)
        # Results of one stream come out in frame order: a frame finished before an older one of the
        # same stream waits here for it (at most the stream's frames in flight).
        self._submitted = dict.fromkeys(range(len(self._readers)), 0)
        self._emitted = dict.fromkeys(range(len(self._readers)), 0)
        self._finished_early: dict[tuple[int, int], Any] = {}
        self._order_lock = threading.Lock()
        self._turn = 0
        self._stopping = False
        self._started = False
        self._finished = False
        self._keep_images = keep_images
        self._observers = list(observers)
        self._broken_observers: set[int] = set()
        self._scheduler = threading.Thread(
            target=self._schedule, name="rknnlaunch-streams-scheduler", daemon=True
        )

    # --- public -------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The streams' names, in the order the sources were given."""
        return [reader.name for reader in self._readers]

    def add_observer(self, observer: StreamObserver) -> None:
        """Also call ``observer`` with every later item (before iterating, to see every event)."""
        self._observers.append(observer)

    def start(self) -> None:
        """Start the readers and the scheduler (iterating starts them too)."""
        if self._started:
            return
        self._started = True
        for reader in self._readers:
            reader.start()
        self._scheduler.start()

    def __iter__(self) -> Iterator[StreamResult | StreamEvent]:
        return self.results()

    def results(self, duration: float | None = None) -> Iterator[StreamResult | StreamEvent]:
        """Every result and event until all streams ended or failed, `stop` was called, or
        ``duration`` seconds passed (then the frames in flight still come out)."""
        if duration is not None and (math.isnan(duration) or duration <= 0):
            raise UsageError(f"duration {duration} is no time to watch", "give a positive number of seconds")
        self.start()
        deadline = None if duration is None else time.monotonic() + duration
        while not self._finished:
            # Never an unbounded wait: a Ctrl-C the kernel delivers to a decoder's or a runtime's
            # thread only flags the main thread, which must wake to raise it (a hang under load).
            wait = WAKE_S
            if deadline is not None and not self._stopping:
                wait = min(max(deadline - time.monotonic(), 0.0), WAKE_S)
            try:
                item = self._out.get(timeout=wait)
            except queue.Empty:
                if deadline is not None and not self._stopping and time.monotonic() >= deadline:
                    self.stop()
                continue
            if item is _END:
                self._finished = True
                break
            if isinstance(item, _Failure):
                self.stop()
                raise item.error
            self._notify(item)
            yield item

    def run(self, duration: float | None = None) -> dict[str, StreamStats]:
        """Watch until the end (as `results`), feeding only the observers; returns `stats`."""
        for _ in self.results(duration):
            pass
        return self.stats()

    def stats(self) -> dict[str, StreamStats]:
        """Every stream's figures now, by name (thread-safe)."""
        now = time.monotonic()
        return {reader.name: reader.stats(now) for reader in self._readers}

    @property
    def all_failed(self) -> bool:
        """Every stream ended in ``failed`` (a command should exit non-zero)."""
        return all(reader.state == "failed" for reader in self._readers)

    def stop(self) -> None:
        """End the watch: readers stop, frames in flight finish (callable from any thread)."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
        for reader in self._readers:
            reader.stop()

    def close(self, timeout: float = 2.0) -> None:
        """Stop and wait (up to ``timeout`` seconds) for the threads; a reader blocked in a read
        ends at its read timeout on its own."""
        self.stop()
        if not self._started:
            return
        deadline = time.monotonic() + timeout
        self._scheduler.join(max(deadline - time.monotonic(), 0.0))
        for reader in self._readers:
            reader.join(max(deadline - time.monotonic(), 0.0))

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the scheduler ------------------------------------------------------------------------

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _pick(self) -> int | None:
        # Round robin from the stream after the last one served; a stream may hold at most its
        # share of the in-flight slots, so a fast camera cannot fill them all.
        count = len(self._readers)
        active = sum(1 for reader in self._readers if not reader.done) or 1
        share = max(1, math.ceil(self._limit / active))
        for step in range(count):
            position = (self._turn + step) % count
            if self._per_stream[position] < share and self._readers[position].has_frame():
                self._turn = position + 1
                return position
        return None

    def _schedule(self) -> None:
        try:
            while True:
                with self._cond:
                    while True:
                        if self._stopping:
                            picked = None
                            break
                        if self._in_flight < self._limit:
                            picked = self._pick()
                            if picked is not None:
                                break
                        if all(reader.done and not reader.has_frame() for reader in self._readers):
                            picked = None
                            break
                        self._cond.wait()
                    if picked is None:
                        self._cond.wait_for(lambda: self._in_flight == 0)
                        break
                    reader = self._readers[picked]
                    taken = reader.take()
                    if taken is None:
                        continue
                    self._in_flight += 1
                    self._per_stream[picked] += 1
                    sequence = self._submitted[picked]
                    self._submitted[picked] += 1
                self._submit(picked, sequence, reader, *taken)
        except BaseException as exc:
            self._out.put(_Failure(exc))
        finally:
            self._out.put(_END)

    def _submit(
        self, position: int, sequence: int, reader: StreamReader, frame: DecodedFrame, dropped: int
    ) -> None:
        # Converted here, once a core is free for it: the frames replaced in the slot never are.
        started = time.perf_counter()
        try:
            image = frame.bgr()
        except Exception as exc:  # one frame the converter refuses: that frame is skipped, no more
            log.warning(
                "stream %s: frame %d not converted to BGR (skipped): %s", reader.name, frame.index, exc
            )
            self._deliver(position, sequence, None)
            self._release(position)
            return
        reader.record_conversion(time.perf_counter() - started)
        try:
            future = self._detector.submit(image, frame.index, dropped)
        except BaseException:
            self._deliver(position, sequence, None)
            self._release(position)
            raise
        future.add_done_callback(
            lambda done: self._finish(position, sequence, reader, frame, image, dropped, done)
        )

    def _deliver(self, position: int, sequence: int, item: Any) -> None:
        # Out in submission order per stream (None: a frame that yields nothing).
        with self._order_lock:
            self._finished_early[(position, sequence)] = item
            while (position, self._emitted[position]) in self._finished_early:
                ready = self._finished_early.pop((position, self._emitted[position]))
                self._emitted[position] += 1
                if ready is not None:
                    self._out.put(ready)

    def _finish(
        self,
        position: int,
        sequence: int,
        reader: StreamReader,
        frame: DecodedFrame,
        bgr: np.ndarray[Any, Any],
        dropped: int,
        done: Future[DetectResult],
    ) -> None:
        item: Any = None
        try:
            error = done.exception()
            if error is not None:
                item = _Failure(error)
                return
            detected = done.result()
            latency_ms = (time.monotonic() - frame.arrival) * 1e3
            reader.record_result(latency_ms)
            image: np.ndarray[Any, Any] | None = bgr if self._keep_images else None
            item = StreamResult(
                stream=reader.name,
                frame=frame.index,
                pts=frame.pts,
                arrival=frame.arrival,
                latency_ms=latency_ms,
                dropped=dropped,
                detections=detected.detections,
                timings=detected.timings,
                context=detected.context,
                class_count=detected.class_count,
                image=image,
            )
        finally:
            self._deliver(position, sequence, item)
            self._release(position)

    def _release(self, position: int) -> None:
        with self._cond:
            self._in_flight -= 1
            self._per_stream[position] -= 1
            self._cond.notify_all()

    def _notify(self, item: StreamResult | StreamEvent) -> None:
        for number, observer in enumerate(self._observers):
            try:
                if isinstance(item, StreamResult):
                    observer.on_result(item)
                else:
                    observer.on_event(item)
            except Exception:
                if number not in self._broken_observers:
                    self._broken_observers.add(number)
                    log.exception("stream observer %r failed (the watch goes on)", observer)


def watch(
    sources: Iterable[Source | str],
    detector: FrameDetector,
    **options: Any,
) -> Watcher:
    """A `Watcher` over ``sources`` (keyword options as for `Watcher`); use it with ``with``."""
    return Watcher(sources, detector, **options)
