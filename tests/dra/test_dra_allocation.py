"""The scheduler's side of DRA played against the shipped DeviceClasses and sample claims
(tests/dra/allocator.py): every allocation a one-context claim can get is a mask one RKNN context
accepts, in both slice layouts, on every SoC the mask model knows."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from allocator import AllocationError, Allocator, Result

from rknnlaunch.npu import DeviceNode, NpuInfo, cores_to_mask, is_runnable, soc_by_name
from rknpu_dra_driver.slices._desired import NodeFacts, SliceLayout, desired_slices, fields_dropped
from rknpu_node import cores_of, device_ids

REPO = Path(__file__).resolve().parents[2]
DRA = REPO / "deploy" / "dra"
DRIVER = "npu.rockchip.com"
NODE = "rock-5b"
NODES = (DeviceNode("/dev/dri/card1", "card"), DeviceNode("/dev/dri/renderD129", "render"))
VALID_RK3588 = {1, 2, 4, 3, 7}
# (layout, server minor): per-core; partitionable with counters in the device slice (1.34) and
# in a counters slice of the pool (1.35+).
LAYOUTS = [(SliceLayout.PER_CORE, None), (SliceLayout.PARTITIONABLE, 34), (SliceLayout.PARTITIONABLE, 35)]
LAYOUT_IDS = ["per-core", "partitionable-1.34", "partitionable-1.35"]
ONE_CONTEXT_SAMPLES = (
    "shared-core.yaml",
    "two-rk3588-cores.yaml",
    "two-cores-else-one.yaml",
    "whole-npu.yaml",
)


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def classes() -> list[dict[str, Any]]:
    return docs(DRA / "deviceclasses.yaml")


def sample_claims(name: str) -> list[dict[str, Any]]:
    """The claims a sample makes: its ResourceClaims, and one claim per ResourceClaimTemplate."""
    out = []
    for doc in docs(DRA / "samples" / name):
        if doc["kind"] == "ResourceClaim":
            out.append(doc)
        elif doc["kind"] == "ResourceClaimTemplate":
            out.append({"metadata": doc["metadata"], "spec": doc["spec"]["spec"]})
    assert out, name
    return out


def info(soc: str = "rk3588", cores: int | None = None) -> NpuInfo:
    spec = soc_by_name(soc)
    assert spec is not None
    count = spec.npu_cores if cores is None else cores
    return NpuInfo(spec, (f"rockchip,{soc}",), count, "test", "drm", NODES, driver_version="0.9.8")


def slices(
    npu: NpuInfo, layout: SliceLayout, minor: int | None, healthy: set[int] | None = None
) -> list[dict[str, Any]]:
    health = {d: (healthy is None or int(d.rsplit("-", 1)[1]) in healthy) for d in device_ids(npu.core_count)}
    return desired_slices(NODE, DRIVER, 1, npu, health, NodeFacts(), "node-uid", layout, minor)  # type: ignore[return-value]


def mask(results: list[Result]) -> int:
    return cores_to_mask(cores_of(r.ref.name for r in results))


def held_states(allocator: Allocator) -> list[tuple[str, ...]]:
    """Every set of devices another claim could hold (any subset whose counters fit)."""
    names = [c.ref.name for p in allocator.pools for c in p.devices()]
    states = []
    for size in range(len(names) + 1):
        for combo in itertools.combinations(names, size):
            cores = [cores_of([n]) for n in combo]
            if all(a.isdisjoint(b) for a, b in itertools.combinations(cores, 2)):
                states.append(combo)
    return states


def hold(allocator: Allocator, names: tuple[str, ...]) -> None:
    allocator.allocated = []
    pool = allocator.pools[0]
    refs = {c.ref.name: c.ref for c in pool.devices()}
    allocator.commit([Result("held", refs[n]) for n in names])


FIGURES: dict[str, int] = {}


@pytest.mark.parametrize(("layout", "minor"), LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("sample", ONE_CONTEXT_SAMPLES)
def test_every_legal_allocation_of_a_one_context_claim_is_a_valid_rk3588_mask(
    sample: str, layout: SliceLayout, minor: int | None
) -> None:
    allocator = Allocator(classes(), slices(info(), layout, minor))
    checked = 0
    masks: set[int] = set()
    for claim in sample_claims(sample):
        for held in held_states(allocator):
            hold(allocator, held)
            for results in allocator.every_allocation(claim):
                masks.add(mask(results))
                assert mask(results) in VALID_RK3588, (sample, held, results)
                checked += 1
    assert checked > 0
    FIGURES[f"{sample} {layout.value}-{minor}"] = checked
    print(f"{sample} [{layout.value}, {minor}]: {checked} legal allocations, masks {sorted(masks)}")


def test_without_the_constraint_a_two_core_claim_could_get_a_refused_mask() -> None:
    """The control: the old sample (count 2, no matchAttribute) reaches masks 5 and 6."""
    claim = {
        "spec": {
            "devices": {
                "requests": [
                    {"name": "npu", "exactly": {"deviceClassName": "core.npu.rockchip.com", "count": 2}}
                ]
            }
        }
    }
    allocator = Allocator(classes(), slices(info(), SliceLayout.PER_CORE, None))
    assert {mask(r) for r in allocator.every_allocation(claim)} == {3, 5, 6}


@pytest.mark.parametrize(("layout", "minor"), LAYOUTS, ids=LAYOUT_IDS)
def test_after_the_shared_core_the_two_core_sample_still_gets_cores_0_and_1(
    layout: SliceLayout, minor: int | None
) -> None:
    allocator = Allocator(classes(), slices(info(), layout, minor))
    (shared,) = sample_claims("shared-core.yaml")
    first = allocator.allocate(shared)
    assert first is not None and mask(first) == 4  # core 2: the lone core goes first
    allocator.commit(first)
    (pair,) = sample_claims("two-rk3588-cores.yaml")
    second = allocator.allocate(pair)
    assert second is not None and mask(second) == 3
    allocator.commit(second)
    # A third single-core claim now waits: no core is left, and nothing is double-booked.
    assert allocator.allocate(shared) is None


@pytest.mark.parametrize(("layout", "minor"), LAYOUTS, ids=LAYOUT_IDS)
def test_first_available_takes_a_pair_else_one_core_and_names_the_subrequest(
    layout: SliceLayout, minor: int | None
) -> None:
    allocator = Allocator(classes(), slices(info(), layout, minor))
    (claim,) = sample_claims("two-cores-else-one.yaml")
    pair = allocator.allocate(claim)
    assert pair is not None and mask(pair) == 3 and {r.request for r in pair} == {"npu/pair"}
    hold(allocator, ("npu-core-0",))
    single = allocator.allocate(claim)
    assert single is not None and {r.request for r in single} == {"npu/single"}
    assert mask(single) == 4  # core 2 first; {1,2} is never offered as a pair


@pytest.mark.parametrize(("soc", "valid"), [("rk3576", {1, 2, 3}), ("rk3568", {1}), ("rk3562", {1})])
@pytest.mark.parametrize(("layout", "minor"), LAYOUTS, ids=LAYOUT_IDS)
def test_other_socs_follow_from_the_same_mask_model(
    soc: str, valid: set[int], layout: SliceLayout, minor: int | None
) -> None:
    npu = info(soc)
    allocator = Allocator(classes(), slices(npu, layout, minor))
    for sample in ("shared-core.yaml", "two-cores-else-one.yaml", "whole-npu.yaml"):
        for claim in sample_claims(sample):
            for held in held_states(allocator):
                hold(allocator, held)
                for results in allocator.every_allocation(claim):
                    cores = cores_of(r.ref.name for r in results)
                    assert mask(results) in valid and is_runnable(npu.soc, cores, npu.core_count)


def test_the_two_core_sample_stays_pending_rather_than_take_cores_1_and_2() -> None:
    allocator = Allocator(classes(), slices(info(), SliceLayout.PER_CORE, None))
    hold(allocator, ("npu-core-0",))
    (pair,) = sample_claims("two-rk3588-cores.yaml")
    assert allocator.allocate(pair) is None


def test_a_degraded_npu_keeps_the_valid_set_rule() -> None:
    """Core 1 unhealthy: the pair sample waits; the whole-NPU sample gets {0,2}, which prepare
    hands in split per context (RKNN_NPU_CONTEXT_GROUPS, test_dra_prepare_shapes)."""
    allocator = Allocator(classes(), slices(info(), SliceLayout.PER_CORE, None, healthy={0, 2}))
    (pair,) = sample_claims("two-rk3588-cores.yaml")
    assert allocator.every_allocation(pair) == []
    (whole,) = sample_claims("whole-npu.yaml")
    (only,) = allocator.every_allocation(whole)
    assert mask(only) == 5


def test_extended_resource_requests_take_single_cores_under_the_class() -> None:
    """`rockchip.com/npu: 2` becomes a claim of the class naming that extended resource."""
    (extended,) = [c for c in classes() if c["spec"].get("extendedResourceName") == "rockchip.com/npu"]
    claim = {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "container-0-request-0",
                        "exactly": {"deviceClassName": extended["metadata"]["name"], "count": 2},
                    }
                ]
            }
        }
    }
    for layout, minor in LAYOUTS:
        allocator = Allocator(classes(), slices(info(), layout, minor))
        for results in allocator.every_allocation(claim):
            assert all(len(cores_of([r.ref.name])) == 1 for r in results)  # N cores, never a core set


def test_a_selector_reading_a_missing_attribute_is_an_allocation_error_as_upstream() -> None:
    claim = {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "npu",
                        "exactly": {
                            "deviceClassName": "npu.rockchip.com",
                            "selectors": [
                                {"cel": {"expression": "device.attributes['npu.rockchip.com'].nope == 1"}}
                            ],
                        },
                    }
                ]
            }
        }
    }
    allocator = Allocator(classes(), slices(info(), SliceLayout.PER_CORE, None))
    with pytest.raises(AllocationError, match="CEL runtime error"):
        allocator.allocate(claim)


def test_quantity_and_semver_functions_follow_the_dra_environment() -> None:
    from allocator import CelEngine

    cel = CelEngine()
    device = {"attributes": {"v": {"version": "1.2.3"}}, "capacity": {"mem": {"value": "1Gi"}}}
    assert cel.matches("device.attributes['d'].v.isGreaterThan(semver('1.2.0'))", "d", device)
    assert cel.matches("device.capacity['d'].mem.compareTo(quantity('1024Mi')) == 0", "d", device)
    assert cel.matches("device.attributes['other.example'].size() == 0", "d", device)


# --- the layouts through the kubernetes client's v1 models ------------------------------------


def _round_trip(body: Mapping[str, Any], model: str) -> dict[str, Any]:
    from kubernetes import client

    kept: dict[str, Any] = client.ApiClient().sanitize_for_serialization(
        getattr(client, model).from_dict(body)
    )
    return kept


@pytest.mark.parametrize(("layout", "minor"), LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("soc", ["rk3588", "rk3576", "rk3568"])
def test_both_layouts_round_trip_through_the_v1_models_with_no_field_lost(
    layout: SliceLayout, minor: int | None, soc: str
) -> None:
    bodies = slices(info(soc), layout, minor)
    assert [b["spec"]["pool"]["resourceSliceCount"] for b in bodies] == [len(bodies)] * len(bodies)
    import kubernetes_validate

    for body in bodies:
        kept = _round_trip(body, "V1ResourceSlice")
        assert kept == body
        assert not fields_dropped(body, kept)
        for version in ("1.34", kubernetes_validate.latest_version()):
            kubernetes_validate.validate(body, version, strict=True)  # the API's schema, unknown fields fail


def test_the_shipped_classes_and_claims_round_trip_through_the_v1_models() -> None:
    for doc in classes():
        assert _round_trip(doc, "V1DeviceClass") == doc
    for sample in (DRA / "samples").glob("*.yaml"):
        for doc in docs(sample):
            model = {
                "ResourceClaim": "ResourceV1ResourceClaim",
                "ResourceClaimTemplate": "V1ResourceClaimTemplate",
            }
            if doc["kind"] in model:
                assert _round_trip(doc, model[doc["kind"]]) == doc, sample.name


def _drop(body: dict[str, Any]) -> dict[str, Any]:
    """What an API server without DRAPartitionableDevices stores."""
    spec = {k: v for k, v in body["spec"].items() if k != "sharedCounters"}
    spec["devices"] = [
        {k: v for k, v in d.items() if k != "consumesCounters"} for d in spec.get("devices", [])
    ]
    return {**body, "spec": spec}


@pytest.mark.parametrize("minor", [34, 35])
def test_dropped_fields_are_detected_and_why_the_fallback_is_needed(minor: int) -> None:
    bodies = slices(info(), SliceLayout.PARTITIONABLE, minor)
    dropped = [_drop(b) for b in bodies]
    assert any(fields_dropped(sent, kept) for sent, kept in zip(bodies, dropped, strict=True))
    # Dropping one device's counters alone is seen too.
    device_slice = bodies[-1]
    partial = dict(device_slice, spec=dict(device_slice["spec"]))
    partial["spec"]["devices"] = [dict(d) for d in device_slice["spec"]["devices"]]
    partial["spec"]["devices"][-1].pop("consumesCounters")
    assert fields_dropped(device_slice, partial)
    # Kept as stored, the overlapping devices would double-book: npu-cores-0-1 and npu-core-0 both go.
    allocator = Allocator(classes(), dropped)
    one = {
        "spec": {
            "devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": "npu.rockchip.com"}}]}
        }
    }
    names = {
        r.ref.name
        for state in [("npu-cores-0-1",)]
        for _ in [hold(allocator, state)]
        for rs in allocator.every_allocation(one)
        for r in rs
    }
    assert "npu-core-0" in names
    # The per-core fallback has nothing to drop.
    for body in slices(info(), SliceLayout.PER_CORE, None):
        assert not fields_dropped(body, _drop(body))


@pytest.mark.parametrize(("layout", "minor"), LAYOUTS, ids=LAYOUT_IDS)
def test_the_admin_monitor_sample_gets_every_core_while_others_hold_them(
    layout: SliceLayout, minor: int | None
) -> None:
    allocator = Allocator(classes(), slices(info(), layout, minor))
    (shared,) = sample_claims("shared-core.yaml")
    (pair,) = sample_claims("two-rk3588-cores.yaml")
    for claim in (shared, pair):
        results = allocator.allocate(claim)
        assert results is not None
        allocator.commit(results)
    (monitor,) = sample_claims("npu-monitor.yaml")
    watched = allocator.allocate(monitor)
    if layout is SliceLayout.PARTITIONABLE:
        # Upstream checks counters for adminAccess requests too (allocator_stable.go's
        # allocateDevice): with the cores' counters consumed, the monitor waits. docs/dra.md says so.
        assert watched is None
        return
    assert watched is not None and mask(watched) == 7 and all(r.admin for r in watched)
    allocator.commit(watched)
    assert allocator.allocate(shared) is None  # admin results hold nothing, but the cores are held
