"""The DRA driver end to end at its real seams: kubelet stub over unix sockets (registration, DRA
v1 and v1beta1), the fake API server spoken to by the real `kubernetes` client, files on disk."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from drarig import DRIVER, NODE, DriverRig

from rknpu_dra_driver.claims._checkpoint import CHECKPOINT_NAME

UID = "0b9a6f44-5c1e-4d0e-9c55-2f0a3c9d1e01"


def results(*devices: str, driver: str = DRIVER, pool: str = NODE) -> list[dict[str, Any]]:
    return [{"request": "npu", "driver": driver, "pool": pool, "device": d} for d in devices]


def checkpoint(rig: DriverRig) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((rig.plugin_dir / CHECKPOINT_NAME).read_text())
    return data


def spec_files(rig: DriverRig) -> list[Path]:
    return sorted(rig.cdi_dir.glob("*.json")) if rig.cdi_dir.exists() else []


def slice_devices(slices: dict[str, Any]) -> list[str]:
    return [d["name"] for s in slices.values() for d in s["spec"]["devices"]]


def test_registers_as_a_dra_plugin_with_both_services(rig: DriverRig) -> None:
    kubelet = rig.start()
    assert kubelet.info is not None
    assert kubelet.info.type == "DRAPlugin"
    assert kubelet.info.name == DRIVER
    assert kubelet.info.endpoint == str(rig.plugin_dir / "dra.sock")
    assert list(kubelet.info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    assert oct(os.stat(kubelet.info.endpoint).st_mode & 0o777) == "0o600"


def test_publishes_one_device_per_core_with_attributes(rig: DriverRig) -> None:
    rig.start()
    slices = rig.api.wait_slices(lambda s: len(slice_devices(s)) == 3)
    (published,) = slices.values()
    spec = published["spec"]
    assert spec["driver"] == DRIVER and spec["nodeName"] == NODE
    assert spec["pool"]["name"] == NODE and spec["pool"]["resourceSliceCount"] == 1
    assert published["metadata"]["ownerReferences"][0]["kind"] == "Node"
    # Slice order is the scheduler's first-fit order: the lone core 2 first, cores 0-1 kept for pairs.
    assert [d["name"] for d in spec["devices"]] == ["npu-core-2", "npu-core-0", "npu-core-1"]
    core1 = spec["devices"][2]
    assert core1["attributes"]["soc"] == {"string": "rk3588"}
    assert core1["attributes"]["core"] == {"int": 1}
    assert core1["attributes"]["cores"] == {"int": 3}
    assert core1["attributes"]["driverVersion"] == {"version": "0.9.8"}
    assert core1["attributes"]["coreCount"] == {"int": 1}
    assert core1["attributes"]["coreMask"] == {"int": 2}
    assert core1["attributes"]["coreGroup"] == {"string": "0-1"}


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_writes_a_cdi_spec_and_checkpoint_and_unprepare_removes_them(
    rig: DriverRig, version: str
) -> None:
    kubelet = rig.start()
    rig.api.add_claim("default", "two-cores", UID, results("npu-core-0", "npu-core-1"))
    answer = kubelet.prepare([("default", "two-cores", UID)], version)
    claim = answer.claims[UID]
    assert claim.error == ""
    assert [d.device_name for d in claim.devices] == ["npu-core-0", "npu-core-1"]
    assert {d.pool_name for d in claim.devices} == {NODE}
    # One CDI device per request ("npu" here), named in the reply by the base request name.
    assert [list(d.cdi_device_ids) for d in claim.devices] == [[f"{DRIVER}/claim={UID}-npu"]] * 2
    assert [list(d.request_names) for d in claim.devices] == [["npu"]] * 2
    (spec_file,) = spec_files(rig)
    assert UID in spec_file.name
    spec = json.loads(spec_file.read_text())
    assert spec["kind"] == f"{DRIVER}/claim"
    assert spec["cdiVersion"] == "0.5.0"  # the device name starts with a digit; no annotations
    assert "annotations" not in spec
    (device,) = spec["devices"]
    assert device["name"] == f"{UID}-npu"
    edits = device["containerEdits"]
    env = dict(item.split("=", 1) for item in edits["env"])
    assert env["RKNN_NPU_CORE_MASK"] == "3"  # cores 0 and 1, the decimal mask the SDK parses
    assert env["RKNN_NPU_CORES"] == "0,1"
    assert env["RKNN_NPU_SOC"] == "rk3588"
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/dri/card1", "/dev/dri/renderD129"]
    assert any(m["containerPath"] == "/run/rknpu/compatible" for m in edits["mounts"])
    assert [c["claim"]["uid"] for c in checkpoint(rig)["claims"]] == [UID]

    again = kubelet.prepare([("default", "two-cores", UID)], version)  # idempotent (and shared pods)
    assert again.claims[UID] == claim

    gone = kubelet.unprepare([("default", "two-cores", UID)], version)
    assert gone.claims[UID].error == ""
    assert spec_files(rig) == []
    assert checkpoint(rig)["claims"] == []
    assert kubelet.unprepare([("default", "two-cores", UID)], version).claims[UID].error == ""


def test_a_whole_npu_claim_gets_every_core(rig: DriverRig) -> None:
    kubelet = rig.start()
    rig.api.add_claim("default", "whole", UID, results("npu-core-0", "npu-core-1", "npu-core-2"))
    assert kubelet.prepare([("default", "whole", UID)]).claims[UID].error == ""
    (spec_file,) = spec_files(rig)
    env = json.loads(spec_file.read_text())["devices"][0]["containerEdits"]["env"]
    assert "RKNN_NPU_CORE_MASK=7" in env


BAD = "1b9a6f44-5c1e-4d0e-9c55-2f0a3c9d1e0{}"


def test_every_claim_is_answered_and_bad_ones_get_their_own_error(rig: DriverRig) -> None:
    kubelet = rig.start()
    rig.api.add_claim("default", "good", UID, results("npu-core-2"))
    rig.api.add_claim("default", "deallocated", BAD.format(1), None)
    rig.api.add_claim("default", "recreated", "ffffffff-0000-0000-0000-000000000000", results("npu-core-0"))
    rig.api.add_claim("default", "other-driver", BAD.format(3), results("gpu-0", driver="gpu.example.com"))
    rig.api.add_claim("default", "other-node", BAD.format(4), results("npu-core-0", pool="node-b"))
    rig.api.add_claim("default", "huge", BAD.format(5), results(*(f"npu-core-{i}" for i in range(10_000))))
    asked = [
        ("default", "good", UID),
        ("default", "missing", BAD.format(0)),
        ("default", "deallocated", BAD.format(1)),
        ("default", "recreated", BAD.format(2)),
        ("default", "other-driver", BAD.format(3)),
        ("default", "other-node", BAD.format(4)),
        ("default", "huge", BAD.format(5)),
    ]
    answer = kubelet.prepare(asked)
    assert set(answer.claims) == {uid for _ns, _name, uid in asked}
    assert answer.claims[UID].error == ""
    errors = {name: answer.claims[uid].error for _ns, name, uid in asked if uid != UID}
    assert "does not exist" in errors["missing"]
    assert "not allocated" in errors["deallocated"]
    assert "uid 'ffffffff" in errors["recreated"]
    assert "no device of driver npu.rockchip.com" in errors["other-driver"]
    assert "'node-b'" in errors["other-node"]
    assert "10,000 device(s)" in errors["huge"] and len(errors["huge"]) < 600
    assert [c["claim"]["uid"] for c in checkpoint(rig)["claims"]] == [UID]
    assert len(spec_files(rig)) == 1


def test_api_down_fails_the_claim_clearly_and_prepare_recovers(rig: DriverRig) -> None:
    kubelet = rig.start()
    rig.api.add_claim("default", "c", UID, results("npu-core-0"))
    rig.api.down = True
    error = kubelet.prepare([("default", "c", UID)]).claims[UID].error
    assert "cannot read ResourceClaim default/c" in error and "503" in error and "retries" in error
    rig.api.down = False
    assert kubelet.prepare([("default", "c", UID)]).claims[UID].error == ""


def test_a_slow_api_fails_the_claim_within_the_api_timeout(rig: DriverRig) -> None:
    rig.settings = rig.settings.model_copy(update={"api_timeout": 1.0})
    kubelet = rig.start()
    rig.api.add_claim("default", "c", UID, results("npu-core-0"))
    rig.api.delay = 3.0  # > api_timeout (1 s), < the kubelet stub's deadline (10 s)
    error = kubelet.prepare([("default", "c", UID)]).claims[UID].error
    assert "cannot read ResourceClaim" in error and "Timeout" in error
    rig.api.delay = 0.0
    assert kubelet.prepare([("default", "c", UID)]).claims[UID].error == ""


def test_health_change_republishes_the_slice(rig: DriverRig) -> None:
    rig.start()
    rig.api.wait_slices(lambda s: len(slice_devices(s)) == 3)
    render = rig.host_root / "dev/dri/renderD129"
    saved = render.with_suffix(".gone")
    render.rename(saved)
    rig.api.wait_slices(lambda s: slice_devices(s) == [])
    saved.rename(render)
    slices = rig.api.wait_slices(lambda s: len(slice_devices(s)) == 3)
    # 1 at start, 2 the cores tainted (this fake drops taints, as a server without DRADeviceTaints),
    # 3 the cores left out instead, 4 back.
    assert next(iter(slices.values()))["spec"]["pool"]["generation"] == 4


def test_clean_stop_keeps_the_slice_and_removes_the_sockets(rig: DriverRig) -> None:
    rig.start()
    rig.api.wait_slices(lambda s: len(s) == 1)
    rig.end()
    assert rig.result == [0]
    assert len(slice_devices(rig.api.slices)) == 3  # a restart or an upgrade never empties the node
    assert not (rig.plugin_dir / "dra.sock").exists()
    assert not (rig.settings.registration_dir / f"{DRIVER}-reg.sock").exists()


def test_delete_slices_on_stop_cleans_up_for_an_uninstall(rig: DriverRig) -> None:
    rig.settings = rig.settings.model_copy(update={"delete_slices_on_stop": True})
    rig.start()
    rig.api.wait_slices(lambda s: len(s) == 1)
    rig.end()
    assert rig.result == [0] and rig.api.slices == {}


def test_prepared_claims_survive_a_restart(rig: DriverRig) -> None:
    kubelet = rig.start()
    rig.api.add_claim("default", "c", UID, results("npu-core-1"))
    first = kubelet.prepare([("default", "c", UID)]).claims[UID]
    rig.end()
    kubelet = rig.start()
    rig.api.down = True  # served from the checkpoint, not the API server
    assert kubelet.prepare([("default", "c", UID)]).claims[UID] == first


@pytest.mark.parametrize("damage", ["truncate", "garbage", "edit"])
def test_a_corrupt_checkpoint_is_refused_and_rebuilt_from_the_cdi_specs(
    rig: DriverRig, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet = rig.start()
    rig.api.add_claim("default", "c", UID, results("npu-core-1"))
    first = kubelet.prepare([("default", "c", UID)]).claims[UID]
    rig.end()
    path = rig.plugin_dir / CHECKPOINT_NAME
    text = path.read_text()
    path.write_text(
        {
            "truncate": text[: len(text) // 2],
            "garbage": "\0\0\0",
            "edit": text.replace("npu-core-1", "npu-core-2"),
        }[damage]
    )
    kubelet = rig.start()
    rig.api.down = True
    assert kubelet.prepare([("default", "c", UID)]).claims[UID] == first
    assert [c["claim"]["devices"][0]["device"] for c in checkpoint(rig)["claims"]] == ["npu-core-1"]


def test_kill_between_spec_and_checkpoint_loses_nothing(rig: DriverRig) -> None:
    from rknnlaunch.npu import HostRoot
    from rknpu_dra_driver.apiserver._api import KubeApi
    from rknpu_dra_driver.claims._store import ClaimStore
    from rknpu_node import NullEvents, ResourceManager

    class Killed(BaseException):
        """Stands for kill -9: nothing after the spec's write runs (no except, no finally of ours)."""

    rig.api.add_claim("default", "c", UID, results("npu-core-1"))
    resources = ResourceManager(HostRoot(rig.host_root), NullEvents())
    resources.scan()
    api = KubeApi(rig.settings.kubeconfig, 5.0)
    api.connect()
    store = ClaimStore(api, resources, DRIVER, NODE, rig.plugin_dir, rig.cdi_dir)
    store.load()

    def die(uid: str) -> None:
        raise Killed

    store.before_checkpoint = die
    with pytest.raises(Killed):
        store.prepare(_ref())
    assert len(spec_files(rig)) == 1 and not (rig.plugin_dir / CHECKPOINT_NAME).exists()

    (rig.cdi_dir / f".{DRIVER}-claim_{UID}.json.x1y2.tmp").write_text("{")  # a torn write's leftover
    kubelet = rig.start()
    assert [c["claim"]["uid"] for c in checkpoint(rig)["claims"]] == [UID]  # recovered from the spec
    assert not list(rig.cdi_dir.glob(".*.tmp"))
    assert kubelet.unprepare([("default", "c", UID)]).claims[UID].error == ""
    assert spec_files(rig) == [] and checkpoint(rig)["claims"] == []


