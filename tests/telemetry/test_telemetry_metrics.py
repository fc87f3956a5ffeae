"""The metrics page: driver files read per scrape, plugin events, pod attribution, served over HTTP."""

from __future__ import annotations

import inspect
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_podresources import Assignment, PodResourcesServer
from prometheus_client.parser import text_string_to_metric_families

from fakehost import write
from rknnlaunch import UsageError
from rknnlaunch.npu import HostRoot, NpuInfo, discover
from rknpu_device_plugin.telemetry._collector import NpuCollector, build_registry
from rknpu_device_plugin.telemetry._http import parse_address, start_metrics_server
from rknpu_device_plugin.telemetry._nfd import textfile_text
from rknpu_device_plugin.telemetry._sink import PluginMetrics

LOAD = "/sys/kernel/debug/rknpu/load"
FREQ = "/sys/kernel/debug/rknpu/freq"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Exposition text -> {(sample name, sorted labels): value}, via Prometheus' own parser."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def named(found: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in found.items() if sample == name}


def load_by_core(found: Samples) -> dict[str, float]:
    return {dict(labels)["core"]: value for labels, value in named(found, "rknpu_core_load_ratio").items()}


def scrape_collector(collector: NpuCollector) -> Samples:
    return samples(textfile_text(build_registry(collector, process_metrics=False)))


def set_file(host: HostRoot, host_path: str, text: str) -> None:
    write(host.root, host_path, text)


@pytest.fixture
def rk3588(host_factory: Callable[[str], HostRoot]) -> tuple[HostRoot, NpuInfo]:
    host = host_factory("rk3588-drm")
    return host, discover(host)


# --- the driver's files, read on every scrape ----------------------------------------------------


def test_load_and_frequency_follow_the_files_between_scrapes(rk3588: tuple[HostRoot, NpuInfo]) -> None:
    host, info = rk3588
    collector = NpuCollector(host, lambda: info)
    first = scrape_collector(collector)
    assert load_by_core(first) == {"0": 0.0, "1": 0.0, "2": 0.0}
    assert named(first, "rknpu_frequency_hertz") == {(): 1e9}
    assert named(first, "rknpu_discovered") == {(): 1.0}
    assert named(first, "rknpu_cores") == {(): 3.0}
    assert named(first, "rknpu_info") == {
        (
            ("driver_kind", "drm"),
            ("driver_version", "0.9.8"),
            ("npu_family", "RKNPU2-V2"),
            ("soc", "rk3588"),
        ): 1.0
    }

    # The driver's real format: double spaces, trailing comma.
    set_file(host, LOAD, "NPU load:  Core0: 37%, Core1:  5%, Core2: 100%,\n")
    set_file(host, FREQ, "800000000\n")
    second = scrape_collector(collector)
    assert load_by_core(second) == {"0": 0.37, "1": 0.05, "2": 1.0}
    assert named(second, "rknpu_frequency_hertz") == {(): 8e8}
    assert named(second, "rknpu_driver_parse_failures_total") == {
        (("file", "freq"),): 0.0,
        (("file", "load"),): 0.0,
    }


def test_absurd_load_is_clamped_not_fatal(rk3588: tuple[HostRoot, NpuInfo]) -> None:
    host, info = rk3588
    collector = NpuCollector(host, lambda: info)
    set_file(host, LOAD, "NPU load:  Core0:  429496%, Core1:  0%, Core2:  12%,\n")
    assert load_by_core(scrape_collector(collector)) == {"0": 1.0, "1": 0.0, "2": 0.12}


def test_garbage_is_counted_in_its_own_counter(rk3588: tuple[HostRoot, NpuInfo]) -> None:
    host, info = rk3588
    collector = NpuCollector(host, lambda: info)
    set_file(host, LOAD, "rknpu: busy\n")
    set_file(host, FREQ, "n/a\n")
    first = scrape_collector(collector)
    assert load_by_core(first) == {}
    assert named(first, "rknpu_frequency_hertz") == {}
    set_file(host, FREQ, "99999999999999\n")  # 100 THz: a garbled read, not a clock
    second = scrape_collector(collector)
    assert named(second, "rknpu_driver_parse_failures_total") == {
        (("file", "freq"),): 2.0,
        (("file", "load"),): 2.0,
    }
    # Readable but unparsable is not "unreadable": the two gauges tell the cases apart.
    assert named(second, "rknpu_driver_file_readable") == {(("file", "freq"),): 1.0, (("file", "load"),): 1.0}
    set_file(host, LOAD, "NPU load:  Core0:  1%, Core1:  2%, Core2:  3%,\n")
    assert load_by_core(scrape_collector(collector)) == {"0": 0.01, "1": 0.02, "2": 0.03}


