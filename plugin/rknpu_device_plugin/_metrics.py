"""Prometheus telemetry of the NPU and the plugin: driver load and clock, health, allocations, pods.

Two collectors feed one registry per process. `PluginMetrics` is the plugin's event sink (the
`PluginEvents` protocol in `_events.py`): counters and the health map, updated from plugin threads.
`NpuCollector` reads the driver's ``load`` and ``freq`` files through `rknnlaunch.npu` on each scrape
and asks kubelet's pod-resources API which container holds which core, so one PromQL join gives
load per pod::

    rknpu_core_load_ratio * on (instance, core) group_right rknpu_core_allocated

`start_metrics_server` serves the registry over HTTP; the `rknpu-exporter` command (`_exporter.py`)
serves the same NPU metrics where the plugin runs without ``--metrics-address``.
"""

from __future__ import annotations

import logging
import selectors
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import make_wsgi_app
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from rknnlaunch import UsageError
from rknnlaunch.npu import DRIVER_DIRS, HostRoot, NpuInfo, read_frequency, read_load

from ._podresources import CoreHolder, PodResourcesClient, PodResourcesError

log = logging.getLogger(__name__)

# The NPU clocks at most ~1 GHz; a bigger number is a garbled read, not a reading.
MAX_PLAUSIBLE_FREQUENCY_HZ = 5_000_000_000
LOAD_FILE = "load"
FREQUENCY_FILE = "freq"
# A scrape client that stalls must not pin a server thread for long, nor stop(), which joins
# request threads: the plugin must exit within 2 s of SIGTERM. Prometheus sends its request at
# once and a page fits the socket buffer, so 1 s per socket operation is ample.
_CLIENT_TIMEOUT_SECONDS = 1.0


# --- the plugin's event sink ---------------------------------------------------------------------


@dataclass(frozen=True)
class PluginCounts:
    """A consistent copy of what `PluginMetrics` has counted so far."""

    registrations: int = 0
    restarts: int = 0
    allocations: int = 0
    allocated_devices: int = 0
    allocation_errors: int = 0
    health: Mapping[str, bool] = field(default_factory=dict)


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
    return [
        healthy,
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


# --- the NPU, read on each scrape ----------------------------------------------------------------


@dataclass(frozen=True)
class NpuReading:
    """What one scrape learned: discovery, the driver's figures, pod attribution, error counts."""

    info: NpuInfo | None
    load: tuple[float, ...] | None = None
    frequency_hz: int | None = None
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
            load = frequency = None
            if info is not None:
                load = self._read_load(info, readable)
                frequency = self._read_frequency(info, readable)
            holders, up = self._read_holders()
            return NpuReading(
                info=info,
                load=load,
                frequency_hz=frequency,
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
                readable[LOAD_FILE] = True
                self._parse_failures[LOAD_FILE] += 1
                log.debug("unparsable load text: %s", exc)
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
                readable[FREQUENCY_FILE] = True
                self._parse_failures[FREQUENCY_FILE] += 1
                log.debug("unparsable freq text: %s", exc)
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


# --- HTTP ---------------------------------------------------------------------------------------


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"``, ``":9101"`` (all interfaces), ``"[::1]:9101"`` or ``"9101"`` -> (host, port)."""
    text = address.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isdigit() or int(port_text) > 65535:
        raise UsageError(
            f"metrics address {address!r} is not host:port",
            "use e.g. ':9101' (all interfaces), '127.0.0.1:9101' or '[::]:9101'",
        )
    return host or "0.0.0.0", int(port_text)


class _QuietHandler(WSGIRequestHandler):
    """Serves scrapes without logging each one; gives up on clients that stall."""

    timeout = _CLIENT_TIMEOUT_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _MetricsHTTPServer(ThreadingMixIn, WSGIServer):
    # Non-daemon request threads that server_close() joins: stop() leaves no thread behind.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks DNS for our FQDN; a node with broken DNS must still serve.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()


class _MetricsHTTPServer6(_MetricsHTTPServer):
    address_family = socket.AF_INET6


def _wsgi_app(registry: CollectorRegistry) -> Callable[..., Any]:
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        if path in ("/", "/metrics"):
            return metrics_app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: metrics are at /metrics\n"]

    return app


class MetricsServer:
    """A running metrics endpoint. Calling it (or `stop`) shuts it down; `port` is the bound port."""

    def __init__(
        self, address: str, registry: CollectorRegistry, on_stop: Sequence[Callable[[], None]] = ()
    ) -> None:
        host, port = parse_address(address)
        server_class = _MetricsHTTPServer6 if ":" in host else _MetricsHTTPServer
        try:
            self._httpd = server_class((host, port), _QuietHandler)
        except OSError as exc:
            raise UsageError(
                f"cannot serve metrics on {address!r}: {exc.strerror or exc}",
                "pick a free port (or another address) for the metrics endpoint",
            ) from exc
        self._httpd.set_app(_wsgi_app(registry))
        self.registry = registry
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._on_stop = list(on_stop)
        self._stop_lock = threading.Lock()
        self._stopped = False
        # stop() writes to this pair to wake the serving thread, which otherwise sleeps in select()
        # with no timeout: an idle endpoint costs no CPU and stop() returns at once.
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread = threading.Thread(
            target=self._serve,
            name=f"rknpu-metrics:{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.info("serving metrics on %s", self.url)

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._httpd, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_read in ready:
                    return
                try:
                    # The listening socket is readable: accept and hand the client to a thread.
                    self._httpd.handle_request()
                except Exception:  # one broken client must not end the endpoint
                    log.exception("serving a metrics request failed")

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host == "0.0.0.0" else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving, wait for in-flight scrapes and the server thread, close the kubelet channel."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self._wake_write.send(b"x")
        self._thread.join()
        self._httpd.server_close()  # joins in-flight scrape threads
        self._wake_read.close()
        self._wake_write.close()
        for close in self._on_stop:
            close()

    def __call__(self) -> None:
        self.stop()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_metrics_server(
    address: str,
    metrics: PluginMetrics,
    host: HostRoot,
    current_info: Callable[[], NpuInfo | None],
    pod_resources_socket: str,
    resource_name: str,
) -> MetricsServer:
    """Serve the plugin's and the NPU's metrics on ``address`` ("host:port"; ":9101" = all interfaces).

    Returns the running server; calling it stops it (the plugin treats it as ``Callable[[], None]``).
    An empty ``pod_resources_socket`` turns pod attribution off. Raises `UsageError` when the
    address is malformed or cannot be bound.
    """
    client = PodResourcesClient(pod_resources_socket, resource_name) if pod_resources_socket else None
    registry = build_registry(NpuCollector(host, current_info, client), metrics)
    try:
        return MetricsServer(address, registry, on_stop=[client.close] if client is not None else [])
    except BaseException:
        if client is not None:
            client.close()
        raise


if TYPE_CHECKING:
    from ._events import PluginEvents

    # PluginMetrics must stay a PluginEvents (the plugin passes it as its event sink): mypy checks this.
    _IS_PLUGIN_EVENTS: PluginEvents = PluginMetrics()
