"""The driver's Prometheus metrics (--metrics-address): prepare/unprepare counts, errors and
latency, prepared claims, slice publishes and repairs, API errors and health per core; the
device plugin's exporter serves the page. Without an address every call is a no-op."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

PREFIX = "rknpu_dra"
# Prepare is a few ms (one API read, two atomic file writes); the kubelet's deadline is seconds.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def error_reason(message: str) -> str:
    """A bounded label for a per-claim error (the message itself goes to the log)."""
    text = message.lower()
    for needle, reason in (
        ("does not exist", "claim_gone"),
        ("from the api server", "api"),
        ("not allocated", "not_allocated"),
        ("does not offer", "device_not_offered"),
        ("another node", "other_node"),
        ("no device of driver", "other_driver"),
        ("held by", "core_held"),
        ("cannot write", "io"),
        ("cannot remove", "io"),
        ("no usable npu", "no_npu"),
        ("uid", "uid"),
    ):
        if needle in text:
            return reason
    return "other"


class DraMetrics:
    """The metrics, on a registry of their own; ``registry`` None = metrics off."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.registry = registry
        self._claims: Callable[[], int] = lambda: 0
        if registry is None:
            return
        from prometheus_client import Counter, Gauge, Histogram

        def counter(name: str, text: str, labels: tuple[str, ...] = ()) -> Any:
            return Counter(f"{PREFIX}_{name}", text, labels, registry=registry)

        self._requests = counter("requests", "NodePrepare/UnprepareResources claims handled", ("operation",))
        self._errors = counter(
            "request_errors",
            "claims answered with an error, by operation and reason",
            ("operation", "reason"),
        )
        self._latency = Histogram(
            f"{PREFIX}_prepare_seconds",
            "time to prepare one claim (API read, CDI spec, checkpoint)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._publishes = counter("slice_publishes", "ResourceSlice pool writes (a repair included)")
        self._repairs = counter(
            "slice_repairs", "pool writes that repaired a slice someone else deleted or edited"
        )
        self._api_errors = counter("api_errors", "failed API server requests, by what was asked", ("call",))
        prepared = Gauge(f"{PREFIX}_prepared_claims", "claims prepared on this node", registry=registry)
        prepared.set_function(lambda: float(self._claims()))
        self._core_health = Gauge(
            f"{PREFIX}_device_healthy",
            "1 when the device (an NPU core) is healthy",
            ("device",),
            registry=registry,
        )

    def watch(self, claims: Callable[[], int]) -> None:
        """Where the prepared-claims gauge reads from at scrape time."""
        self._claims = claims

    def collect_health(self, health: Mapping[str, bool]) -> None:
        """Set the per-core gauges from ``health``, the state being published. Called from the
        ResourceManager's sink, under its lock (not re-entrant): it must never read the manager."""
        if self.registry is None:
            return
        for device, healthy in health.items():
            self._core_health.labels(device).set(1.0 if healthy else 0.0)

    def request(self, operation: str, seconds: float, error: str) -> None:
        if self.registry is None:
            return
        self._requests.labels(operation).inc()
        if error:
            self._errors.labels(operation, error_reason(error)).inc()
        elif operation == "prepare":
            self._latency.observe(seconds)

    def slice_published(self, repaired: bool) -> None:
        if self.registry is None:
            return
        self._publishes.inc()
        if repaired:
            self._repairs.inc()

    def api_error(self, call: str) -> None:
        if self.registry is not None:
            self._api_errors.labels(call).inc()