def test_single_core_and_two_core_formats(host_factory: Callable[[str], HostRoot]) -> None:
    rk3568 = host_factory("rk3568")
    info = discover(rk3568)
    collector = NpuCollector(rk3568, lambda: info)
    set_file(rk3568, LOAD, "NPU load:  63%\n")
    assert load_by_core(scrape_collector(collector)) == {"0": 0.63}

    rk3576 = host_factory("rk3576")
    info76 = discover(rk3576)
    set_file(rk3576, LOAD, "NPU load:  Core0: 10%, Core1:  90%,\n")
    assert load_by_core(scrape_collector(NpuCollector(rk3576, lambda: info76))) == {"0": 0.1, "1": 0.9}


def test_misc_build_reads_proc_rknpu(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("rk3588-misc")
    info = discover(host)
    set_file(host, "/proc/rknpu/load", "NPU load:  Core0:  4%, Core1:  0%, Core2:  0%,\n")
    found = scrape_collector(NpuCollector(host, lambda: info))
    assert load_by_core(found) == {"0": 0.04, "1": 0.0, "2": 0.0}
    assert (
        named(found, "rknpu_info")[
            (
                ("driver_kind", "misc"),
                ("driver_version", "0.9.6"),
                ("npu_family", "RKNPU2-V2"),
                ("soc", "rk3588"),
            )
        ]
        == 1.0
    )


def test_unreadable_debugfs_is_said_once_and_the_rest_exported(
    host_factory: Callable[[str], HostRoot], caplog: pytest.LogCaptureFixture
) -> None:
    host = host_factory("debugfs-unreadable")
    info = discover(host)
    metrics = PluginMetrics()
    metrics.health_changed({"npu-core-0": True, "npu-core-1": True, "npu-core-2": False})
    collector = NpuCollector(host, lambda: info)
    registry = build_registry(collector, metrics, process_metrics=False)
    with caplog.at_level(logging.WARNING, logger="rknpu_device_plugin.telemetry._collector"):
        first = samples(textfile_text(registry))
        second = samples(textfile_text(registry))
    said = [r for r in caplog.records if "permission denied" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert "root" in said[0].getMessage()
    for found in (first, second):
        assert load_by_core(found) == {}
        assert named(found, "rknpu_driver_file_readable")[(("file", "load"),)] == 0.0
        assert named(found, "rknpu_discovered") == {(): 1.0}
        assert named(found, "rknpu_device_healthy") == {
            (("device", "npu-core-0"),): 1.0,
            (("device", "npu-core-1"),): 1.0,
            (("device", "npu-core-2"),): 0.0,
        }
        assert named(found, "rknpu_driver_parse_failures_total")[(("file", "load"),)] == 0.0
        # debugfs' freq is denied too; devfreq's world-readable cur_freq stands in.
        assert named(found, "rknpu_frequency_hertz") == {(): 1e9}


def test_load_appears_once_debugfs_becomes_readable(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("debugfs-unreadable")
    info = discover(host)  # at start: no load file readable
    assert info.load_path is None
    collector = NpuCollector(host, lambda: info)
    assert load_by_core(scrape_collector(collector)) == {}
    (host.root / "sys/kernel/debug").chmod(0o755)
    for path in (host.root / "sys/kernel/debug/rknpu").iterdir():
        path.chmod(0o644)
    set_file(host, LOAD, "NPU load:  Core0:  9%, Core1:  0%, Core2:  0%,\n")
    assert load_by_core(scrape_collector(collector)) == {"0": 0.09, "1": 0.0, "2": 0.0}


def test_no_npu_exports_discovered_zero(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("no-npu")
    found = scrape_collector(NpuCollector(host, lambda: None))
    assert named(found, "rknpu_discovered") == {(): 0.0}
    assert load_by_core(found) == {}
    assert named(found, "rknpu_info") == {}


def test_failing_current_info_does_not_fail_the_scrape(rk3588: tuple[HostRoot, NpuInfo]) -> None:
    host, _ = rk3588

    def broken() -> NpuInfo | None:
        raise RuntimeError("discovery blew up")

    assert named(scrape_collector(NpuCollector(host, broken)), "rknpu_discovered") == {(): 0.0}


# --- the plugin's events -------------------------------------------------------------------------


def test_plugin_events_become_counters() -> None:
    metrics = PluginMetrics()
    metrics.registered()
    metrics.restarted()
    metrics.registered()
    metrics.allocated(["npu-core-0", "npu-core-1"], 3)
    metrics.allocated(["npu-core-2"], 4)
    metrics.allocation_failed("unknown device npu-core-9")
    metrics.health_changed({"npu-core-0": True})
    metrics.health_changed({"npu-core-0": False, "npu-core-1": True})
    found = samples(textfile_text(build_registry(metrics, process_metrics=False)))
    assert named(found, "rknpu_registrations_total") == {(): 2.0}
    assert named(found, "rknpu_restarts_total") == {(): 1.0}
    assert named(found, "rknpu_allocations_total") == {(): 2.0}
    assert named(found, "rknpu_allocated_devices_total") == {(): 3.0}
    assert named(found, "rknpu_allocation_errors_total") == {(): 1.0}
    # The health map is replaced, not merged.
    assert named(found, "rknpu_device_healthy") == {
        (("device", "npu-core-0"),): 0.0,
        (("device", "npu-core-1"),): 1.0,
    }


def test_probe_verdicts_become_per_core_gauges() -> None:
    metrics = PluginMetrics()
    found = samples(textfile_text(build_registry(metrics, process_metrics=False)))
    assert named(found, "rknpu_core_probe_success") == {}  # probe off: no series at all
    metrics.probed(0, True, 0.42)
    metrics.probed(1, False, 20.0)
    metrics.probed(1, True, 0.5)  # recovered: the latest verdict counts
    metrics.probed(2, False, 3.0)
    found = samples(textfile_text(build_registry(metrics, process_metrics=False)))
    assert named(found, "rknpu_core_probe_success") == {
        (("core", "0"),): 1.0,
        (("core", "1"),): 1.0,
        (("core", "2"),): 0.0,
    }
    assert named(found, "rknpu_core_probe_seconds")[(("core", "2"),)] == 3.0


def test_temperature_and_driver_info(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("rk3588-drm")
    collector = NpuCollector(host, lambda: discover(host))
    found = scrape_collector(collector)
    assert named(found, "rknpu_temperature_celsius") == {(): 43.9}  # thermal_zone6, type npu-thermal
    assert named(found, "rknpu_driver_info") == {(("version", "0.9.8"),): 1.0}
    set_file(host, "/sys/devices/virtual/thermal/thermal_zone6/temp", "71250\n")
    assert named(scrape_collector(collector), "rknpu_temperature_celsius") == {(): 71.25}
    # Zones renumbered (another sensor registered first): found again after one failed read.
    (host.root / "sys/devices/virtual/thermal/thermal_zone6/temp").unlink()
    write(host.root, "/sys/devices/virtual/thermal/thermal_zone7/type", "npu-thermal\n")
    write(host.root, "/sys/devices/virtual/thermal/thermal_zone7/temp", "50000\n")
    (host.root / "sys/devices/virtual/thermal/thermal_zone6/type").write_text("test-thermal\n")
    from fakehost import link

    link(host.root, "/sys/class/thermal/thermal_zone7", "../../devices/virtual/thermal/thermal_zone7")
    assert named(scrape_collector(collector), "rknpu_temperature_celsius") == {(): 50.0}


def test_no_npu_thermal_zone_means_no_temperature(host_factory: Callable[[str], HostRoot]) -> None:
    host = host_factory("rk3568")  # RK356x: no npu-thermal zone
    found = scrape_collector(NpuCollector(host, lambda: discover(host)))
    assert named(found, "rknpu_temperature_celsius") == {}
    assert named(found, "rknpu_driver_info") == {(("version", "0.8.2"),): 1.0}


def test_plugin_events_are_thread_safe() -> None:
    metrics = PluginMetrics()
    start = threading.Barrier(8)

    def hammer() -> None:
        start.wait()
        for _ in range(2000):
            metrics.allocated(["npu-core-0"], 1)
            metrics.allocation_failed("x")

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = metrics.counts()
    assert (counts.allocations, counts.allocated_devices, counts.allocation_errors) == (16000, 16000, 16000)


def test_plugin_metrics_implements_the_plugin_events_protocol() -> None:
    events = pytest.importorskip("rknpu_node._events")
    for name in ("registered", "restarted", "allocated", "allocation_failed", "health_changed", "probed"):
        ours = inspect.signature(getattr(PluginMetrics, name))
        theirs = inspect.signature(getattr(events.PluginEvents, name))
        assert list(ours.parameters) == list(theirs.parameters), name


# --- over HTTP ------------------------------------------------------------------------------------


@pytest.fixture
def served(
    rk3588: tuple[HostRoot, NpuInfo], pod_resources: PodResourcesServer
) -> Iterator[tuple[str, HostRoot, PluginMetrics, PodResourcesServer]]:
    host, info = rk3588
    metrics = PluginMetrics()
    server = start_metrics_server(
        "127.0.0.1:0", metrics, host, lambda: info, pod_resources.socket_path, "rockchip.com/npu"
    )
    try:
        yield server.url, host, metrics, pod_resources
    finally:
        server()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        assert response.status == 200
        return body.decode()


def test_scrape_over_http_joins_load_and_pods(
    served: tuple[str, HostRoot, PluginMetrics, PodResourcesServer],
) -> None:
    url, host, metrics, kubelet = served
    kubelet.fake.set(
        [
            Assignment("vision", "yolo-a", "infer", ["npu-core-0", "npu-core-1"]),
            Assignment("vision", "yolo-b", "infer", ["npu-core-2"]),
        ]
    )
    metrics.registered()
    metrics.allocated(["npu-core-0", "npu-core-1"], 3)
    metrics.health_changed({f"npu-core-{n}": True for n in range(3)})
    set_file(host, LOAD, "NPU load:  Core0:  80%, Core1:  60%, Core2:  10%,\n")

    found = samples(get(url))
    allocated = named(found, "rknpu_core_allocated")
    assert set(allocated) == {
        (("container", "infer"), ("core", "0"), ("namespace", "vision"), ("pod", "yolo-a")),
        (("container", "infer"), ("core", "1"), ("namespace", "vision"), ("pod", "yolo-a")),
        (("container", "infer"), ("core", "2"), ("namespace", "vision"), ("pod", "yolo-b")),
    }
    assert named(found, "rknpu_pod_resources_up") == {(): 1.0}
    assert named(found, "rknpu_allocations_total") == {(): 1.0}
    assert named(found, "rknpu_registrations_total") == {(): 1.0}
    assert any(name.startswith("process_cpu_seconds") for name, _ in found)

    # What `sum by (namespace, pod) (rknpu_core_load_ratio * on (instance, core) group_right
    # rknpu_core_allocated)` computes in Prometheus, done by hand over the same page:
    load = load_by_core(found)
    per_pod: dict[str, float] = {}
    for labels, value in allocated.items():
        label = dict(labels)
        per_pod[label["pod"]] = per_pod.get(label["pod"], 0.0) + load[label["core"]] * value
    assert per_pod == pytest.approx({"yolo-a": 1.4, "yolo-b": 0.1})

    # Next scrape: the load moved and a pod went away.
    set_file(host, LOAD, "NPU load:  Core0:  0%, Core1:  0%, Core2:  55%,\n")
    kubelet.fake.set([Assignment("vision", "yolo-b", "infer", ["npu-core-2"])])
    again = samples(get(url))
    assert load_by_core(again) == {"0": 0.0, "1": 0.0, "2": 0.55}
    assert len(named(again, "rknpu_core_allocated")) == 1


def test_kubelet_down_keeps_the_rest_of_the_page(
    served: tuple[str, HostRoot, PluginMetrics, PodResourcesServer],
) -> None:
    url, _, _, kubelet = served
    kubelet.stop()
    found = samples(get(url))
    assert named(found, "rknpu_pod_resources_up") == {(): 0.0}
    assert named(found, "rknpu_pod_resources_errors_total") == {(): 1.0}
    assert named(found, "rknpu_core_allocated") == {}
    assert load_by_core(found) == {"0": 0.0, "1": 0.0, "2": 0.0}


def test_healthz_and_unknown_paths(served: tuple[str, HostRoot, PluginMetrics, PodResourcesServer]) -> None:
    url = served[0]
    base = url.removesuffix("/metrics")
    assert get(base + "/healthz") == "ok\n"
    assert "rknpu_discovered" in get(base + "/")
    with pytest.raises(urllib.error.HTTPError) as error:
        get(base + "/nope")
    assert error.value.code == 404


def test_stop_closes_the_port_and_leaves_no_thread(rk3588: tuple[HostRoot, NpuInfo], tmp_path: Path) -> None:
    host, info = rk3588
    before = set(threading.enumerate())
    stop = start_metrics_server(
        "127.0.0.1:0", PluginMetrics(), host, lambda: info, str(tmp_path / "none.sock"), "rockchip.com/npu"
    )
    url = stop.url  # type: ignore[attr-defined]
    for _ in range(3):
        found = samples(get(url))
    assert named(found, "rknpu_pod_resources_up") == {(): 0.0}
    stop()
    stop()  # idempotent
    left = set(threading.enumerate()) - before
    assert not left, [thread.name for thread in left]
    with pytest.raises(urllib.error.URLError):
        get(url)


def test_stop_is_quick_even_with_a_stalled_client(rk3588: tuple[HostRoot, NpuInfo]) -> None:
    # stop() joins request threads; a client that connects and never sends must not hold it
    # (the plugin exits within 2 s of SIGTERM, metrics included).
    host, info = rk3588
    server = start_metrics_server("127.0.0.1:0", PluginMetrics(), host, lambda: info, "", "rockchip.com/npu")
    with socket.create_connection(("127.0.0.1", server.port)):
        get(server.url)  # the stalled connection has been accepted by now (one accept loop)
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 1.5


def test_empty_socket_turns_attribution_off(rk3588: tuple[HostRoot, NpuInfo]) -> None:
    host, info = rk3588
    server = start_metrics_server("127.0.0.1:0", PluginMetrics(), host, lambda: info, "", "rockchip.com/npu")
    with server as srv:
        found = samples(get(srv.url))
    assert named(found, "rknpu_pod_resources_up") == {}
    assert named(found, "rknpu_core_allocated") == {}


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (":9101", ("0.0.0.0", 9101)),
        ("9101", ("0.0.0.0", 9101)),
        ("127.0.0.1:9101", ("127.0.0.1", 9101)),
        ("[::1]:9101", ("::1", 9101)),
        ("[::]:0", ("::", 0)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["", ":", "host", "host:port", ":70000", "1.2.3.4:-1"])
def test_bad_address_is_a_usage_error(address: str) -> None:
    with pytest.raises(UsageError, match="host:port"):
        parse_address(address)


def test_busy_port_is_a_usage_error(rk3588: tuple[HostRoot, NpuInfo]) -> None:
    host, info = rk3588
    first = start_metrics_server("127.0.0.1:0", PluginMetrics(), host, lambda: info, "", "r.io/x")
    with first, pytest.raises(UsageError, match="cannot serve metrics"):
        start_metrics_server(f"127.0.0.1:{first.port}", PluginMetrics(), host, lambda: info, "", "r.io/x")


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /metrics extra HTTP/1.1\r\n\r\n",
    ],
)
def test_no_server_banner_on_any_answer(rk3588: tuple[HostRoot, NpuInfo], request_bytes: bytes) -> None:
    host, info = rk3588
    with (
        start_metrics_server(
            "127.0.0.1:0", PluginMetrics(), host, lambda: info, "", "rockchip.com/npu"
        ) as srv,
        socket.create_connection(("127.0.0.1", srv.port)) as client,
    ):
        client.sendall(request_bytes)
        client.settimeout(5)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = client.recv(65536)
            if not chunk:
                break
            answer += chunk
    head = answer.split(b"\r\n\r\n")[0].decode()
    assert head.startswith("HTTP/1.")
    assert "server:" not in head.lower() and "python" not in head.lower()
