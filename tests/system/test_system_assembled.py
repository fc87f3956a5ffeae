"""Slow: the system assembled (tests/system/assembled.py): the plugin image under podman hands a
runtime-image container its NPU through CDI, and the real rknn-toolkit-lite2 runs `rknnlaunch
bench` on the simulated librknnrt; the probe image's per-core probe marks a failing core unhealthy.

The images come from CI's images step (`images/build.sh --base debootstrap --librknnrt-standin
sim`), named by RKNNLAUNCH_IMAGES (tags joined by ','). Needs root, podman and runc.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import assembled

IMAGES_ENV = "RKNNLAUNCH_IMAGES"


def _images() -> dict[str, str]:
    found = {}
    for tag in os.environ.get(IMAGES_ENV, "").split(","):
        name = tag.rsplit("/", 1)[-1].split(":", 1)[0]
        for role, repo in assembled.IMAGE_NAMES.items():
            if name == repo:
                found[role] = tag
    return found


IMAGES = _images()


def _missing() -> str | None:
    if os.geteuid() != 0 or shutil.which("podman") is None or not os.path.exists(assembled.RUNC):
        return "podman and runc as root are needed (apt-get install podman runc; .ci/run does)"
    if not {"runtime", "plugin"} <= IMAGES.keys():
        return (
            f"{IMAGES_ENV} names no runtime and plugin images (CI's images step builds them: images/build.sh)"
        )
    return None


MISSING = _missing()
pytestmark = pytest.mark.slow


def test_assembled_on_plain_processes(tmp_path: Path) -> None:
    """The demo's plain-process trial: plugin, stub kubelet, Allocate, doctor, and a bench on the
    NPU backend that ran on exactly the allocated cores of the x86_64 simulated librknnrt."""
    results = assembled.run(tmp_path / "trial", {}, None)
    steps = {step["step"]: step for step in results["steps"]}
    assert steps["allocated"]["mask"] == "3" and steps["allocated"]["cdi_devices"] == ["rockchip.com/npu=npu"]
    assert results["doctor_exit"] == 0, results["doctor_summaries"]
    assert (
        results["doctor"]["device-nodes"] == "ok" and "STAND-IN" in results["doctor_summaries"]["librknnrt"]
    )
    assert results["bench_exit"] == 0, results["bench_output"]
    assert results["bench_backend"] == "npu" and results["cores_used"] == [0, 1] == results["allocated_cores"]
    assert set(results["per_core_fps"]) == {"0", "1"} and all(
        fps > 0 for fps in results["per_core_fps"].values()
    )
    assert results["problems"] == []  # wall time: printed by the demo (a loaded CI machine varies)


def test_a_trial_whose_doctor_fails_does_not_pass() -> None:
    """A failing doctor check, a failing bench or jobs on other cores each fail the trial."""
    clean = {"doctor": {"npu": "ok", "rknn-toolkit-lite2": "warn"}, "doctor_exit": 0, "bench_exit": 0}
    assert assembled.verdict({**clean, "cores_used": [0, 1]}, [0, 1]) == []
    failing = {**clean, "doctor": {"device-nodes": "fail"}, "doctor_exit": 1, "cores_used": [0, 1]}
    assert assembled.verdict(failing, [0, 1]) == ["doctor exited 1 (failing: device-nodes)"]
    assert "not the allocated [0, 1]" in assembled.verdict({**clean, "cores_used": [0, 1, 2]}, [0, 1])[0]


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_plugin_image_allocates_and_the_runtime_image_runs_bench(tmp_path: Path) -> None:  # pragma: no cover
    results = assembled.run(tmp_path / "trial", IMAGES, "podman")
    print(json.dumps(results["steps"], indent=1))
    steps = {step["step"]: step for step in results["steps"]}
    assert steps["registered"]["resource"] == "rockchip.com/npu"
    allocated = steps["allocated"]
    assert allocated["mask"] == "3" and allocated["env"]["RKNN_NPU_CORES"] == "0,1"
    assert allocated["cdi_devices"] == ["rockchip.com/npu=npu"]
    assert steps["cdi spec"]["kind"] == "rockchip.com/npu"
    # Every check passes, device-nodes included (the trial's nodes open: assembled.openable_nodes).
    failing = {check: status for check, status in results["doctor"].items() if status not in ("ok", "warn")}
    assert not failing, (failing, results.get("doctor_summaries"))
    assert "STAND-IN" in results["doctor_summaries"]["librknnrt"]
    assert results["bench_exit"] == 0, results["bench_output"]
    assert results["cores_used"] == [0, 1] and results["problems"] == [], results["problems"]


E2E = """
import numpy as np
from rknnlite.api import RKNNLite
for mask in (1, 2, 4, 3, 7):
    lite = RKNNLite()
    lite.load_rknn("/models/tiny-rk3588.rknn")
    init = lite.init_runtime(core_mask=mask)
    y = lite.inference(inputs=[np.full((1, 32, 32, 3), 42, np.uint8)])
    print("mask", mask, "init", init, "out", None if y is None else [list(y[0].shape), float(y[0].flat[0])])
    lite.release()
