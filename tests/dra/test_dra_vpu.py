"""--vpu in the DRA driver: the slice's `vpu` device (fixture host rk3588-video's nodes,
tests/fakehost.py `video_blocks`), the shipped DeviceClasses played by the allocator with real CEL
(vpu.rockchip.com takes it, many claims at once; no NPU class ever does), and prepare handing in
exactly the video nodes through CDI, with no NPU node or env."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from allocator import Allocator
from drarig import DRIVER, NODE, DriverRig, dra_settings
from fakeapi import FakeApiServer
from test_dra_allocation import classes, info, sample_claims

from fakehost import RK3588_DMA_HEAPS, make_host, video_blocks
from rknpu_dra_driver.claims._cdi import claim_from_spec, claim_spec
from rknpu_dra_driver.claims._claim import AllocatedDevice, ClaimRef, PreparedClaim
from rknpu_dra_driver.slices._desired import (
    NodeFacts,
    SliceLayout,
    desired_slices,
    shared_fields_dropped,
)
from rknpu_node import NodeExtras, device_ids, discover_video

VIDEO_NODES = ["/dev/mpp_service", "/dev/rga", *(f"/dev/dma_heap/{heap}" for heap in RK3588_DMA_HEAPS)]
UID_A = "0b9a6f44-5c1e-4d0e-9c55-2f0a3c9d1e0a"
UID_B = "0b9a6f44-5c1e-4d0e-9c55-2f0a3c9d1e0b"


@pytest.fixture(scope="module")
def video_facts(tmp_path_factory: pytest.TempPathFactory) -> NodeFacts:
    blocks = discover_video(make_host("rk3588-video", tmp_path_factory.mktemp("host")))
    assert blocks is not None
    return NodeFacts(video=blocks)


def slices(
    facts: NodeFacts, layout: SliceLayout = SliceLayout.PER_CORE, minor: int | None = None
) -> list[Any]:
    health = dict.fromkeys(device_ids(3), True)
    return desired_slices(NODE, DRIVER, 1, info(), health, facts, "node-uid", layout, minor)


def devices_of(published: list[Any]) -> list[dict[str, Any]]:
    return [d for s in published for d in s["spec"].get("devices", [])]


@pytest.mark.parametrize(
    ("layout", "minor"),
    [(SliceLayout.PER_CORE, None), (SliceLayout.PARTITIONABLE, 35), (SliceLayout.SHARED, 36)],
)
def test_the_vpu_device_ends_the_device_slice_in_every_layout(
    video_facts: NodeFacts, layout: SliceLayout, minor: int | None
) -> None:
    devices = devices_of(slices(video_facts, layout, minor))
    vpu = devices[-1]
    assert vpu == {
        "name": "vpu",
        "attributes": {
            "type": {"string": "vpu"},
            "soc": {"string": "rk3588"},
            "rga": {"bool": True},
            "dmaHeaps": {"int": len(RK3588_DMA_HEAPS)},
        },
        "allowMultipleAllocations": True,
    }
    assert all("coreMask" in d["attributes"] for d in devices[:-1])
    assert "vpu" not in [d["name"] for d in devices_of(slices(NodeFacts(), layout, minor))]


def test_the_vpu_device_is_not_mistaken_for_a_shared_core(video_facts: NodeFacts) -> None:
    """An API server keeping everything: the vpu device (no capacity) does not read as dropped fields."""
    (sent,) = slices(video_facts, SliceLayout.SHARED, 36)
    assert not shared_fields_dropped(sent, sent)
    (per_core,) = slices(video_facts)
    assert not shared_fields_dropped(per_core, per_core)


def test_vpu_class_takes_the_device_for_many_claims_and_npu_classes_never_do(video_facts: NodeFacts) -> None:
    allocator = Allocator(classes(), slices(video_facts))
    (sample,) = sample_claims("npu-and-vpu.yaml")
    for _ in range(3):  # three cores: three pods, each one core and the shared video blocks
        results = allocator.allocate(sample)
        assert results is not None
        assert sorted((r.request, r.ref.name) for r in results if r.request == "vpu") == [("vpu", "vpu")]
        assert next(r.ref.name for r in results if r.request == "npu").startswith("npu-core-")
        allocator.commit(results)
    assert allocator.allocate(sample) is None  # no core left; the vpu alone never stands in for one
    only_vpu = {
        "spec": {"devices": {"requests": [{"name": "v", "exactly": {"deviceClassName": "vpu.rockchip.com"}}]}}
    }
    assert [r.ref.name for r in allocator.allocate(only_vpu) or []] == ["vpu"]  # still shareable
    for name in ("npu.rockchip.com", "core.npu.rockchip.com", "rk3588.npu.rockchip.com"):
        fresh = Allocator(classes(), slices(video_facts))
        claim = {
            "spec": {
                "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": name, "count": 4}}]}
            }
        }
        assert fresh.allocate(claim) is None, name  # three NPU devices; the vpu is never the fourth
        claim["spec"]["devices"]["requests"][0]["exactly"] = {
            "deviceClassName": name,
            "allocationMode": "All",
        }
        results = fresh.allocate(claim)
        assert results is not None and "vpu" not in [r.ref.name for r in results], name


def vpu_claim(video_facts: NodeFacts, *devices: tuple[str, str]) -> PreparedClaim:
    allocated = tuple(AllocatedDevice(request, NODE, device) for request, device in devices)
    return PreparedClaim(ClaimRef("default", "cam", UID_A), allocated, f"{DRIVER}/claim={UID_A}")


def test_prepare_spec_hands_in_only_the_video_nodes(video_facts: NodeFacts) -> None:
    claim = vpu_claim(video_facts, ("npu", "npu-core-2"), ("vpu", "vpu"))
    spec = claim_spec(DRIVER, claim, info(), None, NodeExtras(), video=video_facts.video)
    by_name = {d["name"]: d["containerEdits"] for d in spec["devices"]}  # type: ignore[attr-defined]
    vpu = by_name[f"{UID_A}-vpu"]
    assert vpu["deviceNodes"] == [{"path": p, "permissions": "rw"} for p in VIDEO_NODES]
    env = dict(item.split("=", 1) for item in vpu["env"])
    assert not [key for key in env if key in ("RKNN_NPU_CORE_MASK", "RKNN_NPU_SOC", "RKNN_NPU_DEVICE")]
    assert "mounts" not in vpu
    npu = by_name[f"{UID_A}-npu"]
    assert not {n["path"] for n in npu["deviceNodes"]} & set(VIDEO_NODES)
    npu_only = claim_spec(DRIVER, vpu_claim(video_facts, ("npu", "npu-core-2")), info(), None, NodeExtras())
    assert spec["cdiVersion"] == npu_only["cdiVersion"]  # the video nodes need no newer CDI version
    assert claim_from_spec(spec, DRIVER) == claim  # the record round-trips through the env
    with pytest.raises(ValueError, match="--vpu"):
        claim_spec(DRIVER, claim, info(), None, NodeExtras(), video=None)


@pytest.fixture
def vpu_rig(fake_api: FakeApiServer) -> Iterator[DriverRig]:
    root = Path(tempfile.mkdtemp(prefix="rkdra-", dir="/tmp"))
    settings = dra_settings(root, fake_api, vpu=True)
    video_blocks(root / "host")
    made = DriverRig(root, fake_api, settings)
    yield made
    made.end()
    shutil.rmtree(root, ignore_errors=True)


def result(device: str, request: str, share_id: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": request, "driver": DRIVER, "pool": NODE, "device": device}
    if share_id:
        entry["shareID"] = share_id
    return entry


def test_driver_publishes_vpu_and_prepares_two_claims_sharing_it(vpu_rig: DriverRig) -> None:
    kubelet = vpu_rig.start()
    published = vpu_rig.api.wait_slices(
        lambda s: any(d["name"] == "vpu" for d in devices_of(list(s.values())))
    )
    assert devices_of(list(published.values()))[-1]["attributes"]["type"] == {"string": "vpu"}
    vpu_rig.api.add_claim("default", "cam-a", UID_A, [result("vpu", "vpu", "a1b2")])
    vpu_rig.api.add_claim(
        "default", "cam-b", UID_B, [result("npu-core-2", "npu"), result("vpu", "vpu", "c3d4")]
    )
    answers = kubelet.prepare([("default", "cam-a", UID_A), ("default", "cam-b", UID_B)]).claims
    assert answers[UID_A].error == "" and answers[UID_B].error == ""
    for uid in (UID_A, UID_B):
        spec = json.loads((vpu_rig.cdi_dir / f"{DRIVER}-claim_{uid}.json").read_text())
        vpu = next(d for d in spec["devices"] if "-vpu" in d["name"])
        assert [n["path"] for n in vpu["containerEdits"]["deviceNodes"]] == VIDEO_NODES


def test_driver_without_vpu_refuses_a_vpu_claim(rig: DriverRig) -> None:
    kubelet = rig.start()
    rig.api.wait_slices(lambda s: len(s) >= 1)
    assert "vpu" not in [d["name"] for d in devices_of(list(rig.api.slices.values()))]
    rig.api.add_claim("default", "cam", UID_A, [result("vpu", "vpu")])
    answer = kubelet.prepare([("default", "cam", UID_A)]).claims[UID_A]
    assert "vpu" in answer.error and "does not offer" in answer.error
