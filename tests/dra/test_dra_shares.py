"""Shared cores by consumable capacity (KEP-5075; issue 33 item 4): the "shared" slice layout, the
scheduler rig's consumable-capacity rules on a 1.36 API model (two independent claims share core
2, a third is refused when its shares are spent; too many shares, or zero, shown with why), the
driver's booking of shares at prepare (never over the capacity, kept across a restart), and the
fallback on an API server without the feature."""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from allocator import AllocationError, Allocator, Result
from drarig import DRIVER, NODE, DriverRig, dra_settings
from fakeapi import FakeApiServer
from test_dra_allocation import classes, docs, info, sample_claims
from test_dra_allocation_prepare import UID_A, UID_B, UID_C, spec_env

from rknpu_dra_driver.slices._desired import (
    NodeFacts,
    SliceLayout,
    desired_slices,
    shared_fields_dropped,
)
from rknpu_node import device_ids

UID_D = "0b9a6f44-5c1e-4d0e-9c55-2f0a3c9d1e04"
SHARED_CLASS = "shared.npu.rockchip.com"


def shared_slices(soc: str = "rk3588", max_shares: int = 4) -> list[dict[str, Any]]:
    npu = info(soc)
    health = dict.fromkeys(device_ids(npu.core_count), True)
    bodies = desired_slices(
        NODE, DRIVER, 1, npu, health, NodeFacts(), "node-uid", SliceLayout.SHARED, 36, max_shares
    )
    return bodies  # type: ignore[return-value]


def share_claim(name: str, shares: str | None = None, core: int | None = None) -> dict[str, Any]:
    """A claim of one share of a core (``shares``: capacity.requests; ``core``: a selector pinning it)."""
    exactly: dict[str, Any] = {"deviceClassName": SHARED_CLASS}
    if shares is not None:
        exactly["capacity"] = {"requests": {"shares": shares}}
    if core is not None:
        exactly["selectors"] = [{"cel": {"expression": f"device.attributes['{DRIVER}'].core == {core}"}}]
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "npu", "exactly": exactly}]}},
    }


def allocated(allocator: Allocator, claim: dict[str, Any]) -> list[Result]:
    results = allocator.allocate(claim)
    assert results is not None, allocator.refusals
    allocator.commit(results)
    return results


# --- the slice ----------------------------------------------------------------------------------


def test_the_shared_layout_offers_each_core_with_shares_and_validates_against_the_schemas() -> None:
    (body,) = shared_slices(max_shares=4)
    devices = body["spec"]["devices"]
    assert [d["name"] for d in devices] == ["npu-core-2", "npu-core-0", "npu-core-1"]
    for device in devices:
        assert device["allowMultipleAllocations"] is True
        assert device["capacity"] == {
            "shares": {
                "value": "4",
                "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}},
            }
        }
    import kubernetes_validate

    versions = ("1.34", "1.36", kubernetes_validate.latest_version())
    for version in versions:  # the fields are in v1 since 1.34 (alpha), on by default from 1.36
        kubernetes_validate.validate(body, version, strict=True)
    print(f"\nFIGURE shared slice valid against Kubernetes {', '.join(versions)} schemas")
    # What a server without DRAConsumableCapacity stores: detected, so the driver falls back.
    dropped = copy.deepcopy(body)
    for device in dropped["spec"]["devices"]:
        del device["allowMultipleAllocations"]
    assert shared_fields_dropped(body, dropped) and not shared_fields_dropped(body, body)


# --- the scheduler rig on a 1.36 API model ---------------------------------------------------------


def test_two_independent_claims_share_core_2_and_a_third_is_refused_when_the_shares_are_spent() -> None:
    allocator = Allocator(classes(), shared_slices(max_shares=2))
    first = allocated(allocator, share_claim("light-c", core=2))
    second = allocated(allocator, share_claim("light-d", core=2))
    assert [r.ref.name for r in first + second] == ["npu-core-2", "npu-core-2"]
    assert first[0].share_id != second[0].share_id  # each allocation its own share
    assert first[0].to_json()["consumedCapacity"] == {"shares": "1"}  # the policy's default
    assert allocator.allocate(share_claim("light-e", core=2)) is None
    assert allocator.refusals == ["device npu-core-2: 2 of its 2 shares are allocated, request npu needs 1"]
    print(
        "\nFIGURE two independent claims on npu-core-2 (shareIDs "
        f"{first[0].share_id}, {second[0].share_id}); third refused: {allocator.refusals[0]}"
    )


