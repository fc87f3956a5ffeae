"""Prepare's side of allocation (issue 25): the kubelet gets base request names for firstAvailable
subrequests, each request is its own CDI device, a core held by another prepared claim is refused
naming the holder, adminAccess is prepared without exclusivity and marked in the env, a set one
context refuses comes with its per-context groups, and the CDI specs stay at the lowest version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from drarig import DRIVER, NODE, DriverRig
from kubeletstub import KubeletStub

from rknnlaunch.npu import DeviceNode, NpuInfo, soc_by_name
from rknpu_dra_driver.claims._booking import conflicts
from rknpu_dra_driver.claims._cdi import claim_from_spec, claim_spec
from rknpu_dra_driver.claims._claim import AllocatedDevice, ClaimRef, PreparedClaim
from rknpu_node import NodeExtras, minimum_cdi_version

UID_A = "0b9a6f44-5c1e-4d0e-9c55-2f0a3c9d1e01"
UID_B = "0b9a6f44-5c1e-4d0e-9c55-2f0a3c9d1e02"
UID_C = "0b9a6f44-5c1e-4d0e-9c55-2f0a3c9d1e03"


def result(device: str, request: str = "npu", admin: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": request, "driver": DRIVER, "pool": NODE, "device": device}
    if admin:
        entry["adminAccess"] = True
    return entry


def spec_env(rig: DriverRig, uid: str) -> dict[str, dict[str, str]]:
    """CDI device name -> its env, from the claim's spec."""
    spec = json.loads((rig.cdi_dir / f"{DRIVER}-claim_{uid}.json").read_text())
    return {
        d["name"]: dict(item.split("=", 1) for item in d["containerEdits"]["env"]) for d in spec["devices"]
    }


def started(rig: DriverRig) -> KubeletStub:
    kubelet = rig.start()
    rig.api.wait_slices(lambda s: len(s) >= 1)  # the API client is up
    return kubelet


def test_a_subrequest_result_is_answered_under_its_base_request(rig: DriverRig) -> None:
    kubelet = started(rig)
    rig.api.add_claim(
        "default", "adaptive", UID_A, [result("npu-core-0", "npu/pair"), result("npu-core-1", "npu/pair")]
    )
    answer = kubelet.prepare([("default", "adaptive", UID_A)]).claims[UID_A]
    assert answer.error == ""
    assert [list(d.request_names) for d in answer.devices] == [["npu"], ["npu"]]
    assert {tuple(d.cdi_device_ids) for d in answer.devices} == {(f"{DRIVER}/claim={UID_A}-npu",)}
    assert spec_env(rig, UID_A)[f"{UID_A}-npu"]["RKNN_NPU_CORE_MASK"] == "3"


def test_each_request_is_its_own_cdi_device_with_only_its_cores(rig: DriverRig) -> None:
    kubelet = started(rig)
    rig.api.add_claim(
        "default",
        "two-containers",
        UID_A,
        [result("npu-core-2", "tracker"), result("npu-core-0", "detector"), result("npu-core-1", "detector")],
    )
    answer = kubelet.prepare([("default", "two-containers", UID_A)]).claims[UID_A]
    assert answer.error == ""
    by_request = {d.device_name: (list(d.request_names), list(d.cdi_device_ids)) for d in answer.devices}
    assert by_request["npu-core-2"] == (["tracker"], [f"{DRIVER}/claim={UID_A}-tracker"])
    assert by_request["npu-core-0"] == (["detector"], [f"{DRIVER}/claim={UID_A}-detector"])
    env = spec_env(rig, UID_A)
    assert (env[f"{UID_A}-tracker"]["RKNN_NPU_CORE_MASK"], env[f"{UID_A}-tracker"]["RKNN_NPU_CORES"]) == (
        "4",
        "2",
    )
    assert (env[f"{UID_A}-detector"]["RKNN_NPU_CORE_MASK"], env[f"{UID_A}-detector"]["RKNN_NPU_CORES"]) == (
        "3",
        "0,1",
    )


def test_a_stale_double_booking_is_refused_naming_the_holder_and_admin_access_is_not(rig: DriverRig) -> None:
    kubelet = started(rig)
    rig.api.add_claim("default", "holder", UID_A, [result("npu-core-0"), result("npu-core-1")])
    rig.api.add_claim(
        "default", "stale", UID_B, [result("npu-cores-0-1")]
    )  # the partitionable name of the same cores
    rig.api.add_claim("monitoring", "monitor", UID_C, [result(f"npu-core-{c}", admin=True) for c in range(3)])
    assert kubelet.prepare([("default", "holder", UID_A)]).claims[UID_A].error == ""
    answer = kubelet.prepare([("default", "stale", UID_B), ("monitoring", "monitor", UID_C)])
    error = answer.claims[UID_B].error
    assert "ResourceClaim default/holder" in error and UID_A in error and "core 0,1" in error
    assert answer.claims[UID_C].error == ""
    assert spec_env(rig, UID_C)[f"{UID_C}-npu"]["RKNN_NPU_ADMIN_ACCESS"] == "true"
    assert not (rig.cdi_dir / f"{DRIVER}-claim_{UID_B}.json").exists()
    # The same claim again (a second pod sharing it) is fine; once the holder is unprepared the
    # stale claim's retry prepares.
    assert kubelet.prepare([("default", "holder", UID_A)]).claims[UID_A].error == ""
    assert kubelet.unprepare([("default", "holder", UID_A)]).claims[UID_A].error == ""
    assert kubelet.prepare([("default", "stale", UID_B)]).claims[UID_B].error == ""


