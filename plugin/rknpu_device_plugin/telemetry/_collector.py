"""The NPU read on each scrape: driver load and clock through `rknnlaunch.npu`, and which pod holds
which core (kubelet's pod-resources API), so one PromQL join gives load per pod::

    rknpu_core_load_ratio * on (instance, core) group_right rknpu_core_allocated
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from rknnlaunch.npu import (
    DRIVER_DIRS,
    HostRoot,
    NpuInfo,
    find_npu_thermal_zone,
    read_frequency,
    read_load,
    read_temperature,
)

from ._podresources import CoreHolder, PodResourcesClient, PodResourcesError

log = logging.getLogger(__name__)

# The NPU clocks at most ~1 GHz; a bigger number is a garbled read, not a reading.
MAX_PLAUSIBLE_FREQUENCY_HZ = 5_000_000_000
LOAD_FILE = "load"
FREQUENCY_FILE = "freq"


@dataclass(frozen=True)
class NpuReading:
    """What one scrape learned: discovery, the driver's figures, pod attribution, error counts."""

    info: NpuInfo | None
    load: tuple[float, ...] | None = None
    frequency_hz: int | None = None
    temperature_celsius: float | None = None
    """From the thermal zone whose type names the NPU; None where there is none (RK356x)."""
    readable: Mapping[str, bool] = field(default_factory=dict)
    parse_failures: Mapping[str, int] = field(default_factory=dict)
    holders: tuple[CoreHolder, ...] = ()
    pod_resources_up: bool | None = None
    """None when pod attribution is off (no socket configured)."""
    pod_resources_errors: int = 0


def npu_families(reading: NpuReading) -> list[Metric]:
    """The NPU's metric families from one reading (pure: no I/O)."""
    info = reading.info
    families: list[Metric] = [
        GaugeMetricFamily(
            "rknpu_discovered",
            "1 if a Rockchip NPU with the rknpu driver was found on this node.",
            1.0 if info is not None else 0.0,
        )
    ]
    if info is not None:
        family = GaugeMetricFamily(
            "rknpu_info",
            "The node's NPU: SoC, NPU family, driver interface and version (always 1).",
            labels=["soc", "npu_family", "driver_kind", "driver_version"],
        )
        family.add_metric(
            [info.soc.name, info.soc.npu_family, info.driver_kind, info.driver_version or "unknown"], 1.0
        )
        families.append(family)
        families.append(
            GaugeMetricFamily(
                "rknpu_cores",
                "NPU cores on this node (from the driver when it says).",
                float(info.core_count),
            )
        )
        driver = GaugeMetricFamily(
            "rknpu_driver_info",
            "The rknpu kernel driver's version (always 1); 'unknown' when the driver does not say.",
            labels=["version"],
        )
        driver.add_metric([info.driver_version or "unknown"], 1.0)
        families.append(driver)
    if reading.load is not None:
        load = GaugeMetricFamily(
            "rknpu_core_load_ratio",
            "Busy share of each NPU core over the driver's last 1-second window (0..1).",
            labels=["core"],
        )
        for core, ratio in enumerate(reading.load):
            load.add_metric([str(core)], ratio)
        families.append(load)
    if reading.frequency_hz is not None:
        families.append(
            GaugeMetricFamily("rknpu_frequency_hertz", "NPU clock frequency.", float(reading.frequency_hz))
        )
    if reading.temperature_celsius is not None:
        families.append(
            GaugeMetricFamily(
                "rknpu_temperature_celsius",
                "NPU temperature from the thermal zone whose type names the NPU (npu-thermal).",
                reading.temperature_celsius,
            )
        )
    readable = GaugeMetricFamily(
        "rknpu_driver_file_readable",
        "1 if the driver's file could be read at the last scrape (debugfs is root-only), else 0.",
        labels=["file"],
    )
    failures = CounterMetricFamily(
        "rknpu_driver_parse_failures",
        "Reads of the driver's file whose text could not be understood (or held absurd values).",
        labels=["file"],
    )
    for name in (LOAD_FILE, FREQUENCY_FILE):
        readable.add_metric([name], 1.0 if reading.readable.get(name) else 0.0)
        failures.add_metric([name], float(reading.parse_failures.get(name, 0)))
    families += [readable, failures]
    if reading.pod_resources_up is not None:
        families.append(
            GaugeMetricFamily(
                "rknpu_pod_resources_up",
                "1 if kubelet's pod-resources API answered at the last scrape, else 0.",
                1.0 if reading.pod_resources_up else 0.0,
            )
        )
        families.append(
            CounterMetricFamily(
                "rknpu_pod_resources_errors",
                "Failed pod-resources List calls.",
                float(reading.pod_resources_errors),
            )
        )
        allocated = GaugeMetricFamily(
            "rknpu_core_allocated",
            "1 for each container holding an NPU core (from kubelet's pod-resources API). Join with "
            "rknpu_core_load_ratio on (instance, core) for load per pod.",
            labels=["core", "pod", "namespace", "container"],
        )
        for holder in reading.holders:
            allocated.add_metric([str(holder.core), holder.pod, holder.namespace, holder.container], 1.0)
        families.append(allocated)
    return families