def test_the_sample_shares_one_core_and_first_fit_moves_on_when_it_is_full() -> None:
    share, alone = sample_claims("shared-core-capacity.yaml")
    allocator = Allocator(classes(), shared_slices())
    taken = [allocated(allocator, share)[0].ref.name for _ in range(5)]
    assert taken == ["npu-core-2"] * 4 + ["npu-core-0"]  # four shares of core 2, then core 0
    # "All of a core's shares": core 1 alone; then no core has 4 shares left.
    assert [r.ref.name for r in allocated(allocator, alone)] == ["npu-core-1"]
    assert allocator.allocate(alone) is None
    assert "device npu-core-0: 1 of its 4 shares are allocated, request npu needs 4" in allocator.refusals


def test_more_shares_than_a_core_has_is_unsatisfiable_and_the_rig_says_why() -> None:
    allocator = Allocator(classes(), shared_slices(max_shares=4))
    assert allocator.allocate(share_claim("greedy", shares="5")) is None
    assert allocator.refusals == [
        f"device npu-core-{core}: request npu for 5 shares violates its requestPolicy "
        "(default 1; validRange min 1, max 4, step 1)"
        for core in (2, 0, 1)
    ]


def test_zero_shares_is_rounded_up_to_one_as_upstream_and_a_negative_request_is_an_error() -> None:
    """Upstream's roundUpRange takes a request below validRange.min up to min: zero shares consume
    one (never a free ride on a full core); a negative amount aborts the allocation."""
    allocator = Allocator(classes(), shared_slices(max_shares=1 + 1))
    (zero,) = allocated(allocator, share_claim("zero", shares="0", core=2))
    assert zero.to_json()["consumedCapacity"] == {"shares": "1"}
    allocated(allocator, share_claim("one", core=2))
    assert allocator.allocate(share_claim("zero-again", shares="0", core=2)) is None
    assert allocator.refusals == ["device npu-core-2: 2 of its 2 shares are allocated, request npu needs 1"]
    with pytest.raises(AllocationError, match="negative"):
        allocator.allocate(share_claim("negative", shares="-1"))


def test_without_the_feature_a_device_is_one_claims_and_the_shared_class_matches_nothing() -> None:
    """A server without DRAConsumableCapacity: the driver publishes plain per-core devices (no
    capacity), so the shared class matches none and one ResourceClaim named by every pod is the
    way (the shared-core sample)."""
    npu = info("rk3588")
    health = dict.fromkeys(device_ids(3), True)
    per_core = desired_slices(NODE, DRIVER, 1, npu, health, NodeFacts(), "uid", SliceLayout.PER_CORE, 36)
    allocator = Allocator(classes(), per_core)  # type: ignore[arg-type]
    assert allocator.allocate(share_claim("light-c")) is None
    (shared,) = sample_claims("shared-core.yaml")
    assert [r.ref.name for r in allocated(allocator, shared)] == ["npu-core-2"]
    # And the gate off in the rig: allowMultipleAllocations is ignored, a device is one claim's.
    gate_off = Allocator(classes(), shared_slices(), consumable_capacity=False)
    allocated(gate_off, share_claim("a", core=2))
    assert gate_off.allocate(share_claim("b", core=2)) is None


def test_the_shared_class_and_sample_are_shipped() -> None:
    names = [d["metadata"]["name"] for d in classes()]
    assert SHARED_CLASS in names
    kinds = [
        d["kind"]
        for d in docs(Path(__file__).resolve().parents[2] / "deploy/dra/samples/shared-core-capacity.yaml")
    ]
    assert kinds.count("Pod") == 2 and kinds.count("ResourceClaimTemplate") == 2


# --- the driver: the slice it publishes, and prepare's booking -------------------------------------


def _rig(api: FakeApiServer, root: Path) -> DriverRig:
    return DriverRig(root, api, dra_settings(root, api, slice_layout="shared", max_shares=2))


@pytest.fixture
def shared_rig(request: pytest.FixtureRequest) -> Iterator[DriverRig]:
    drop = getattr(request, "param", ())
    api = FakeApiServer(drop_fields=drop, minor=36).start()
    api.add_node(NODE)
    root = Path(tempfile.mkdtemp(prefix="rkdra-", dir="/tmp"))
    rig = _rig(api, root)
    yield rig
    rig.end()
    api.stop()
    shutil.rmtree(root, ignore_errors=True)


def _devices(slices: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices.values() for d in s["spec"].get("devices") or ()]


def test_a_136_server_keeping_the_fields_gets_the_shared_cores(shared_rig: DriverRig) -> None:
    shared_rig.start()
    slices = shared_rig.api.wait_slices(lambda s: len(_devices(s)) == 3)
    assert all(d.get("allowMultipleAllocations") for d in _devices(slices))
    assert _devices(slices)[0]["capacity"]["shares"]["value"] == "2"
    assert shared_rig.api.dry_runs >= 1  # found by the dry-run read-back


