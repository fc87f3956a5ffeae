"""Slow: the DRA driver assembled (tests/system/dra_trial.py): a sample claim of deploy/dra/samples
allocated against the driver's slice on a fake API server, prepared through the kubelet stub, and a
workload on the claim's CDI spec running `bench` on exactly those cores of the simulated NPU; as
plain processes (images/demo.sh --dra), and with the rknpu-dra-driver image under podman and a
runtime-image workload started with the claim's CDI device (CI's images, RKNNLAUNCH_IMAGES)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dra_trial
from test_system_assembled import IMAGES, IMAGES_ENV, MISSING

from rknnlaunch.npu import DeviceNode, NpuInfo, soc_by_name
from rknpu_dra_driver.slices._desired import NodeFacts, SliceLayout, desired_slices
from rknpu_node import device_ids

pytestmark = pytest.mark.slow
SAMPLE = dra_trial.SAMPLES / dra_trial.DEFAULT_SAMPLE


def _node_slices(node: str, soc: str, driver_version: str) -> list[dict[str, Any]]:
    """The slices our driver publishes for ``node`` (rknpu_dra_driver.slices._desired, auto layout)."""
    spec = soc_by_name(soc)
    assert spec is not None
    nodes = (DeviceNode("/dev/dri/card1", "card"), DeviceNode("/dev/dri/renderD129", "render"))
    compatible = (f"rockchip,{soc}",)
    npu = NpuInfo(spec, compatible, spec.npu_cores, "test", "drm", nodes, driver_version=driver_version)
    health = dict.fromkeys(device_ids(npu.core_count), True)
    layout = SliceLayout.PER_CORE
    built = desired_slices(node, dra_trial.DRIVER, 1, npu, health, NodeFacts(), f"{node}-uid", layout, None)
    return list(built)  # type: ignore[arg-type]


def test_the_sample_claim_gets_cores_0_and_1_of_an_rk3588_with_a_new_enough_driver() -> None:
    spec = dra_trial.sample_claim(SAMPLE)
    old_driver = _node_slices("a-old-driver", "rk3588", "0.9.7")
    other_soc = _node_slices("b-rk3576", "rk3576", "0.9.8")
    good = _node_slices("c-good", "rk3588", "0.9.8")
    results = dra_trial.allocate(spec, [*old_driver, *other_soc, *good])
    assert {(r["pool"], r["device"]) for r in results} == {("c-good", "npu-core-0"), ("c-good", "npu-core-1")}
    with pytest.raises(dra_trial.assembled.TrialError, match="cannot be allocated"):
        dra_trial.allocate(spec, [*old_driver, *other_soc])


def test_dra_trial_on_plain_processes_writes_only_under_its_folder(tmp_path: Path) -> None:
    work = tmp_path / "t"  # short: unix socket paths
    results = dra_trial.run(work, SAMPLE, {}, None)
    steps = {step["step"]: step for step in results["steps"]}
    assert steps["allocated"]["devices"] == ["npu-core-0", "npu-core-1"]
    assert steps["prepared"]["mask"] == "3" and steps["prepared"]["cores"] == "0,1"
    assert steps["unprepared"]["error"] is None and steps["unprepared"]["specs_left"] == 0
    assert results["problems"] == [], (results["problems"], results["bench_output"])
    assert results["cores_used"] == [0, 1] and set(results["per_core_fps"]) == {"0", "1"}
    assert sorted(p.name for p in (work / "registry").iterdir()) == []  # the socket is gone on stop
    assert (work / "plugin").is_dir() and (work / "cdi").is_dir()


@pytest.mark.skipif(
    MISSING is not None or "dra" not in IMAGES,
    reason=MISSING or f"{IMAGES_ENV} names no rknpu-dra-driver image",
)
def test_dra_driver_image_prepares_a_claim_a_runtime_container_consumes(
    tmp_path: Path,
) -> None:  # pragma: no cover
    work = Path(tempfile.mkdtemp(prefix="rkdra-ci-", dir="/tmp"))  # short: unix socket paths
    try:
        results = dra_trial.run(work / "t", SAMPLE, IMAGES, "podman")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results["steps"], indent=1))
    print(f"DRA assembled run (containers): {results['wall_s']} s")
    steps = {step["step"]: step for step in results["steps"]}
    assert steps["prepared"]["mask"] == "3" and steps["cdi spec"]["kind"] == "npu.rockchip.com/claim"
    assert results["problems"] == [], (results["problems"], results["bench_output"])
    assert results["cores_used"] == [0, 1]
