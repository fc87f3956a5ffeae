"""The functional probe: a core that fails, hangs or crashes goes Unhealthy and comes back when it
recovers; cores pods hold are never probed; no librknnrt means no probe, not broken cores.

Process-level: the real plugin against the fake kubelet, its probe children running the fake
RKNNLite (tests/plugin/fake_rknnlite) on a hand-built .rknn, pod holders from a fake pod-resources API.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from awaiting import eventually
from fakekubelet import DeviceStream, Rig, RigFactory, all_health
from sdk.rknnfile_builder import rknn_bytes
from telemetry.fake_podresources import Assignment, PodResourcesServer

from fakehost import make_host
from rknnlaunch.npu import NpuInfo
from rknpu_device_plugin.telemetry._nfd import parse_feature_text, plugin_labels
from rknpu_node._probe import (
    HoldersUnknownError,
    ProbeLoop,
    ProbeResult,
    result_from_child,
)

TESTS = Path(__file__).resolve().parents[1]
FAKE_PATH = os.pathsep.join(str(p) for p in (TESTS / "plugin" / "fake_rknnlite", TESTS / "sdk"))
LIBRKNNRT = b"\x7fELF" + b"\0" * 64 + b"librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)\0"


def _make_probe_model() -> ModuleType:
    path = TESTS.parent / "images" / "probe" / "make_probe_model.py"
    spec = importlib.util.spec_from_file_location("make_probe_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class ProbeRig:
    rig: Rig
    config: Path
    record: Path
    features: Path
    metrics_url: str
    answer: Path
    soc: str = "rk3588"

    def set_faults(self, **faults: str) -> None:
        """``core1="fail"`` -> core 1 fails from its next probe on (the file is read per instance)."""
        cores = {name.removeprefix("core"): fault for name, fault in faults.items()}
        tmp = self.config.with_suffix(".tmp")
        config = {"soc": self.soc, "cores": cores, "record": str(self.record), "answer": str(self.answer)}
        tmp.write_text(json.dumps(config))
        tmp.replace(self.config)

    def probed_cores(self) -> list[int]:
        return [int(line) for line in self.record.read_text().split()] if self.record.exists() else []

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            page = response.read().decode()
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in page.splitlines()
            if line and not line.startswith("#")
        }

    def labels(self) -> dict[str, str]:
        return parse_feature_text((self.features / "rknpu-plugin").read_text())


@pytest.fixture
def pod_resources() -> Iterator[PodResourcesServer]:
    server = PodResourcesServer().start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def probe_rig(
    rig_factory: RigFactory, pod_resources: PodResourcesServer
) -> Iterator[Callable[..., ProbeRig]]:
    work = Path(tempfile.mkdtemp(prefix="probe-", dir="/tmp"))

    def build(
        *args: str,
        faults: dict[str, str] | None = None,
        librknnrt: bool = True,
        toolkit: str = "2.3.2",
        target: str = "rk3588",
        host: str | None = "rk3588-drm",
        register: bool = True,
    ) -> ProbeRig:
        models = work / "models"
        models.mkdir(exist_ok=True)
        # Recorded as NCHW, as rknn-toolkit2 records a converted ONNX input (the child feeds NHWC).
        # The expected answer the probe image ships beside its models (healthy fake cores give it).
        (models / "probe-expected.json").write_text(_make_probe_model().expected_json())
        (models / "probe-rk3588.rknn").write_bytes(
            rknn_bytes(
                version=toolkit,
                targets=(target,),
                inputs=(("x", (1, 3, 8, 8)),),
                outputs=(("y", (1, 4, 8, 8)),),
            )
        )
        image_root = work / "image"
        if librknnrt:
            (image_root / "usr/lib").mkdir(parents=True, exist_ok=True)
            (image_root / "usr/lib/librknnrt.so").write_bytes(LIBRKNNRT)
        features = work / "features.d"
        features.mkdir(exist_ok=True)
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        probe = ProbeRig(
            rig=None,  # type: ignore[arg-type]
            config=work / "fake.json",
            record=work / "probed.txt",
            features=features,
            metrics_url=f"http://127.0.0.1:{port}/metrics",
            answer=models / "probe-expected.json",
        )
        probe.set_faults(**(faults or {}))
        env = {
            "PYTHONPATH": FAKE_PATH + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "RKNNLITE_FAKE_CONFIG": str(probe.config),
            "RKNNLAUNCH_ROOT": str(image_root),
        }
        probe.rig = rig_factory(
            host,
            "--probe-model",
            str(models / "probe-{soc}.rknn"),
            "--probe-interval",
            "0.3",
            "--pod-resources-socket",
            pod_resources.socket_path,
            "--metrics-address",
            f"127.0.0.1:{port}",
            "--nfd-dir",
            str(features),
            *args,
            env=env,
            register=register,
        )
        return probe

    try:
        yield build
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _health(devices: list[tuple[str, str]]) -> dict[str, str]:
    return dict(devices)


def test_a_core_that_fails_goes_unhealthy_and_recovers(probe_rig: Callable[..., ProbeRig]) -> None:
    probe = probe_rig("--probe-timeout", "30", faults={"core1": "fail"})
    stream = DeviceStream(probe.rig.stub())
    first = stream.next()  # nothing is offered before its first probe
    assert first == [(f"npu-core-{core}", "Unhealthy") for core in range(3)]
    want = {"npu-core-0": "Healthy", "npu-core-1": "Unhealthy", "npu-core-2": "Healthy"}
    stream.wait_for(lambda d: _health(d) == want)
    line = probe.rig.plugin.wait_log(lambda e: e["msg"] == "core failed its probe")
    assert line["core"] == 1 and "failed to submit!" in line["reason"]
    unhealthy = probe.rig.plugin.wait_log(
        lambda e: e["msg"] == "health changed" and e["unhealthy"] == ["npu-core-1"]
    )
    assert "core 1 failed its probe" in unhealthy["reason"]
    probe.rig.plugin.wait_log(lambda e: e["msg"] == "core passed its probe" and e["core"] == 2)
    samples = probe.metrics()
    assert samples['rknpu_core_probe_success{core="1"}'] == 0
    assert samples['rknpu_core_probe_success{core="0"}'] == 1
    assert samples['rknpu_core_probe_seconds{core="0"}'] > 0
    assert samples['rknpu_device_healthy{device="npu-core-1"}'] == 0
    ns = "rknpu.feature.node.kubernetes.io"
    # The file follows the health message by a moment (another process writes it): poll briefly.
    labels = eventually(probe.labels, lambda found: found.get(f"{ns}/devices-healthy") == "2")
    assert labels[f"{ns}/probe"] == "failed" and labels[f"{ns}/probe-failed-cores"] == "1"
    assert labels[f"{ns}/plugin-mode"] == "core"

    probe.set_faults()  # the core heals (a driver reload, a reboot into a good kernel)
    stream.wait_for(all_health("Healthy"))
    probe.rig.plugin.wait_log(lambda e: e["msg"] == "core passed its probe again" and e["core"] == 1)
    stream.cancel()
    probe.rig.plugin.stop()
    assert not (probe.features / "rknpu-plugin").exists()  # a stopped plugin vouches for nothing


def test_an_npu_found_late_is_held_back_until_probed(probe_rig: Callable[..., ProbeRig]) -> None:
    probe = probe_rig("--probe-timeout", "30", host=None, register=False)
    probe.rig.plugin.wait_log(lambda e: e["msg"].startswith("no usable NPU"))
    make_host("rk3588-drm", probe.rig.host_root)  # the driver loads after the plugin started
    probe.rig.registration = probe.rig.kubelet.wait_registration()[1]
    stream = DeviceStream(probe.rig.stub())
    assert stream.next() == [(f"npu-core-{core}", "Unhealthy") for core in range(3)]
    stream.wait_for(all_health("Healthy"))
    stream.cancel()


# The healthy cores' probes must finish within it too: a child process that imports numpy needs
# seconds of wall time on a loaded 2-core machine (6 s failed there once, as every core-0 probe
# ran out of time). 20 s is the plugin's default.
HUNG_TIMEOUT_S = 20


def test_a_hung_core_is_killed_at_the_timeout(probe_rig: Callable[..., ProbeRig]) -> None:
    probe = probe_rig("--probe-timeout", str(HUNG_TIMEOUT_S), faults={"core2": "hang"})
    stream = DeviceStream(probe.rig.stub())
    line = probe.rig.plugin.wait_log(lambda e: e["msg"] == "core failed its probe" and e["core"] == 2)
    devices, _ = stream.wait_for(lambda d: _health(d)["npu-core-0"] == "Healthy")
    assert _health(devices)["npu-core-2"] == "Unhealthy"
    assert f"no answer within {HUNG_TIMEOUT_S} s" in line["reason"]
    assert probe.metrics()['rknpu_core_probe_seconds{core="2"}'] >= HUNG_TIMEOUT_S
    stream.cancel()


def _probe_children(config: Path) -> list[int]:
    """Live probe children of this test (their environment names its fake config)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"_probe_child" in cmdline and f"RKNNLITE_FAKE_CONFIG={config}".encode() in environ:
            found.append(int(entry.name))
    return found