def _ref() -> Any:
    from rknpu_dra_driver.claims._claim import ClaimRef

    return ClaimRef("default", "c", UID)


def test_a_second_driver_on_the_node_waits_for_the_first(rig: DriverRig) -> None:
    from rknpu_dra_driver._cli import run
    from rknpu_serverkit import StopEvent

    kubelet = rig.start()
    rig.api.add_claim("default", "c", UID, results("npu-core-0"))
    first = kubelet.prepare([("default", "c", UID)]).claims[UID]
    second_stop = StopEvent()
    second_result: list[int] = []
    second = threading.Thread(
        target=lambda: second_result.append(run(rig.settings, second_stop)), daemon=True
    )
    second.start()
    # The second one must not take the sockets: the first keeps answering.
    assert kubelet.prepare([("default", "c", UID)]).claims[UID] == first
    rig.end()  # the first stops; the second takes over with the checkpoint
    from kubeletstub import KubeletStub

    takeover = KubeletStub(rig.settings.registration_dir, DRIVER)
    takeover.register()
    rig.api.down = True
    assert takeover.prepare([("default", "c", UID)]).claims[UID] == first
    second_stop.set()
    second.join(10)
    assert second_result == [0]


def test_the_published_slice_is_valid_against_the_v1_schema(rig: DriverRig) -> None:
    import kubernetes_validate

    rig.start()
    (published,) = rig.api.wait_slices(lambda s: len(slice_devices(s)) == 3).values()
    body = {key: value for key, value in published.items()}
    body["metadata"] = {k: v for k, v in published["metadata"].items() if k != "resourceVersion"}
    for version in ("1.34", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(body, version, strict=True)


def test_a_claim_two_pods_share_is_prepared_once(rig: DriverRig) -> None:
    kubelet = rig.start()
    rig.api.add_claim("default", "shared", UID, results("npu-core-2"))
    first = kubelet.prepare([("default", "shared", UID)])  # pod A
    reads = sum(1 for method, path in rig.api.requests if path.endswith("/resourceclaims/shared"))
    second = kubelet.prepare([("default", "shared", UID)], "v1beta1")  # pod B, an older kubelet API
    assert [d.cdi_device_ids for d in first.claims[UID].devices] == [
        d.cdi_device_ids for d in second.claims[UID].devices
    ]
    assert sum(1 for method, path in rig.api.requests if path.endswith("/resourceclaims/shared")) == reads
    assert len(spec_files(rig)) == 1 and len(checkpoint(rig)["claims"]) == 1