class NpuCollector:
    """Reads the NPU's driver files and kubelet's pod-resources API on each scrape.

    Reading failures never fail a scrape: a file that cannot be read is left out (and said once in
    the log), text that cannot be parsed is counted in ``rknpu_driver_parse_failures_total``, and
    pod attribution is left out while kubelet does not answer. Scrapes are serialised.
    """

    def __init__(
        self,
        host: HostRoot,
        current_info: Callable[[], NpuInfo | None],
        pod_resources: PodResourcesClient | None = None,
    ) -> None:
        self.host = host
        self.current_info = current_info
        self.pod_resources = pod_resources
        self._lock = threading.Lock()
        self._parse_failures = {LOAD_FILE: 0, FREQUENCY_FILE: 0}
        self._pod_resources_errors = 0
        self._pod_resources_was_up: bool | None = None
        self._said: set[str] = set()
        self._thermal_zone: str | None = None

    def describe(self) -> Iterable[Metric]:
        # Nothing up front: registering must not read the driver.
        return ()

    def collect(self) -> Iterator[Metric]:
        yield from npu_families(self.read())

    def read(self) -> NpuReading:
        """One reading of everything (what a scrape exports)."""
        with self._lock:
            try:
                info = self.current_info()
            except Exception as exc:  # the plugin's discovery failing must not fail the scrape
                self._say_once("current-info", f"no NPU info for this scrape ({exc!r}); exporting without it")
                info = None
            readable = {LOAD_FILE: False, FREQUENCY_FILE: False}
            load = frequency = temperature = None
            if info is not None:
                load = self._read_load(info, readable)
                frequency = self._read_frequency(info, readable)
                temperature = self._read_temperature()
            holders, up = self._read_holders()
            return NpuReading(
                info=info,
                load=load,
                frequency_hz=frequency,
                temperature_celsius=temperature,
                readable=readable,
                parse_failures=dict(self._parse_failures),
                holders=holders,
                pod_resources_up=up,
                pod_resources_errors=self._pod_resources_errors,
            )

    def _read_load(self, info: NpuInfo, readable: dict[str, bool]) -> tuple[float, ...] | None:
        # Discovery leaves load_path unset when it could not read the file at start; try the
        # driver's folders again so load appears once debugfs is mounted or made readable.
        candidates = (
            [info]
            if info.load_path
            else [replace(info, load_path=f"{folder}/load") for folder in DRIVER_DIRS]
        )
        denied: str | None = None
        for candidate in candidates:
            try:
                load = read_load(self.host, candidate)
            except PermissionError:
                denied = denied or candidate.load_path
                continue
            except OSError:
                continue
            except ValueError as exc:
                self._unparsable(LOAD_FILE, readable, exc)
                return None
            readable[LOAD_FILE] = True
            # parse_load already clamps to [0, 1]; a garbled line can name cores the node does not
            # have: export only the ones discovery counted (the driver's count on a fused-down part).
            return load[: info.core_count]
        if denied is not None:
            self._say_once(
                "load-denied",
                f"cannot read the NPU driver's {denied}: permission denied (debugfs is root-only); "
                "exporting everything else without per-core load. Run as root with the host's "
                "/sys/kernel/debug visible to get rknpu_core_load_ratio",
            )
        else:
            self._say_once(
                "load-missing",
                "the NPU driver's load file is in neither "
                + " nor ".join(f"{folder}/load" for folder in DRIVER_DIRS)
                + f" under {self.host.root}; exporting everything else without per-core load. "
                "Mount the host's /sys/kernel/debug (debugfs) into the container",
            )
        return None

    def _unparsable(self, name: str, readable: dict[str, bool], exc: ValueError) -> None:
        """A driver file read but not understood: readable, one more parse failure, no figure."""
        readable[name] = True
        self._parse_failures[name] += 1
        log.debug("unparsable %s text: %s", name, exc)

    def _read_frequency(self, info: NpuInfo, readable: dict[str, bool]) -> int | None:
        candidates = [info]
        if info.soc.devfreq_node and not (info.frequency_path or "").startswith("/sys/class/devfreq"):
            # devfreq's cur_freq is world-readable where debugfs' freq is not.
            devfreq = f"/sys/class/devfreq/{info.soc.devfreq_node}/cur_freq"
            candidates.append(replace(info, frequency_path=devfreq))
        problem: OSError | None = None
        for candidate in candidates:
            try:
                frequency = read_frequency(self.host, candidate)
            except OSError as exc:
                problem = problem or exc
                continue
            except ValueError as exc:
                self._unparsable(FREQUENCY_FILE, readable, exc)
                return None
            readable[FREQUENCY_FILE] = True
            if frequency > MAX_PLAUSIBLE_FREQUENCY_HZ:
                self._parse_failures[FREQUENCY_FILE] += 1
                return None
            return frequency
        self._say_once(
            "freq-unreadable", f"cannot read the NPU clock ({problem}); rknpu_frequency_hertz is left out"
        )
        return None

    def _read_temperature(self) -> float | None:
        # The zone is looked up once and again only after a failed read (zones renumber on reboot,
        # never while running); a board without an NPU zone costs one directory listing a scrape.
        for _attempt in range(2):
            if self._thermal_zone is None:
                self._thermal_zone = find_npu_thermal_zone(self.host)
                if self._thermal_zone is None:
                    return None
            try:
                return read_temperature(self.host, self._thermal_zone)
            except (OSError, ValueError):
                self._thermal_zone = None
        return None

    def _read_holders(self) -> tuple[tuple[CoreHolder, ...], bool | None]:
        if self.pod_resources is None:
            return (), None
        try:
            holders = self.pod_resources.list_holders()
        except PodResourcesError as exc:
            self._pod_resources_errors += 1
            if self._pod_resources_was_up is not False:
                log.warning("pod attribution off until kubelet answers: %s", exc)
            self._pod_resources_was_up = False
            return (), False
        if self._pod_resources_was_up is False:
            log.info("kubelet's pod-resources API answers again: pod attribution back on")
        self._pod_resources_was_up = True
        return holders, True

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", message)


def build_registry(*collectors: Any, process_metrics: bool = True) -> CollectorRegistry:
    """A fresh registry (never the global one) holding ``collectors``.

    ``process_metrics`` adds process_cpu_seconds_total & co. — wanted on an HTTP endpoint, not in a
    node-exporter textfile (node-exporter exports its own process metrics under those names).
    """
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    if process_metrics:
        ProcessCollector(registry=registry)
    return registry
