"""Prometheus metrics of a watch (``watch --metrics-address ADDR``), per stream, in the exporter's
style (``rknnlaunch_stream_*``, counters ``_total``, seconds): frames decoded, detected, dropped and
skipped, corrupt packets, reconnects, decode and conversion time, state, latency histogram. Label
``stream`` is the stream's name, never its URL. prometheus-client (the ``video`` extra) is imported
here only."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .._errors import UsageError
from ._results import STATES, StreamEvent, StreamResult
from ._serve import Page, PageServer, WatchedStreams

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

PREFIX = "rknnlaunch_stream"
LATENCY_BUCKETS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)
"""Arrival to result, seconds: a 25 FPS frame interval is 0.04 s, a YOLOv8n detection on one RK3588
core 0.014 s, on a CPU 0.05-0.3 s; above a second a stream is badly behind."""


class _StatsCollector:
    """The counters and gauges, read from `Watcher.stats` at scrape time (nothing to keep in step)."""

    def __init__(self, streams: WatchedStreams) -> None:
        self._streams = streams

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        stats = self._streams.stats()

        def counter(name: str, text: str) -> CounterMetricFamily:
            return CounterMetricFamily(f"{PREFIX}_{name}", text, labels=["stream"])

        decoded = counter("frames_decoded", "Frames decoded.")
        detected = counter("frames_detected", "Frames detected (results).")
        dropped = counter(
            "frames_dropped", "Frames decoded but replaced by a newer one while the cores were busy."
        )
        skipped = counter("frames_skipped", "Frames not detected because of the stream's rate (not dropped).")
        corrupt = counter("corrupt_packets", "Packets the decoder rejected.")
        reconnects = counter("reconnects", "Times the source was reopened.")
        decode = counter("decode_seconds", "Time spent decoding frames.")
        convert = counter("convert_seconds", "Time spent converting detected frames to BGR.")
        state = GaugeMetricFamily(
            f"{PREFIX}_state",
            "1 for the stream's current state, 0 for the others.",
            labels=["stream", "state"],
        )
        info = GaugeMetricFamily(
            f"{PREFIX}_info",
            "The stream's decoder (software h264, hardware h264_rkmpp).",
            labels=["stream", "decoder"],
        )
        for name, figures in stats.items():
            decoded.add_metric([name], float(figures.decoded))
            detected.add_metric([name], float(figures.detected))
            dropped.add_metric([name], float(figures.dropped))
            skipped.add_metric([name], float(figures.skipped))
            corrupt.add_metric([name], float(figures.corrupt))
            reconnects.add_metric([name], float(figures.reconnects))
            decode.add_metric([name], figures.decode_ms * figures.decoded / 1e3)
            convert.add_metric([name], figures.convert_ms * figures.detected / 1e3)
            for each in STATES:
                state.add_metric([name, each], 1.0 if figures.state == each else 0.0)
            info.add_metric([name, figures.decoder], 1.0)
        yield from (decoded, detected, dropped, skipped, corrupt, reconnects, decode, convert, state, info)


class StreamMetrics(PageServer):
    """A `StreamObserver` serving Prometheus metrics at ``/metrics`` (GET only) on ``address``.

    The constructor binds (a port in use is a `UsageError` naming ``flag``); `start` (or ``with``)
    serves in a thread. Counters and states come from ``streams.stats()`` at each scrape; the
    latency histogram (``rknnlaunch_stream_latency_seconds``) from ``on_result``."""

    def __init__(self, address: str, streams: WatchedStreams, *, flag: str = "--metrics-address") -> None:
        try:
            from prometheus_client import CollectorRegistry, Histogram
            from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
        except ImportError:  # pragma: no cover - depends on the install
            raise UsageError(
                f"{flag} needs prometheus-client, which is not installed",
                "pip install 'rknnlaunch[video]'",
            ) from None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StatsCollector(streams))
        self._latency = Histogram(
            f"{PREFIX}_latency_seconds",
            "From a frame's arrival to its result: the wait for a core plus the detection.",
            ["stream"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        for name in streams.names:
            self._latency.labels(name)  # every stream's series exists from the first scrape
        self._content_type = CONTENT_TYPE_LATEST
        self._generate = generate_latest
        self._bind(address, flag)

    def on_result(self, result: StreamResult) -> None:
        self._latency.labels(result.stream).observe(result.latency_ms / 1e3)

    def on_event(self, event: StreamEvent) -> None:
        pass  # states are read from the watcher's figures at scrape time

    def text(self) -> bytes:
        """The exposition text of a scrape now."""
        data: Any = self._generate(self.registry)
        return bytes(data)

    def _route(self, path: str) -> Page | None:
        if path == "/metrics":
            return 200, self._content_type, self.text()
        if path == "/":
            return 200, "text/plain; charset=utf-8", b"rknnlaunch watch: metrics at /metrics\n"
        return None
