"""Benchmark: the DRA driver against the tests' fake API server and kubelet stub on a fixture RK3588.

Prints each target beside its number (docs/dra.md#measurements):

- NodePrepareResources for one claim, p50/p99 over --cycles prepare/unprepare cycles, each a
  new claim UID (API server read, then under the serialize lock: checkpoint read, CDI spec and
  checkpoint writes, neither fsynced; the gRPC round trip over the unix socket included). The
  lone fsynced write printed beside it is what each prepare paid before. Target p99 <= 20 ms.
- What the cycles leave behind: CDI specs, checkpoint entries, open fds of the process. Target 0.
- Health change -> republished slice (render node removed / restored in the fixture tree ->
  the fake API server holds the new slice), median of --rounds. Target <= 1 s.
- Driver restart -> registered and serving (a prepare answered): in the same process, and as a
  new `python -m rknpu_dra_driver` process (interpreter start and imports included). Target <= 1 s.
- Start -> slice published, as a new process on a node with no slice (the kubelet wiped it; the
  API client's import and start included). Target <= 2 s.
- Rolling-update handover between two driver processes (--instance-id): the new one started and
  registered, then the old one SIGTERMed, while the kubelet stub prepares claims back to back:
  the longest prepare, and the longest time the node had no slice device. Targets <= 1 s.

    python benchmarks/dra_bench.py [--cycles 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS), str(_TESTS / "dra")]

from fakeapi import FakeApiServer  # noqa: E402
from kubeletstub import KubeletStub  # noqa: E402

from fakehost import make_host  # noqa: E402
from rknpu_dra_driver._cli import run  # noqa: E402
from rknpu_dra_driver._settings import DraSettings  # noqa: E402
from rknpu_dra_driver.claims._checkpoint import CHECKPOINT_NAME  # noqa: E402

NODE, DRIVER = "bench-node", "npu.rockchip.com"
TARGETS = {
    "prepare_p99_ms": 20.0,
    "left_specs": 0,
    "left_checkpoint_entries": 0,
    "left_fds": 0,
    "health_republish_s": 1.0,
    "restart_serving_in_process_s": 1.0,
    "restart_serving_process_s": 1.0,
    "start_to_slice_process_s": 2.0,
    "handover_longest_prepare_s": 1.0,
    "handover_longest_without_slice_s": 1.0,
}


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _devices(slices: dict[str, Any]) -> int:
    return sum(len(s["spec"].get("devices") or []) for s in slices.values())


class Bench:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.api = FakeApiServer().start()
        self.api.add_node(NODE)
        make_host("rk3588-drm", root / "host")
        for kubelets_folder in ("registry", "plugin"):  # the kubelet makes them; servers never do
            (root / kubelets_folder).mkdir()
        self.settings = DraSettings(
            host_root=root / "host",
            node_name=NODE,
            driver_name=DRIVER,
            kubeconfig=str(self.api.kubeconfig(root / "kubeconfig")),
            registration_dir=root / "registry",
            plugin_dir=root / "plugin",
            cdi_dir=root / "cdi",
            health_interval=0.5,
            slice_layout="per-core",  # one device per core: "3 devices" is the whole slice
            instance_id="",
        )
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.kept_uid = ""

    def start(self) -> KubeletStub:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=run, args=(self.settings, self.stop), daemon=True)
        self.thread.start()
        kubelet = KubeletStub(self.settings.registration_dir, DRIVER)
        kubelet.register()
        return kubelet

    def end(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)

    def prepare_cycles(self, kubelet: KubeletStub, cycles: int) -> dict[str, float]:
        fds_before = 0
        latencies = []
        for index in range(-1, cycles):  # cycle -1 warms up: the API client's pooled connection opens
            if index == 0:
                fds_before = _open_fds()
                latencies.clear()
            uid = str(uuid.uuid4())
            name = f"claim-{index}"
            self.api.add_claim(
                "bench",
                name,
                uid,
                [{"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-core-0"}],
            )
            began = time.perf_counter()
            answer = kubelet.prepare([("bench", name, uid)])
            latencies.append(time.perf_counter() - began)
            if answer.claims[uid].error:
                raise SystemExit(f"prepare failed: {answer.claims[uid].error}")
            kubelet.unprepare([("bench", name, uid)])
            with self.api.lock:
                del self.api.claims[("bench", name)]
        kubelet.close()
        checkpoint = json.loads((self.settings.resolved_plugin_dir / CHECKPOINT_NAME).read_text())
        latencies.sort()
        return {
            "prepare_p50_ms": round(statistics.median(latencies) * 1000, 2),
            "prepare_p90_ms": round(latencies[int(len(latencies) * 0.90) - 1] * 1000, 2),
            "prepare_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
            "left_specs": len(list(self.settings.cdi_dir.glob("*.json"))),
            "left_checkpoint_entries": len(checkpoint["claims"]),
            "left_fds": max(_open_fds() - fds_before, 0),
        }

    def components(self, calls: int = 500) -> dict[str, float]:
        """Where a prepare's time goes, on this machine now: one API read, one fsynced file write."""
        from rknpu_dra_driver.apiserver._api import KubeApi
        from rknpu_serverkit import write_atomic

        api = KubeApi(str(self.settings.kubeconfig), 5.0)
        api.connect()
        self.api.add_claim("bench", "probe", "probe-uid", None)
        reads, writes = [], []
        for _ in range(calls):
            began = time.perf_counter()
            api.get_claim("bench", "probe")
            reads.append(time.perf_counter() - began)
            began = time.perf_counter()
            write_atomic(self.root / "probe.json", "{}" * 400)
            writes.append(time.perf_counter() - began)
        return {
            "api_read_p50_ms": round(statistics.median(reads) * 1000, 2),
            "fsynced_write_p50_ms": round(statistics.median(writes) * 1000, 2),
            "fsynced_write_p99_ms": round(sorted(writes)[int(len(writes) * 0.99) - 1] * 1000, 2),
            "api_read_p99_ms": round(sorted(reads)[int(len(reads) * 0.99) - 1] * 1000, 2),
            "load_average_1m": round(os.getloadavg()[0], 1),
            "cpus": float(os.cpu_count() or 1),
        }

    def health(self, rounds: int) -> float:
        self.api.wait_slices(lambda s: _devices(s) == 3)
        render = self.settings.host_root / "dev/dri/renderD129"
        hidden = render.with_name("renderD129.gone")
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            render.rename(hidden)
            self.api.wait_slices(lambda s: _devices(s) == 0)
            times.append(time.perf_counter() - began)
            began = time.perf_counter()
            hidden.rename(render)
            self.api.wait_slices(lambda s: _devices(s) == 3)
            times.append(time.perf_counter() - began)
        return round(statistics.median(times), 3)

    def restart_in_process(self, rounds: int) -> float:
        uid = str(uuid.uuid4())
        self.api.add_claim(
            "bench", "kept", uid, [{"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-core-1"}]
        )
        kubelet = self.start()
        kubelet.prepare([("bench", "kept", uid)])
        kubelet.close()
        times = []
        for _ in range(rounds):
            self.end()
            began = time.perf_counter()
            kubelet = self.start()
            if kubelet.prepare([("bench", "kept", uid)]).claims[uid].error:
                raise SystemExit("the restarted driver did not serve the kept claim")
            times.append(time.perf_counter() - began)
            kubelet.close()
        self.end()
        self.kept_uid = uid
        return round(statistics.median(times), 3)

    def _process_args(self, instance: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rknpu_dra_driver",
            f"--host-root={self.settings.host_root}",
            f"--node-name={NODE}",
            f"--kubeconfig={self.settings.kubeconfig}",
            f"--registration-dir={self.settings.registration_dir}",
            f"--plugin-dir={self.settings.resolved_plugin_dir}",
            f"--cdi-dir={self.settings.cdi_dir}",
            "--slice-layout=per-core",
            "--log-level=warning",
            f"--instance-id={instance}",
        ]

    def handover(self, claims: int = 2000) -> tuple[float, float]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        names = [(f"h{i}", str(uuid.uuid4())) for i in range(claims)]
        for name, uid in names:
            self.api.add_claim(
                "bench",
                name,
                uid,
                [{"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-core-2"}],
            )
        old = subprocess.Popen(self._process_args("old-pod"), env=env)
        new: subprocess.Popen[bytes] | None = None
        try:
            kubelet = KubeletStub(self.settings.registration_dir, DRIVER)
            kubelet.register(timeout=60)
            self.api.wait_slices(lambda s: _devices(s) == 3)
            longest = [0.0]
            failures: list[str] = []
            done = threading.Event()

            def prepares() -> None:
                for name, uid in names:
                    if done.is_set():
                        return
                    began = time.perf_counter()
                    try:
                        if kubelet.prepare([("bench", name, uid)]).claims[uid].error:
                            failures.append(uid)
                        kubelet.unprepare([("bench", name, uid)])
                    except Exception as exc:
                        failures.append(repr(exc))
                    longest[0] = max(longest[0], time.perf_counter() - began)

            caller = threading.Thread(target=prepares)
            began = time.monotonic()
            caller.start()
            new = subprocess.Popen(self._process_args("new-pod"), env=env)
            kubelet.register(timeout=60)
            old.send_signal(signal.SIGTERM)
            old.wait(10)
            time.sleep(0.5)  # prepares keep going to the new instance
            done.set()
            caller.join(60)
            without = self.api.longest_without_devices(began, time.monotonic())
            if failures:
                raise SystemExit(f"handover: {len(failures)} prepares failed, e.g. {failures[0]}")
            kubelet.close()
            return round(longest[0], 3), round(without, 3)
        finally:
            for process in (old, new):
                if process is not None and process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    process.wait(10)

    def restart_process(self, rounds: int) -> tuple[float, float]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        args = [
            sys.executable,
            "-m",
            "rknpu_dra_driver",
            f"--host-root={self.settings.host_root}",
            f"--node-name={NODE}",
            f"--kubeconfig={self.settings.kubeconfig}",
            f"--registration-dir={self.settings.registration_dir}",
            f"--plugin-dir={self.settings.resolved_plugin_dir}",
            f"--cdi-dir={self.settings.cdi_dir}",
            "--slice-layout=per-core",
            "--log-level=warning",
        ]
        times, slices = [], []
        for _ in range(rounds):
            self.api.delete_slices(NODE)  # what a starting kubelet does: the node has no slice
            began = time.perf_counter()
            process = subprocess.Popen(args, env=env)
            try:
                kubelet = KubeletStub(self.settings.registration_dir, DRIVER)
                kubelet.register()
                # Serving: a prepared claim answered (from the checkpoint: the API client may still load).
                if kubelet.prepare([("bench", "kept", self.kept_uid)]).claims[self.kept_uid].error:
                    raise SystemExit("the new driver process did not serve the kept claim")
                times.append(time.perf_counter() - began)
                self.api.wait_slices(lambda s: _devices(s) == 3)
                slices.append(time.perf_counter() - began)
                kubelet.close()
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(10)
        return round(statistics.median(times), 3), round(max(slices), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rkdrab-", dir="/tmp"))
    bench = Bench(root)
    try:
        kubelet = bench.start()
        bench.api.wait_slices(lambda s: _devices(s) == 3, timeout=60)  # the API client has loaded
        numbers: dict[str, float] = bench.prepare_cycles(kubelet, args.cycles)
        numbers.update(bench.components())
        numbers["health_republish_s"] = bench.health(args.rounds)
        bench.end()
        numbers["restart_serving_in_process_s"] = bench.restart_in_process(args.rounds)
        serving, sliced = bench.restart_process(args.rounds)
        numbers["restart_serving_process_s"] = serving
        numbers["start_to_slice_process_s"] = sliced  # the slowest of the rounds
        longest, without = bench.handover()
        numbers["handover_longest_prepare_s"] = longest
        numbers["handover_longest_without_slice_s"] = without
    finally:
        bench.end()
        bench.api.stop()
        shutil.rmtree(root, ignore_errors=True)
    for key, value in numbers.items():
        target = TARGETS.get(key)
        verdict = "" if target is None else ("  ok" if value <= target else "  MISSED")
        print(f"{key:32} {value:>10}" + ("" if target is None else f"   target <= {target}{verdict}"))
    print(json.dumps(numbers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