"""


@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_runtime_image_runs_the_real_binding_on_every_core(tmp_path: Path) -> None:  # pragma: no cover
    """load_rknn -> init_runtime(mask) -> inference -> release in the arm64 image under qemu,
    non-root, read-only root filesystem, on the simulated librknnrt it was built with."""
    trial = assembled.Trial(tmp_path / "trial", IMAGES, "podman")
    assembled.prepare(trial)
    (trial.work / "e2e.py").write_text(E2E)
    shutil.copy(assembled.TINY_MODEL, trial.work / "tiny-rk3588.rknn")
    done = assembled.podman(
        "run", "--rm", "--read-only", "--user", "10001:10001", "--network", "none", "--tmpfs", "/tmp",
        "-v", f"{trial.work}:/models:ro", "-v", f"{trial.host}:/host:ro", "-e", "RKNNLAUNCH_ROOT=/host",
        "-v", f"{trial.sim_dir}:/run/rknn-sim", "-e", "RKNN_SIM_LOCK_DIR=/run/rknn-sim",
        "-e", "RKNN_NPU_COMPATIBLE_FILE=/run/rknpu/compatible",
        "--entrypoint", '["rknnlaunch", "run", "--no-check", "--"]',
        IMAGES["runtime"], "python", "/models/e2e.py",
    )  # fmt: skip
    for mask in (1, 2, 4, 3, 7):
        assert f"mask {mask} init 0 out [[1, 6, 1024], 42.0]" in done.stdout, done.stdout + done.stderr


def _health(stream: Any, timeout: float) -> dict[str, str]:
    devices = stream.next(timeout=timeout)
    return dict(devices or [])


@pytest.mark.skipif(
    MISSING is not None or "probe" not in IMAGES, reason=MISSING or f"{IMAGES_ENV} names no probe image"
)
def test_probe_image_turns_a_failing_core_unhealthy(tmp_path: Path) -> None:  # pragma: no cover - slow
    trial = assembled.Trial(tmp_path / "trial", IMAGES, "podman")
    assembled.prepare(trial)
    # The probe compares each core's answer with probe-expected.json: the simulator gives exactly it.
    shown = assembled.podman(
        "run", "--rm", "--entrypoint", "cat", IMAGES["probe"], "/opt/rknpu-probe/probe-expected.json"
    )  # fmt: skip
    expected = json.loads(shown.stdout)
    (trial.sim_dir / "probe-values.txt").write_text(" ".join(str(v) for v in expected["output"]["values"]))
    probe = ("--probe-model", "/opt/rknpu-probe/probe-{soc}.rknn", "--probe-interval", "20")
    with assembled.plugin_running(trial, IMAGES["probe"], probe) as kubelet:
        _, request = kubelet.wait_registration(timeout=600)
        stream = assembled.DeviceStream(kubelet.plugin_stub(request.endpoint))
        deadline = time.monotonic() + 900
        health = _health(stream, 600)  # every core waits for its first probe: unhealthy until then
        while set(health.values()) != {"Healthy"} and time.monotonic() < deadline:
            health = _health(stream, 600)
        first_round = dict(health)
        (trial.sim_dir / "fail-cores").write_text("2\n")  # core 1: "failed to submit!" from now on
        while health.get("npu-core-1") != "Unhealthy" and time.monotonic() < deadline:
            health = _health(stream, 600)
        stream.cancel()
    assert first_round == {"npu-core-0": "Healthy", "npu-core-1": "Healthy", "npu-core-2": "Healthy"}
    assert health == {"npu-core-0": "Healthy", "npu-core-1": "Unhealthy", "npu-core-2": "Healthy"}, health
