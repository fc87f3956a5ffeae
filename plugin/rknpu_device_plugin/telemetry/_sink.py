"""The plugin's event sink as Prometheus metrics: counters and the per-device health map."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginCounts:
    """A consistent copy of what `PluginMetrics` has counted so far."""

    registrations: int = 0
    restarts: int = 0
    allocations: int = 0
    allocated_devices: int = 0
    allocation_errors: int = 0
    health: Mapping[str, bool] = field(default_factory=dict)
    probes: Mapping[int, tuple[bool, float]] = field(default_factory=dict)
    """core -> (last probe passed, its seconds); empty while the probe is off."""


class PluginMetrics:
    """The plugin's events as Prometheus counters and gauges (implements `PluginEvents`).

    Every event is a few integer updates under a lock, so plugin threads never wait on a scrape.
    It is also a Prometheus collector: register it on a registry to export what it counted.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registrations = 0
        self._restarts = 0
        self._allocations = 0
        self._allocated_devices = 0
        self._allocation_errors = 0
        self._health: dict[str, bool] = {}
        self._probes: dict[int, tuple[bool, float]] = {}

    # PluginEvents
    def registered(self) -> None:
        with self._lock:
            self._registrations += 1

    def restarted(self) -> None:
        with self._lock:
            self._restarts += 1

    def allocated(self, device_ids: Sequence[str], mask: int) -> None:
        with self._lock:
            self._allocations += 1
            self._allocated_devices += len(device_ids)

    def allocation_failed(self, reason: str) -> None:
        with self._lock:
            self._allocation_errors += 1
        log.debug("allocation refused: %s", reason)

    def health_changed(self, health: Mapping[str, bool]) -> None:
        snapshot = {str(device): bool(ok) for device, ok in health.items()}
        with self._lock:
            self._health = snapshot

    def probed(self, core: int, ok: bool, seconds: float) -> None:
        with self._lock:
            self._probes[core] = (ok, seconds)

    # reading
    def counts(self) -> PluginCounts:
        with self._lock:
            return PluginCounts(
                registrations=self._registrations,
                restarts=self._restarts,
                allocations=self._allocations,
                allocated_devices=self._allocated_devices,
                allocation_errors=self._allocation_errors,
                health=dict(self._health),
                probes=dict(self._probes),
            )

    # prometheus_client Collector
    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        return plugin_families(self.counts())


def plugin_families(counts: PluginCounts) -> list[Metric]:
    """The plugin's counters and the per-device health gauge, as metric families."""
    healthy = GaugeMetricFamily(
        "rknpu_device_healthy",
        "1 if the plugin reports the device as healthy to kubelet, else 0.",
        labels=["device"],
    )
    for device, ok in sorted(counts.health.items()):
        healthy.add_metric([device], 1.0 if ok else 0.0)
    families: list[Metric] = [healthy]
    if counts.probes:
        success = GaugeMetricFamily(
            "rknpu_core_probe_success",
            "1 if the core's last functional probe (one inference in a child process) passed, else 0.",
            labels=["core"],
        )
        seconds = GaugeMetricFamily(
            "rknpu_core_probe_seconds",
            "How long the core's last functional probe took (load, init, inference; the timeout if hung).",
            labels=["core"],
        )
        for core, (ok, took) in sorted(counts.probes.items()):
            success.add_metric([str(core)], 1.0 if ok else 0.0)
            seconds.add_metric([str(core)], took)
        families += [success, seconds]
    families += [
        CounterMetricFamily(
            "rknpu_allocations", "Successful Allocate answers (one per container).", counts.allocations
        ),
        CounterMetricFamily(
            "rknpu_allocated_devices",
            "Device IDs handed out by successful Allocate answers.",
            counts.allocated_devices,
        ),
        CounterMetricFamily(
            "rknpu_allocation_errors", "Allocate requests the plugin refused.", counts.allocation_errors
        ),
        CounterMetricFamily(
            "rknpu_registrations", "Successful registrations with kubelet.", counts.registrations
        ),
        CounterMetricFamily(
            "rknpu_restarts",
            "Times the plugin re-served and re-registered after a kubelet restart or socket loss.",
            counts.restarts,
        ),
    ]
    return families


if TYPE_CHECKING:
    from rknpu_node import PluginEvents

    # PluginMetrics must stay a PluginEvents (the plugin passes it as its event sink): mypy checks this.
    _IS_PLUGIN_EVENTS: PluginEvents = PluginMetrics()
