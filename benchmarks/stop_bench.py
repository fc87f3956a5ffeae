"""Benchmark: SIGTERM to exit for the DRA driver and the device plugin, each a real process on a
fixture RK3588 (the driver against the tests' fake API server and kubelet stub, the plugin
against the fake kubelet), serving and idle when the signal comes.

Prints p50/max over --stops stops of each (taken in turn), and how many stops logged an actor
left behind after the stop budget ("still running after the stop budget"). Targets: p50 < 0.5 s,
none left behind (issue 31).

    python benchmarks/stop_bench.py [--stops 20]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS), str(_TESTS / "dra"), str(_TESTS / "plugin")]

from fakeapi import FakeApiServer  # noqa: E402
from fakekubelet import FakeKubelet, PluginProcess  # noqa: E402
from kubeletstub import KubeletStub  # noqa: E402

from fakehost import make_host  # noqa: E402

NODE, DRIVER = "bench-node", "npu.rockchip.com"
LEFT_BEHIND = "still running after the stop budget"
TARGETS = {"p50_s": 0.5, "left_behind": 0}


def _stderr_lines(process: subprocess.Popen[str], into: list[str]) -> threading.Thread:
    def read() -> None:
        assert process.stderr is not None
        into.extend(process.stderr)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _timed_stop(process: subprocess.Popen[str]) -> float:
    began = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    process.wait(30)
    return time.perf_counter() - began


def stop_driver(root: Path, api: FakeApiServer) -> tuple[float, bool]:
    """Start the driver, wait until it is registered and its slice is up, SIGTERM it."""
    api.delete_slices(NODE)
    args = [
        sys.executable,
        "-m",
        "rknpu_dra_driver",
        f"--host-root={root / 'host'}",
        f"--node-name={NODE}",
        f"--kubeconfig={root / 'kubeconfig'}",
        f"--registration-dir={root / 'registry'}",
        f"--plugin-dir={root / 'plugin'}",
        f"--cdi-dir={root / 'cdi'}",
        "--slice-layout=per-core",
        "--log-format=json",
    ]
    process = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = _stderr_lines(process, lines)
    try:
        kubelet = KubeletStub(root / "registry", DRIVER)
        kubelet.register(timeout=60)
        api.wait_slices(lambda slices: bool(slices))
        time.sleep(0.2)  # idle: the loops wait on their events
        kubelet.close()
        seconds = _timed_stop(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(5)
    return seconds, any(LEFT_BEHIND in line for line in lines)


def stop_plugin(root: Path) -> tuple[float, bool]:
    """Start the plugin, wait until it registered with the fake kubelet, SIGTERM it."""
    kubelet = FakeKubelet(root / "dp")
    kubelet.start()
    plugin = PluginProcess(root / "host", kubelet.plugin_dir)
    try:
        kubelet.wait_registration(30)
        time.sleep(0.2)
        seconds = _timed_stop(plugin.process)
    finally:
        plugin.stop()
        kubelet.stop()
    return seconds, any(LEFT_BEHIND in json.dumps(line) for line in plugin.lines)


def _figures(name: str, times: list[float], behind: int) -> dict[str, float]:
    return {
        f"{name}_stop_p50_s": round(statistics.median(times), 3),
        f"{name}_stop_max_s": round(max(times), 3),
        f"{name}_left_behind": behind,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stops", type=int, default=20)
    options = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rkstop-", dir="/tmp"))
    api = FakeApiServer().start()
    try:
        api.add_node(NODE)
        make_host("rk3588-drm", root / "host")
        for kubelets_folder in ("registry", "plugin"):  # the kubelet makes them; servers never do
            (root / kubelets_folder).mkdir()
        api.kubeconfig(root / "kubeconfig")
        driver: list[float] = []
        plugin: list[float] = []
        driver_behind = plugin_behind = 0
        for _ in range(options.stops):  # in turn, so load on the machine falls on both alike
            seconds, behind = stop_driver(root, api)
            driver.append(seconds)
            driver_behind += behind
            seconds, behind = stop_plugin(root)
            plugin.append(seconds)
            plugin_behind += behind
        figures = {
            **_figures("dra_driver", driver, driver_behind),
            **_figures("device_plugin", plugin, plugin_behind),
        }
    finally:
        api.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"stops": options.stops, **figures, "targets": TARGETS}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