def test_sigterm_during_a_hung_probe_exits_at_once_and_kills_the_child(
    probe_rig: Callable[..., ProbeRig],
) -> None:
    import time

    probe = probe_rig("--probe-timeout", "120", faults={"core0": "hang"})
    # Poll: the fake records the core on entering inference, in another process (no event to await).
    assert eventually(probe.probed_cores, bool) == [0] and _probe_children(probe.config)
    started = time.monotonic()
    probe.rig.plugin.signal()
    assert probe.rig.plugin.wait(timeout=10) == 0  # exited, its output drained
    assert time.monotonic() - started < 2.0
    assert not probe.rig.plugin.logs("core failed its probe")  # killed by shutdown: not a verdict
    assert eventually(lambda: _probe_children(probe.config), lambda found: not found) == []


def test_a_core_computing_wrong_results_is_caught(probe_rig: Callable[..., ProbeRig]) -> None:
    probe = probe_rig("--probe-timeout", "30", faults={"core2": "garbage"})
    line = probe.rig.plugin.wait_log(lambda e: e["msg"] == "core failed its probe")
    assert line["core"] == 2 and "the core computes wrong results" in line["reason"]
    probe.rig.plugin.wait_log(lambda e: e["msg"] == "core passed its probe" and e["core"] == 1)