def _info() -> NpuInfo:
    soc = soc_by_name("rk3588")
    assert soc is not None
    nodes = (DeviceNode("/dev/dri/card1", "card"), DeviceNode("/dev/dri/renderD129", "render"))
    return NpuInfo(soc, ("rockchip,rk3588",), 3, "test", "drm", nodes)


def _claim(*devices: AllocatedDevice, uid: str = UID_A, name: str = "c") -> PreparedClaim:
    return PreparedClaim(ClaimRef("default", name, uid), devices, f"{DRIVER}/claim={uid}")


def test_a_set_one_context_refuses_is_prepared_with_its_context_groups() -> None:
    """`rockchip.com/npu: 2` can get cores {0,2}: the SDK's Pool runs one context per group."""
    claim = _claim(AllocatedDevice("npu", NODE, "npu-core-2"), AllocatedDevice("npu", NODE, "npu-core-0"))
    spec = claim_spec(DRIVER, claim, _info(), None, NodeExtras())
    env = dict(item.split("=", 1) for item in spec["devices"][0]["containerEdits"]["env"])  # type: ignore[index]
    assert env["RKNN_NPU_CORE_MASK"] == "5" and env["RKNN_NPU_CONTEXT_GROUPS"] == "0;2"
    pair = claim_spec(
        DRIVER, _claim(AllocatedDevice("npu", NODE, "npu-cores-0-1")), _info(), None, NodeExtras()
    )
    assert "RKNN_NPU_CONTEXT_GROUPS" not in str(pair)


def test_the_spec_records_the_claim_so_the_checkpoint_rebuilds_from_it() -> None:
    claim = _claim(
        AllocatedDevice("npu/pair", NODE, "npu-core-0"),
        AllocatedDevice("npu/pair", NODE, "npu-core-1"),
        AllocatedDevice("watch", NODE, "npu-core-2", admin=True),
    )
    spec = claim_spec(DRIVER, claim, _info(), None, NodeExtras())
    assert claim_from_spec(json.loads(json.dumps(spec)), DRIVER) == claim
    assert PreparedClaim.from_json(claim.to_json()) == claim


def test_booking_is_pure_and_names_every_holder() -> None:
    holder = _claim(AllocatedDevice("npu", NODE, "npu-core-0"), name="a")
    other = _claim(AllocatedDevice("npu", NODE, "npu-core-2"), uid=UID_B, name="b")
    admin = _claim(AllocatedDevice("npu", NODE, "npu-core-1", admin=True), uid=UID_C, name="m")
    prepared = {c.ref.uid: c for c in (holder, other, admin)}
    whole = _claim(AllocatedDevice("npu", NODE, "npu-cores-0-1-2"), uid="f" * 8, name="whole")
    message = conflicts(prepared, whole)
    assert (
        message is not None
        and "default/a" in message
        and "default/b" in message
        and "default/m" not in message
    )
    assert conflicts(prepared, holder) is None  # itself
    assert conflicts(prepared, _claim(AllocatedDevice("npu", NODE, "npu-core-1"), uid="e" * 8)) is None


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        ({"kind": "a.com/b", "devices": [{"name": "x", "containerEdits": {}}]}, "0.3.0"),
        (
            {"kind": "a.com/b", "devices": [{"name": "x", "containerEdits": {"mounts": [{"type": "bind"}]}}]},
            "0.4.0",
        ),
        ({"kind": "a.com/b", "devices": [{"name": "0x", "containerEdits": {}}]}, "0.5.0"),
        (
            {
                "kind": "a.com/b",
                "devices": [
                    {"name": "x", "containerEdits": {"deviceNodes": [{"path": "/d", "hostPath": "/d"}]}}
                ],
            },
            "0.5.0",
        ),
        ({"kind": "a.com/b", "annotations": {"k": "v"}, "devices": []}, "0.6.0"),
        (
            {"kind": "a.com/b", "devices": [{"name": "x", "annotations": {"k": "v"}, "containerEdits": {}}]},
            "0.6.0",
        ),
        ({"kind": "a.com/b.c", "devices": []}, "0.6.0"),
        ({"kind": "a.com/b", "containerEdits": {"additionalGids": [5]}, "devices": []}, "0.7.0"),
    ],
)
def test_the_cdi_minimum_version_rule_follows_the_cdi_library(spec: dict[str, Any], version: str) -> None:
    assert minimum_cdi_version(spec) == version


def test_neither_program_writes_annotations(tmp_path: Path) -> None:
    from rknpu_node import cdi_spec

    for spec in (
        cdi_spec(_info(), "/c"),
        claim_spec(DRIVER, _claim(AllocatedDevice("npu", NODE, "npu-core-0")), _info(), "/c", NodeExtras()),
    ):
        assert "annotations" not in json.dumps(spec)
        assert spec["cdiVersion"] in {"0.3.0", "0.5.0"}
