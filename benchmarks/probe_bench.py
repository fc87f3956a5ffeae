"""Benchmark: the device plugin's functional probe, the real plugin process against a fake kubelet
on a fixture RK3588 host, its probe children running the fake RKNNLite (tests/plugin/fake_rknnlite).

Prints JSON: per-core probe duration (one child: interpreter start, rknnlaunch + numpy import,
load, init, one inference; the fake runtime's own work is ~0), a full round over 3 cores, how long
a core that starts failing takes to go Unhealthy (fault injected -> ListAndWatch message), and the
plugin's RSS. On a board the real runtime adds its load/init
time (tens of ms for the 8x8 model).

    python benchmarks/probe_bench.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS), str(_TESTS / "plugin"), str(_TESTS / "sdk")]

from fakekubelet import DeviceStream, FakeKubelet, PluginProcess  # noqa: E402
from rknnfile_builder import rknn_bytes  # noqa: E402
from telemetry.fake_podresources import PodResourcesServer  # noqa: E402

from fakehost import make_host  # noqa: E402

LIBRKNNRT = b"\x7fELF" + b"\0" * 64 + b"librknnrt version: 2.3.2 (bench)\0"


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pbench-", dir="/tmp"))
    pod_resources = PodResourcesServer().start()
    kubelet = FakeKubelet(work / "dp")
    plugin: PluginProcess | None = None
    try:
        host_root = work / "host"
        make_host("rk3588-drm", host_root)
        (work / "image/usr/lib").mkdir(parents=True)
        (work / "image/usr/lib/librknnrt.so").write_bytes(LIBRKNNRT)
        model = work / "probe-rk3588.rknn"
        model.write_bytes(rknn_bytes(inputs=(("x", (1, 3, 8, 8)),), outputs=(("y", (1, 4, 8, 8)),)))
        config = work / "fake.json"
        config.write_text(json.dumps({"soc": "rk3588", "cores": {}}))
        kubelet.start()
        env = {
            "PYTHONPATH": os.pathsep.join(
                [
                    str(_TESTS / "plugin" / "fake_rknnlite"),
                    str(_TESTS / "sdk"),
                    os.environ.get("PYTHONPATH", ""),
                ]
            ),
            "RKNNLITE_FAKE_CONFIG": str(config),
            "RKNNLAUNCH_ROOT": str(work / "image"),
        }
        started = time.monotonic()
        plugin = PluginProcess(
            host_root,
            kubelet.plugin_dir,
            "--probe-model",
            str(work / "probe-{soc}.rknn"),
            "--probe-interval",
            "0.2",
            "--pod-resources-socket",
            pod_resources.socket_path,
            env=env,
        )
        _, request = kubelet.wait_registration()
        # Per-core durations as the plugin logged them (first verdict of each core).
        for core in range(3):
            plugin.wait_log(
                lambda e, c=core: e["msg"] == "core passed its probe" and e["core"] == c, timeout=120
            )
        first_round_s = time.monotonic() - started
        passed = [line["seconds"] for line in plugin.logs("core passed its probe")]
        plugin_rss = _rss_mb(plugin.pid)
        stream = DeviceStream(kubelet.plugin_stub(request.endpoint))
        stream.next()
        detect: list[float] = []
        for _ in range(args.rounds):
            config.write_text(json.dumps({"soc": "rk3588", "cores": {"1": "fail"}}))
            injected = time.monotonic()
            _, seen = stream.wait_for(lambda d: dict(d)["npu-core-1"] == "Unhealthy", timeout=120)
            detect.append(seen - injected)
            config.write_text(json.dumps({"soc": "rk3588", "cores": {}}))
            stream.wait_for(lambda d: all(h == "Healthy" for _, h in d), timeout=120)
        stream.cancel()
        print(
            json.dumps(
                {
                    "probe_seconds_per_core": [round(s, 3) for s in passed],
                    "first_round_from_start_s": round(first_round_s, 2),
                    "fault_to_unhealthy_s_median": round(statistics.median(detect), 2),
                    "fault_to_unhealthy_s_max": round(max(detect), 2),
                    "plugin_rss_mb": round(plugin_rss, 1),
                    "note": "fault -> Unhealthy: at most one round (3 probe children) + --probe-interval",
                },
                indent=2,
            )
        )
        return 0
    finally:
        if plugin is not None:
            plugin.stop()
        kubelet.stop()
        pod_resources.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