def test_expected_output_comparison() -> None:
    from rknpu_node._probe_child import output_problem

    expected = json.loads(_make_probe_model().expected_json())
    want = np.asarray(expected["output"]["values"]).reshape(expected["output"]["shape"])
    assert output_problem([want + 0.004], expected) is None  # fp16 rounding passes
    assert "wrong results" in (output_problem([np.zeros_like(want)], expected) or "")
    assert "expected 256" in (output_problem([np.zeros((1, 6, 8400))], expected) or "")
    assert "non-finite" in (output_problem([want * np.nan], expected) or "")
    assert output_problem([], None) == "the inference returned no outputs"
    assert output_problem([np.ones(3)], None) is None  # without expectations: finite is enough
    assert output_problem([want], {"output": {"values": "x"}}) is None  # malformed: judges nothing


def test_a_crashing_probe_fails_only_its_core(probe_rig: Callable[..., ProbeRig]) -> None:
    probe = probe_rig("--probe-timeout", "30", faults={"core0": "crash"})
    line = probe.rig.plugin.wait_log(lambda e: e["msg"] == "core failed its probe")
    assert line["core"] == 0 and "SIGSEGV" in line["reason"]


def test_cores_pods_hold_are_never_probed(
    probe_rig: Callable[..., ProbeRig], pod_resources: PodResourcesServer
) -> None:
    pod_resources.fake.set([Assignment("vision", "yolo", "infer", ["npu-core-0"])])
    probe = probe_rig("--probe-timeout", "30", faults={"core0": "fail"})
    for _ in range(2):  # two full rounds
        probe.rig.plugin.wait_log(lambda e: e["msg"] == "core passed its probe" and e["core"] == 2)
    probe.rig.plugin.wait_log(lambda e: e["msg"] == "core passed its probe" and e["core"] == 1)
    assert 0 not in probe.probed_cores() and {1, 2} <= set(probe.probed_cores())
    assert DeviceStream(probe.rig.stub()).next() == [
        ("npu-core-0", "Healthy"),
        ("npu-core-1", "Healthy"),
        ("npu-core-2", "Healthy"),
    ]
    assert not probe.rig.plugin.logs("core failed its probe")


def test_no_probe_without_librknnrt_and_cores_stay_healthy(probe_rig: Callable[..., ProbeRig]) -> None:
    probe = probe_rig(faults={"core1": "fail"}, librknnrt=False)
    line = probe.rig.plugin.wait_log(lambda e: e["msg"] == "functional probe off")
    assert "librknnrt.so" in line["reason"]
    assert DeviceStream(probe.rig.stub()).next() == [(f"npu-core-{core}", "Healthy") for core in range(3)]
    assert probe.probed_cores() == []


def test_no_probe_when_the_model_is_newer_than_librknnrt(probe_rig: Callable[..., ProbeRig]) -> None:
    probe = probe_rig(faults={}, toolkit="2.5.0")  # the image's librknnrt is 2.3.2
    line = probe.rig.plugin.wait_log(lambda e: e["msg"] == "functional probe off")
    assert "built by rknn-toolkit2 2.5.0, newer than librknnrt 2.3.2" in line["reason"]
    assert DeviceStream(probe.rig.stub()).next() == [(f"npu-core-{core}", "Healthy") for core in range(3)]


