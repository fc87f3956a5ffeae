"""The pure device logic: IDs, the preferred-allocation policy, request checks, Allocate contents."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rknnlaunch.npu import DeviceNode, HostRoot, NpuInfo, soc_by_name
from rknpu_node._policy import (
    AllocationError,
    NodeExtras,
    cdi_spec,
    check_preferred_request,
    check_request,
    container_plan,
    core_of,
    cores_of,
    device_health,
    device_ids,
    interchangeable_allocation,
    preferred_allocation,
)

RK3588 = soc_by_name("rk3588")
RK3576 = soc_by_name("rk3576")
RK3568 = soc_by_name("rk3568")
assert RK3588 is not None and RK3576 is not None and RK3568 is not None


def ids(*cores: int) -> list[str]:
    return [f"npu-core-{core}" for core in cores]


def test_device_ids_per_mode() -> None:
    assert device_ids(3) == ("npu-core-0", "npu-core-1", "npu-core-2")
    assert device_ids(2, "shared", 2) == ("npu-core-0-0", "npu-core-0-1", "npu-core-1-0", "npu-core-1-1")
    assert [core_of(i) for i in ("npu-core-2", "npu-core-1-7", "gpu-0", "npu-core-")] == [2, 1, None, None]


@pytest.mark.parametrize(
    ("soc", "available", "must", "size", "expected", "why"),
    [
        (RK3588, ids(0, 1, 2), [], 1, ids(2), "1 core: take core 2 so {0,1} stays runnable"),
        (RK3588, ids(0, 1, 2), [], 2, ids(0, 1), "2 cores: {0,1} is the only runnable pair"),
        (RK3588, ids(0, 1, 2), [], 3, ids(0, 1, 2), "all three run as one context (mask 7)"),
        (RK3588, ids(0, 1), [], 1, ids(0), "tie: lowest core"),
        (RK3588, ids(1, 2), [], 2, ids(1, 2), "no runnable pair left: the only choice"),
        (RK3588, ids(0, 1, 2), ids(1), 2, ids(0, 1), "must-include 1 pairs with 0"),
        (RK3588, ids(0, 1, 2), ids(2), 2, ids(0, 2), "must-include 2: two groups either way, lowest"),
        (RK3588, ids(0, 1, 2), ids(2, 1), 1, ids(2, 1), "must-include beyond the size is returned whole"),
        (RK3588, ids(0), [], 2, ids(0), "fewer available than asked: all of them"),
        (RK3588, ["gpu-0", "npu-core-9", *ids(1, 2)], [], 1, ids(2), "foreign and out-of-range IDs ignored"),
        (RK3576, ids(0, 1), [], 1, ids(0), "RK3576: symmetric, lowest"),
        (RK3576, ids(0, 1), [], 2, ids(0, 1), "RK3576: mask 3 is runnable"),
        (RK3568, ids(0), [], 1, ids(0), "single core"),
    ],
)
def test_preferred_allocation_core_mode(
    soc: object, available: list[str], must: list[str], size: int, expected: list[str], why: str
) -> None:
    assert soc is not None
    count = soc.npu_cores  # type: ignore[attr-defined]
    assert preferred_allocation(soc, count, available, must, size) == expected, why  # type: ignore[arg-type]


def test_preferred_allocation_shared_mode_spreads_over_the_least_used_core() -> None:
    available = ["npu-core-0-0", "npu-core-0-1", "npu-core-1-1", "npu-core-2-0", "npu-core-2-1"]
    assert preferred_allocation(RK3588, 3, available, [], 1, "shared") == ["npu-core-0-0"]
    available = ["npu-core-0-1", "npu-core-1-0", "npu-core-1-1", "npu-core-2-1"]
    assert preferred_allocation(RK3588, 3, available, [], 1, "shared") == ["npu-core-1-0"]
    assert preferred_allocation(RK3588, 3, available, ["npu-core-2-1"], 2, "shared") == [
        "npu-core-2-1",
        "npu-core-1-0",
    ]


@given(
    available=st.sets(st.integers(0, 2), min_size=1),
    must_size=st.integers(0, 3),
    size=st.integers(1, 3),
)
def test_preferred_allocation_is_a_valid_answer(available: set[int], must_size: int, size: int) -> None:
    offered = ids(*sorted(available))
    must = offered[: min(must_size, size)]
    chosen = preferred_allocation(RK3588, 3, offered, must, size)
    assert len(chosen) == len(set(chosen)) == min(size, len(offered))
    assert set(must) <= set(chosen) <= set(offered)


HEALTH = {i: True for i in ids(0, 1, 2)}


@pytest.mark.parametrize(
    ("request_ids", "health", "message"),
    [
        (["npu-core-5"], HEALTH, "unknown device ID 'npu-core-5'"),
        (["npu-core-0", "npu-core-0"], HEALTH, "'npu-core-0' is requested twice"),
        (["npu-core-1"], {**HEALTH, "npu-core-1": False}, "'npu-core-1' is Unhealthy"),
        ([], HEALTH, "names no device ID"),
    ],
)
def test_check_request_names_the_bad_id(
    request_ids: list[str], health: dict[str, bool], message: str
) -> None:
    with pytest.raises(AllocationError, match=message) as caught:
        check_request(request_ids, tuple(HEALTH), health)
    assert caught.value.unhealthy == ("Unhealthy" in message)


def test_check_request_accepts_healthy_known_ids() -> None:
    check_request(ids(0, 2), tuple(HEALTH), HEALTH)


def _info(soc_name: str, nodes: tuple[DeviceNode, ...], cores: int) -> NpuInfo:
    soc = soc_by_name(soc_name)
    assert soc is not None
    kind = "misc" if nodes[0].role == "misc" else "drm"
    return NpuInfo(soc, (f"rockchip,{soc_name}",), cores, "test", kind, nodes)


DRM_NODES = (DeviceNode("/dev/dri/card1", "card"), DeviceNode("/dev/dri/renderD129", "render"))
MISC_NODES = (DeviceNode("/dev/rknpu", "misc"), DeviceNode("/dev/dma_heap/system", "dma_heap"))


def test_container_plan_drm() -> None:
    plan = container_plan(
        _info("rk3588", DRM_NODES, 3), ids(0, 2), "/sys/firmware/devicetree/base/compatible"
    )
    assert plan.mask == 5 and plan.cores == {0, 2}
    assert plan.envs == {
        "RKNN_NPU_CORE_MASK": "5",
        "RKNN_NPU_CORES": "0,2",
        "RKNN_NPU_SOC": "rk3588",
        "RKNN_NPU_DEVICE": "/dev/dri/renderD129",
        "RKNN_NPU_COMPATIBLE_FILE": "/run/rknpu/compatible",
    }
    assert [(d.host_path, d.permissions) for d in plan.devices] == [
        ("/dev/dri/card1", "rw"),
        ("/dev/dri/renderD129", "rw"),
    ]
    assert [(m.container_path, m.read_only) for m in plan.mounts] == [("/run/rknpu/compatible", True)]
    assert plan.cdi_devices == ()


def test_container_plan_misc_single_core_without_compatible_file() -> None:
    plan = container_plan(_info("rk3568", MISC_NODES, 1), ["npu-core-0"], None, cdi=True)
    assert plan.envs["RKNN_NPU_CORE_MASK"] == "1" and plan.envs["RKNN_NPU_DEVICE"] == "/dev/rknpu"
    assert "RKNN_NPU_COMPATIBLE_FILE" not in plan.envs and plan.mounts == ()
    assert [d.host_path for d in plan.devices] == ["/dev/rknpu", "/dev/dma_heap/system"]
    assert plan.cdi_devices == ("rockchip.com/npu=npu",)


def test_shared_mode_ids_map_to_their_core_mask() -> None:
    plan = container_plan(_info("rk3588", DRM_NODES, 3), ["npu-core-1-0", "npu-core-1-1"], None)
    assert plan.mask == 2 and plan.envs["RKNN_NPU_CORES"] == "1"


def test_cdi_spec_lists_the_npu_nodes_and_the_compatible_mount() -> None:
    spec = cdi_spec(_info("rk3588", DRM_NODES, 3), "/sys/firmware/devicetree/base/compatible")
    # The lowest version its content needs (no hostPath, no annotations): podman 4.x reads it.
    assert spec["kind"] == "rockchip.com/npu" and spec["cdiVersion"] == "0.3.0"
    device = spec["devices"][0]  # type: ignore[index]
    assert device["name"] == "npu"
    edits = device["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/dri/card1", "/dev/dri/renderD129"]
    assert all("hostPath" not in n for n in edits["deviceNodes"])  # defaults to path
    assert edits["mounts"][0]["containerPath"] == "/run/rknpu/compatible"


def test_node_discovery_fixes_speak_to_the_operator(host_factory: Callable[[str], HostRoot]) -> None:
    from rknnlaunch import NpuNotFoundError, UnknownSocError
    from rknpu_node._discovery import discover_on_node

    host = host_factory("no-npu")
    with pytest.raises(NpuNotFoundError, match="--host-root"):
        discover_on_node(host, None, "RKNPU_PLUGIN_")
    host = host_factory("rk3588-drm")
    (host.root / "proc/device-tree").unlink()
    (host.root / "sys/firmware/devicetree/base/compatible").unlink()
    with pytest.raises(UnknownSocError, match=r"--soc \(env RKNPU_EXPORTER_SOC\)"):
        discover_on_node(host, None, "RKNPU_EXPORTER_")


@pytest.mark.parametrize(
    ("available", "why"),
    [
        (["npu-core-\u0661", "npu-core-2"], "an Arabic-Indic digit one is not core 1"),
        (["npu-core-01", "npu-core-2"], "zero padding is not our form"),
        (["npu-core-1-0", "npu-core-2"], "a replica suffix is shared mode's form"),
        (["npu-core-1\n", "npu-core-2"], "a trailing newline is not our form"),
    ],
)
def test_preferred_allocation_matches_ids_exactly_as_offered(available: list[str], why: str) -> None:
    offered = ids(0, 1, 2)
    assert preferred_allocation(RK3588, 3, available, [], 2, offered=offered) == ["npu-core-2"], why
    assert preferred_allocation(RK3588, 3, available, [], 2) == ["npu-core-2"], why
    assert core_of(available[0]) is None or available[0] == "npu-core-1-0"


def test_preferred_request_refuses_must_include_ids_it_never_offered() -> None:
    check_preferred_request(ids(1), ids(0, 1, 2))
    with pytest.raises(AllocationError, match=r"unknown device ID 'npu-core-\\u0661'"):
        check_preferred_request(["npu-core-\u0661"], ids(0, 1, 2))
    with pytest.raises(AllocationError, match="'npu-core-1-0'"):
        check_preferred_request(["npu-core-1-0"], ids(0, 1, 2))


def test_refusals_stay_short_and_escaped_whatever_the_request() -> None:
    flood = [f"npu-core-{n}\x1b[2K\r" for n in range(10_000)]
    with pytest.raises(AllocationError) as caught:
        check_request(flood, tuple(HEALTH), HEALTH)
    message = str(caught.value)
    assert len(message) < 400
    assert (
        "'npu-core-0\\x1b[2K\\x0d', 'npu-core-1\\x1b[2K\\x0d', 'npu-core-2\\x1b[2K\\x0d' and 9,997 more"
        in message
    )
    assert "(10,000 IDs)" in message and "\x1b" not in message and "\r" not in message
    with pytest.raises(AllocationError) as caught:
        check_request(["x" * 1_000_000], tuple(HEALTH), HEALTH)
    assert len(str(caught.value)) < 300 and "(1,000,000 characters)" in str(caught.value)
    with pytest.raises(AllocationError, match="'npu-core-0' is requested twice"):
        check_request(ids(0) * 5000, tuple(HEALTH), HEALTH)


# --- whole mode, extra devices, the host's librknnrt -----------------------------------------------


def test_whole_mode_is_one_device_standing_for_every_core() -> None:
    assert device_ids(3, "whole") == ("npu-cores-0-1-2",)
    assert device_ids(1, "whole") == ("npu-cores-0",)
    assert cores_of(["npu-cores-0-1-2"]) == {0, 1, 2}
    assert cores_of(["npu-cores-01", "npu-cores-", "npu-cores-0-x"]) == frozenset()  # not ours
    assert preferred_allocation(RK3588, 3, ["npu-cores-0-1-2"], [], 1, "whole") == ["npu-cores-0-1-2"]
    assert preferred_allocation(RK3588, 2, ["npu-cores-0-1-2"], [], 1, "whole") == []  # not this NPU's
    plan = container_plan(_info("rk3588", DRM_NODES, 3), ["npu-cores-0-1-2"], None)
    assert plan.mask == 7 and plan.envs["RKNN_NPU_CORES"] == "0,1,2"


def test_interchangeable_allocation_takes_must_include_then_the_first_available() -> None:
    """Whole mode's choice and the video service's (every replica the same hardware)."""
    video = [f"vpu-{i}" for i in range(4)]
    assert interchangeable_allocation(video, [], 2) == ["vpu-0", "vpu-1"]
    assert interchangeable_allocation(video, ["vpu-3"], 2) == ["vpu-3", "vpu-0"]
    assert interchangeable_allocation(video + video, ["vpu-1", "vpu-1"], 3) == ["vpu-1", "vpu-0", "vpu-2"]
    assert interchangeable_allocation(video, ["vpu-2", "vpu-3"], 1) == ["vpu-2", "vpu-3"]  # all kept
    assert interchangeable_allocation(video[:1], [], 3) == ["vpu-0"]


def test_device_health_combines_nodes_and_probe() -> None:
    assert device_health(ids(0, 1, 2), True, {1}) == {
        "npu-core-0": True,
        "npu-core-1": False,
        "npu-core-2": True,
    }
    assert device_health(ids(0, 1), False, ()) == {"npu-core-0": False, "npu-core-1": False}
    assert device_health(["npu-cores-0-1-2"], True, {2}) == {"npu-cores-0-1-2": False}
    assert device_health(["npu-core-1-0", "npu-core-2-0"], True, {1}) == {
        "npu-core-1-0": False,
        "npu-core-2-0": True,
    }


def test_container_plan_hands_in_extras_and_the_host_librknnrt() -> None:
    extras = NodeExtras(devices=("/dev/rga", "/dev/mpp_service"), librknnrt="/opt/rk/librknnrt.so")
    plan = container_plan(_info("rk3588", DRM_NODES, 3), ids(0), None, extras=extras)
    assert [d.host_path for d in plan.devices] == [
        "/dev/dri/card1",
        "/dev/dri/renderD129",
        "/dev/rga",
        "/dev/mpp_service",
    ]
    assert [(m.container_path, m.host_path, m.read_only) for m in plan.mounts] == [
        ("/usr/lib/librknnrt.so", "/opt/rk/librknnrt.so", True)
    ]
    assert plan.envs["RKNN_NPU_LIBRKNNRT_SOURCE"] == "host:/opt/rk/librknnrt.so"
    spec = cdi_spec(_info("rk3588", DRM_NODES, 3), None, extras)
    edits = spec["devices"][0]["containerEdits"]  # type: ignore[index]
    assert [n["path"] for n in edits["deviceNodes"]][-2:] == ["/dev/rga", "/dev/mpp_service"]
    assert edits["mounts"] == [
        {
            "hostPath": "/opt/rk/librknnrt.so",
            "containerPath": "/usr/lib/librknnrt.so",
            "options": ["ro", "nosuid", "nodev", "bind"],
        }
    ]
    assert "RKNN_NPU_LIBRKNNRT_SOURCE=host:/opt/rk/librknnrt.so" in edits["env"]


def test_shared_mode_spreads_a_multi_replica_request_over_distinct_cores() -> None:
    every = list(device_ids(3, "shared", 2))
    # The kubelet emulator's case: 2 units got both replicas of core 0 (mask 1); now two cores.
    assert preferred_allocation(RK3588, 3, every, [], 2, "shared") == ["npu-core-0-0", "npu-core-1-0"]
    assert cores_of(preferred_allocation(RK3588, 3, every, [], 3, "shared")) == {0, 1, 2}
    # More units than cores: one per core first, then second replicas, round by round.
    assert preferred_allocation(RK3588, 3, every, [], 4, "shared") == [
        "npu-core-0-0",
        "npu-core-1-0",
        "npu-core-2-0",
        "npu-core-0-1",
    ]
    # A must-include core is not doubled while another core is free.
    assert preferred_allocation(RK3588, 3, every, ["npu-core-0-1"], 2, "shared") == [
        "npu-core-0-1",
        "npu-core-1-0",
    ]
    # Fewer cores free than units: the only core there gives both.
    assert preferred_allocation(RK3588, 3, ["npu-core-2-0", "npu-core-2-1"], [], 2, "shared") == [
        "npu-core-2-0",
        "npu-core-2-1",
    ]


def test_shared_mode_can_refuse_requests_above_one_replica() -> None:
    from rknpu_node._policy import AllocationError, check_shared_request

    check_shared_request(["npu-core-0-0"], 1)
    check_shared_request(["npu-core-0-0", "npu-core-1-0"], None)
    with pytest.raises(AllocationError, match=r"2 shared replicas.*--fail-requests-greater-than-one"):
        check_shared_request(["npu-core-0-0", "npu-core-1-0"], 1)
