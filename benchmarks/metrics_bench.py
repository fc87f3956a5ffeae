"""Benchmark: the metrics endpoint's scrape latency and the serving process's idle CPU.

A child process serves `start_metrics_server` (the plugin's metrics: PluginMetrics + the NPU
collector) for a fixture RK3588 host on 127.0.0.1, with pod attribution from a fake kubelet
pod-resources API (real gRPC on a unix socket, --pods pods of which three hold NPU cores). The
parent scrapes it --scrapes times over HTTP (a new connection each, the load file rewritten before
each scrape so every scrape reads and parses it), then leaves it idle for --idle seconds and
reads the child's CPU time from /proc/<pid>/stat.

Prints JSON: scrape latency p50/p99/max (ms), CPU per scrape (ms), idle CPU (% of one core),
child RSS (MB). Targets (issue 6): scrape < 20 ms, idle CPU < 1 % of one core.

    python benchmarks/metrics_bench.py [--scrapes 200] [--idle 10] [--pods 50]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOAD_PATH = "sys/kernel/debug/rknpu/load"


def _serve(root: str, socket_path: str) -> int:
    """Child: serve the plugin's metrics until stdin closes."""
    from rknnlaunch.npu import HostRoot, discover
    from rknpu_device_plugin.telemetry._http import start_metrics_server
    from rknpu_device_plugin.telemetry._sink import PluginMetrics

    host = HostRoot(root)
    info = discover(host)
    metrics = PluginMetrics()
    metrics.registered()
    metrics.health_changed({f"npu-core-{n}": True for n in range(info.core_count)})
    server = start_metrics_server("127.0.0.1:0", metrics, host, lambda: info, socket_path, "rockchip.com/npu")
    print(json.dumps({"port": server.port}), flush=True)
    sys.stdin.read()  # the parent closes stdin to stop us
    server()
    return 0


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat (fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _scrape(port: int) -> bytes:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"scrape answered {response.status}")
        return body
    finally:
        connection.close()


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measurement")
    parser.add_argument("--pods", type=int, default=50, help="pods the fake kubelet reports")
    parser.add_argument("--serve", nargs=2, metavar=("ROOT", "SOCKET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return _serve(*args.serve)

    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "telemetry")]
    from fake_podresources import Assignment, PodResourcesServer

    from fakehost import make_host

    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as work:
        host = make_host("rk3588-drm", Path(work) / "host")
        kubelet = PodResourcesServer().start()
        assignments = [
            Assignment("vision", f"yolo-{core}", "infer", [f"npu-core-{core}"]) for core in range(3)
        ] + [
            Assignment("apps", f"web-{n}", "web", [f"dev-{n}"], resource="example.com/other")
            for n in range(max(0, args.pods - 3))
        ]
        kubelet.fake.set(assignments)
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(host.root), kubelet.socket_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            port = int(json.loads(child.stdout.readline())["port"])
            load_file = host.root / LOAD_PATH
            for _ in range(5):  # warm-up: imports, first gRPC dial
                _scrape(port)

            latencies: list[float] = []
            size = 0
            cpu_before = _cpu_seconds(child.pid)
            for i in range(args.scrapes):
                load_file.write_text(
                    f"NPU load:  Core0: {i % 100:2d}%, Core1:  {(i * 7) % 100:2d}%, Core2:  0%,\n"
                )
                started = time.perf_counter()
                body = _scrape(port)
                latencies.append((time.perf_counter() - started) * 1000)
                size = len(body)
            cpu_per_scrape_ms = (_cpu_seconds(child.pid) - cpu_before) * 1000 / args.scrapes
            assert b'rknpu_core_allocated{container="infer",core="2"' in body

            idle_cpu_start, idle_wall_start = _cpu_seconds(child.pid), time.monotonic()
            time.sleep(args.idle)  # measuring idleness: nothing to await
            idle_cpu = _cpu_seconds(child.pid) - idle_cpu_start
            idle_wall = time.monotonic() - idle_wall_start
            rss = _rss_mb(child.pid)
        finally:
            if child.stdin is not None:
                child.stdin.close()
            child.wait(timeout=10)
            kubelet.cleanup()

    p50, p99 = statistics.median(latencies), _percentile(latencies, 0.99)
    idle_percent = idle_cpu / idle_wall * 100
    result = {
        "scrapes": args.scrapes,
        "pods_reported_by_kubelet": len(assignments),
        "page_bytes": size,
        "scrape_ms": {"p50": round(p50, 3), "p99": round(p99, 3), "max": round(max(latencies), 3)},
        "cpu_per_scrape_ms": round(cpu_per_scrape_ms, 3),
        "idle_seconds": round(idle_wall, 2),
        "idle_cpu_percent_of_one_core": round(idle_percent, 3),
        "serving_process_rss_mb": round(rss, 1),
        "targets": {"scrape_ms": 20, "idle_cpu_percent": 1.0},
        "meets_targets": p99 < 20 and idle_percent < 1.0,
    }
    print(json.dumps(result, indent=2))
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