def test_a_model_for_another_soc_is_no_verdict_on_the_cores(probe_rig: Callable[..., ProbeRig]) -> None:
    probe = probe_rig("--probe-timeout", "30", target="rk3576")
    line = probe.rig.plugin.wait_log(
        lambda e: e["msg"] == "functional probe off" and "cannot judge" in e["reason"]
    )
    assert "rk3576" in line["reason"]
    assert DeviceStream(probe.rig.stub()).next() == [(f"npu-core-{core}", "Healthy") for core in range(3)]
    assert not probe.rig.plugin.logs("core failed its probe")


def test_whole_mode_device_fails_with_any_core(probe_rig: Callable[..., ProbeRig]) -> None:
    probe = probe_rig("--mode", "whole", "--probe-timeout", "30", faults={"core2": "fail"})
    stream = DeviceStream(probe.rig.stub())
    probe.rig.plugin.wait_log(lambda e: e["msg"] == "core failed its probe" and e["core"] == 2)
    stream.wait_for(lambda d: d == [("npu-cores-0-1-2", "Unhealthy")])
    labels = eventually(probe.labels, lambda found: "rknpu.feature.node.kubernetes.io/probe" in found)
    assert labels["rknpu.feature.node.kubernetes.io/plugin-mode"] == "whole"
    assert labels["rknpu.feature.node.kubernetes.io/probe-failed-cores"] == "2"
    stream.cancel()


# --- the pure parts, without processes -----------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "stdout", "stderr", "ok", "reason"),
    [
        (0, '{"ok": true, "seconds": 0.25}\n', "", True, None),
        (0, '{"ok": false, "reason": "no outputs"}', "E RKNN: failed to submit!\n", False,
         "no outputs; log: E RKNN: failed to submit!"),
        (-11, "", "", False, "the probe child died with SIGSEGV"),
        (1, "", "Traceback\nImportError: numpy\n", False,
         "the probe child exited with status 1 without a verdict; log: Traceback | ImportError: numpy"),
    ],
)  # fmt: skip
def test_result_from_child(code: int, stdout: str, stderr: str, ok: bool, reason: str | None) -> None:
    result = result_from_child(1, code, stdout, stderr, 0.5)
    assert (result.ok, result.reason) == (ok, reason)
    assert result.seconds == (0.25 if ok else 0.5)


def test_a_probe_that_cannot_judge_gives_no_verdict() -> None:
    stdout = '{"ok": false, "unusable": true, "reason": "unknown SoC"}'
    result = result_from_child(2, 0, stdout, "", 0.3)
    assert result.unusable and result.reason == "unknown SoC"


def test_result_reason_is_bounded() -> None:
    result = result_from_child(0, 1, "", "x" * 100_000, 1.0)
    assert result.reason is not None and len(result.reason) <= 600


def test_plugin_labels() -> None:
    health = {"npu-core-0": True, "npu-core-1": False}
    assert plugin_labels("core", health, {}) == {
        "plugin-mode": "core",
        "devices": "2",
        "devices-healthy": "1",
    }
    labels = plugin_labels("core", health, {0: True, 1: False, 2: False})
    assert labels["probe"] == "failed" and labels["probe-failed-cores"] == "1.2"
    assert plugin_labels("whole", {"npu-cores-0-1": True}, {0: True, 1: True})["probe"] == "passed"


class _Runner:
    def __init__(self, failing: Collection[int] = ()) -> None:
        self.failing = set(failing)
        self.probed: list[int] = []

    def check(self, model: Path) -> str | None:
        return None

    def probe(self, core: int, model: Path, info: NpuInfo) -> ProbeResult:
        self.probed.append(core)
        return ProbeResult(core, core not in self.failing, 0.1, "broken" if core in self.failing else None)

    def kill(self) -> None:
        pass


class _Resources:
    def __init__(self, info: NpuInfo) -> None:
        self.info = info
        self.failures: dict[int, str] = {}
        self.pending: set[int] = set()
        self.published: list[tuple[dict[int, str], set[int]]] = []

    def set_probe_failures(self, failures: dict[int, str], pending: Collection[int] = ()) -> bool:
        self.failures, self.pending = dict(failures), set(pending)
        self.published.append((self.failures, self.pending))
        return True


class _Events:
    def __init__(self) -> None:
        self.probes: list[tuple[int, bool]] = []

    def probed(self, core: int, ok: bool, seconds: float) -> None:
        self.probes.append((core, ok))