@pytest.mark.parametrize("shared_rig", [("allowMultipleAllocations",)], indirect=True, ids=["gate-off"])
def test_a_server_dropping_the_fields_gets_plain_per_core_devices(shared_rig: DriverRig) -> None:
    shared_rig.start()
    slices = shared_rig.api.wait_slices(
        lambda s: len(_devices(s)) == 3 and not any("capacity" in d for d in _devices(s))
    )
    assert [d["name"] for d in _devices(slices)] == ["npu-core-2", "npu-core-0", "npu-core-1"]
    with shared_rig.api.lock:
        history = [obj for kind, obj in shared_rig.api.events if kind != "DELETED"]
    # Nothing was stored with capacity the scheduler would ignore: the dry run found the drop.
    assert all("capacity" not in d for stored in history for d in stored["spec"].get("devices") or ())


def share(device: str, share_id: str, shares: int = 1, request: str = "npu") -> dict[str, Any]:
    return {
        "request": request,
        "driver": DRIVER,
        "pool": NODE,
        "device": device,
        "shareID": share_id,
        "consumedCapacity": {"shares": str(shares)},
    }


def test_prepare_names_the_share_and_books_shares_never_over_the_capacity(shared_rig: DriverRig) -> None:
    kubelet = shared_rig.start()
    shared_rig.api.wait_slices(lambda s: len(_devices(s)) == 3)
    api = shared_rig.api
    api.add_claim("default", "light-c", UID_A, [share("npu-core-2", "5f3a09c1")])
    api.add_claim("default", "light-d", UID_B, [share("npu-core-2", "a01b2c3d")])
    api.add_claim("default", "light-e", UID_C, [share("npu-core-2", "0badcafe")])
    api.add_claim(
        "default",
        "alone",
        UID_D,
        [{"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-core-2"}],
    )

    answer = kubelet.prepare([("default", "light-c", UID_A), ("default", "light-d", UID_B)])
    assert answer.claims[UID_A].error == "" and answer.claims[UID_B].error == ""
    (device,) = answer.claims[UID_A].devices
    assert list(device.cdi_device_ids) == [f"{DRIVER}/claim={UID_A}-npu-share-5f3a09c1"]
    env = spec_env(shared_rig, UID_A)[f"{UID_A}-npu-share-5f3a09c1"]
    assert env["RKNN_NPU_CORE_MASK"] == "4"
    assert env["RKNN_NPU_CLAIM_DEVICES"] == f"npu={NODE}/npu-core-2@5f3a09c1*1"

    third = kubelet.prepare([("default", "light-e", UID_C)]).claims[UID_C].error
    assert "core 2 has 2 of its 2 shares booked by ResourceClaim default/light-c" in third
    assert "ResourceClaim default/light-d" in third
    whole = kubelet.prepare([("default", "alone", UID_D)]).claims[UID_D].error
    assert "core 2 (device npu-core-2) is held by ResourceClaim default/light-c" in whole
    print(f"\nFIGURE prepare refused the third share of core 2 (capacity 2): {third[:120]}...")

    # The checkpoint keeps the booking across a restart.
    shared_rig.end()
    kubelet = shared_rig.start()
    assert "2 of its 2 shares" in kubelet.prepare([("default", "light-e", UID_C)]).claims[UID_C].error
    assert kubelet.unprepare([("default", "light-c", UID_A)]).claims[UID_A].error == ""
    assert kubelet.prepare([("default", "light-e", UID_C)]).claims[UID_C].error == ""


def test_the_checkpoint_and_the_spec_keep_shares_and_the_pod_claim_name() -> None:
    from test_dra_allocation_prepare import _info

    from rknpu_dra_driver.claims._booking import conflicts
    from rknpu_dra_driver.claims._cdi import claim_from_spec, claim_spec
    from rknpu_dra_driver.claims._claim import AllocatedDevice, ClaimRef, PreparedClaim
    from rknpu_node import NodeExtras

    claim = PreparedClaim(
        ClaimRef("default", "light-c-npu-x7k2p", UID_A),
        (AllocatedDevice("npu", NODE, "npu-core-2", share_id="5f3a09c1", shares=3),),
        f"{DRIVER}/claim={UID_A}",
        pod_claim_name="npu",
    )
    assert PreparedClaim.from_json(claim.to_json()) == claim
    spec = claim_spec(
        DRIVER, claim, _info(), None, NodeExtras(), plugin_dir=Path("/var/lib/kubelet/plugins/x")
    )
    assert claim_from_spec(spec, DRIVER) == claim
    assert claim.shares == {2: 3} and claim.exclusive_cores == frozenset()
    one_more = PreparedClaim(
        ClaimRef("default", "b", UID_B),
        (AllocatedDevice("npu", NODE, "npu-core-2", share_id="a01b2c3d", shares=1),),
        f"{DRIVER}/claim={UID_B}",
    )
    assert conflicts({UID_A: claim}, one_more, max_shares=4) is None
    assert "core 2 has 3 of its 3 shares booked" in (conflicts({UID_A: claim}, one_more, max_shares=3) or "")