def _loop(
    host_factory: Callable[[str], object],
    tmp_path: Path,
    held: Callable[[], Collection[int]],
    runner: _Runner,
) -> tuple[ProbeLoop, _Resources, _Events]:
    from rknnlaunch.npu import HostRoot, discover

    host = host_factory("rk3588-drm")
    assert isinstance(host, HostRoot)
    resources = _Resources(discover(host))
    events = _Events()
    model = tmp_path / "probe.rknn"
    model.write_bytes(b"RKNN")
    loop = ProbeLoop(resources, events, runner, lambda soc: model, held, 60.0)  # type: ignore[arg-type]
    return loop, resources, events


def test_loop_skips_held_cores_and_keeps_their_verdict(
    host_factory: Callable[[str], object], tmp_path: Path
) -> None:
    held: set[int] = set()
    runner = _Runner(failing={1})
    loop, resources, events = _loop(host_factory, tmp_path, lambda: held, runner)
    loop.run_round(threading.Event())
    assert runner.probed == [0, 1, 2] and resources.failures == {1: "broken"}
    held.add(1)
    runner.failing.clear()
    loop.run_round(threading.Event())
    assert runner.probed == [0, 1, 2, 0, 2]  # core 1 is a pod's now: not probed, still failed
    assert resources.failures == {1: "broken"}
    assert events.probes[-2:] == [(0, True), (2, True)]


def test_loop_pauses_without_verdicts_when_the_probe_cannot_judge(
    host_factory: Callable[[str], object], tmp_path: Path
) -> None:
    class Unusable(_Runner):
        def probe(self, core: int, model: Path, info: NpuInfo) -> ProbeResult:
            self.probed.append(core)
            return ProbeResult(core, False, 0.1, "model built for rk3576", unusable=True)

    runner = Unusable()
    loop, resources, events = _loop(host_factory, tmp_path, lambda: set(), runner)
    loop.run_round(threading.Event())
    assert runner.probed == [0] and resources.failures == {} and events.probes == []


def test_cores_wait_for_their_first_verdict(host_factory: Callable[[str], object], tmp_path: Path) -> None:
    held = {2}
    loop, resources, _events = _loop(host_factory, tmp_path, lambda: held, _Runner(failing={1}))
    loop.begin()
    assert resources.pending == {0, 1, 2}  # not offered before the probe has judged them
    loop.run_round(threading.Event())
    assert [pending for _, pending in resources.published] == [{0, 1, 2}, {1, 2}, {2}, set()]
    assert resources.failures == {1: "broken"}  # core 2: a pod holds it, so it is offered as is


def test_loop_does_not_probe_when_holders_are_unknown(
    host_factory: Callable[[str], object], tmp_path: Path
) -> None:
    def unknown() -> Collection[int]:
        raise HoldersUnknownError("kubelet is not answering")

    runner = _Runner()
    loop, resources, _events = _loop(host_factory, tmp_path, unknown, runner)
    loop.begin()
    loop.run_round(threading.Event())
    assert runner.probed == [] and resources.failures == {}
    assert resources.pending == set()  # the probe cannot run: cores go on device health alone


def test_probe_input_is_nhwc_whatever_the_metadata_says() -> None:
    from rknpu_node._probe_child import nhwc_shape

    assert nhwc_shape((1, 3, 8, 8)) == (1, 8, 8, 3)
    assert nhwc_shape((1, 8, 8, 3)) == (1, 8, 8, 3)
    assert nhwc_shape((1, 640, 640, 3)) == (1, 640, 640, 3)
    assert nhwc_shape((1, 16)) == (1, 16)


def test_probe_model_graph_is_our_own_conv() -> None:
    onnx = pytest.importorskip("onnx")

    module = _make_probe_model()
    model = onnx.load_from_string(module.probe_onnx_bytes())
    assert [node.op_type for node in model.graph.node] == ["Conv", "Relu"]
    assert set(module.TARGETS) == {"rk3588", "rk3576", "rk3566", "rk3562"}
    # The expected answer is the graph's own: onnxruntime (the CPU backend) agrees with it.
    ort = pytest.importorskip("onnxruntime")
    expected = json.loads(module.expected_json())
    x = np.full((1, 3, 8, 8), expected["input"]["value"] / 255.0, dtype=np.float32)
    got = ort.InferenceSession(module.probe_onnx_bytes()).run(None, {"x": x})[0]
    assert np.abs(got.ravel() - np.asarray(expected["output"]["values"])).max() < 1e-5
