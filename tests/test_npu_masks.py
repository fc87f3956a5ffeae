"""Pins the shared core-mask algebra and SoC table (docs/hardware.md#socs-and-cores, #core-masks)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rknnlaunch import MaskError
from rknnlaunch.npu import (
    ALL,
    cores_to_mask,
    is_runnable,
    mask_name,
    mask_to_cores,
    parse_core_list,
    parse_mask,
    rknnlite_mask,
    runnable_core_sets,
    runnable_groups,
    runtime_effective_mask,
    soc_by_name,
    soc_from_compatible,
)

RK3588 = soc_by_name("rk3588")
RK3576 = soc_by_name("rk3576")
RK3568 = soc_by_name("rk3568")
RK3566 = soc_by_name("rk3566")
RK3562 = soc_by_name("rk3562")
assert RK3588 and RK3576 and RK3568 and RK3566 and RK3562


@pytest.mark.parametrize(
    ("text", "mask"),
    [
        ("3", 3),
        (" 7 ", 7),
        ("0", 0),
        ("0x3", 3),
        ("0X7", 7),
        ("0b011", 3),
        ("0_1", 3),
        ("0,1", 3),
        ("1,2", 6),
        ("0_1_2", 7),
        ("NPU_CORE_0_1", 3),
        ("npu_core_0_1_2", 7),
        ("NPU_CORE_2", 4),
        ("NPU_CORE_AUTO", 0),
        ("NPU_CORE_ALL", ALL),
        ("RKNNLite.NPU_CORE_0", 1),
        ("AUTO", 0),
        ("all", ALL),
        ("2", 2),  # a bare number is a mask: core 1
        ("0xffff", ALL),
    ],
)
def test_parse_mask_accepts_every_documented_form(text: str, mask: int) -> None:
    assert parse_mask(text) == mask


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "abc",
        "0x",
        "0b2",
        "-1",
        "0x10000",
        "65536",
        "0,0",
        "0,,1",
        "0,1,",
        "NPU_CORE_",
        "NPU_CORE_X",
        "1.5",
        "\uff13",
        "0_16",
        "0 1",
    ],
)
def test_parse_mask_rejects_garbage_with_a_fix(text: str) -> None:
    with pytest.raises(MaskError) as err:
        parse_mask(text)
    assert "fix:" in str(err.value)


@given(st.text(max_size=30))
def test_parse_mask_never_crashes(text: str) -> None:
    try:
        mask = parse_mask(text)
    except MaskError:
        return
    assert 0 <= mask <= ALL


@given(st.frozensets(st.integers(0, 15), min_size=1))
def test_cores_mask_round_trip(cores: frozenset[int]) -> None:
    assert mask_to_cores(cores_to_mask(cores)) == cores
    if len(cores) > 1:
        assert parse_mask(",".join(map(str, sorted(cores)))) == cores_to_mask(cores)


@pytest.mark.parametrize(
    ("compatible", "name"),
    [
        (b"radxa,rock-5b\0rockchip,rk3588\0", "rk3588"),
        (b"orangepi,5\0rockchip,rk3588s\0", "rk3588"),
        (b"armsom,sige5\0rockchip,rk3576\0", "rk3576"),
        (b"radxa,rock-3a\0rockchip,rk3568\0", "rk3568"),
        (b"pine64,quartz64-a\0rockchip,rk3566\0", "rk3566"),
        (b"rockchip,rk3562-evb\0rockchip,rk3562\0", "rk3562"),
        (b"raspberrypi,5-model-b\0brcm,bcm2712\0", None),
        (b"", None),
    ],
)
def test_soc_from_compatible(compatible: bytes, name: str | None) -> None:
    soc = soc_from_compatible(compatible)
    assert (soc.name if soc else None) == name


@pytest.mark.parametrize(
    ("soc_name", "cores", "mask_limit", "settable"),
    [
        ("rk3588", 3, 0x7, True),
        ("rk3576", 2, 0x3, True),
        ("rk3568", 1, 0x1, False),
        ("rk3566", 1, 0x1, False),
        ("rk3562", 1, 0x1, False),
    ],
)
def test_soc_table(soc_name: str, cores: int, mask_limit: int, settable: bool) -> None:
    soc = soc_by_name(soc_name)
    assert soc is not None
    assert (soc.npu_cores, soc.kernel_mask_limit, soc.core_mask_settable) == (cores, mask_limit, settable)


@pytest.mark.parametrize(
    ("soc_name", "requested", "effective"),
    [
        ("rk3588", 1, 1),
        ("rk3588", 2, 2),
        ("rk3588", 4, 4),
        ("rk3588", 3, 3),
        ("rk3588", 7, 7),
        ("rk3588", ALL, 7),
        ("rk3588", 5, None),
        ("rk3588", 6, None),
        ("rk3588", 8, None),
        ("rk3576", 1, 1),
        ("rk3576", 3, 3),
        ("rk3576", 4, 1),
        ("rk3576", 7, 3),
        ("rk3576", 5, None),
        ("rk3568", 0, 0),
        ("rk3568", 1, None),
        ("rk3566", 1, None),
        ("rk3562", 0, 0),
    ],
)
def test_runtime_mask_rules(soc_name: str, requested: int, effective: int | None) -> None:
    soc = soc_by_name(soc_name)
    assert soc is not None
    assert runtime_effective_mask(soc, requested) == effective


def test_rknnlite_mask_per_soc() -> None:
    assert rknnlite_mask(RK3588, {0, 1}) == 3
    assert rknnlite_mask(RK3588, {2}) == 4
    assert rknnlite_mask(RK3588, {0, 1, 2}) == 7
    assert rknnlite_mask(RK3576, {0, 1}) == 3
    assert rknnlite_mask(RK3568, {0}) == 0  # single-core NPUs accept only AUTO
    with pytest.raises(MaskError, match=r"\{0\} \+ \{2\}"):
        rknnlite_mask(RK3588, {0, 2})
    with pytest.raises(MaskError, match="do not exist"):
        rknnlite_mask(RK3576, {2})
    with pytest.raises(MaskError, match="do not exist"):
        rknnlite_mask(RK3588, {2}, core_count=2)  # RK3582: core 2 fused off


@pytest.mark.parametrize(
    ("soc_name", "cores", "groups"),
    [
        ("rk3588", {0, 2}, [{0}, {2}]),
        ("rk3588", {1, 2}, [{1}, {2}]),
        ("rk3588", {0, 1}, [{0, 1}]),
        ("rk3588", {0, 1, 2}, [{0, 1, 2}]),
        ("rk3588", {2}, [{2}]),
        ("rk3576", {0, 1}, [{0, 1}]),
        ("rk3568", {0}, [{0}]),
    ],
)
def test_runnable_groups(soc_name: str, cores: set[int], groups: list[set[int]]) -> None:
    soc = soc_by_name(soc_name)
    assert soc is not None
    assert [set(g) for g in runnable_groups(soc, cores)] == groups


def test_runnable_core_sets() -> None:
    assert [set(s) for s in runnable_core_sets(RK3588)] == [{0}, {1}, {2}, {0, 1}, {0, 1, 2}]
    assert [set(s) for s in runnable_core_sets(RK3588, within={0, 2})] == [{0}, {2}]
    assert [set(s) for s in runnable_core_sets(RK3576)] == [{0}, {1}, {0, 1}]
    assert [set(s) for s in runnable_core_sets(RK3566)] == [{0}]
    assert not is_runnable(RK3588, {0, 2})


def test_mask_name() -> None:
    assert mask_name(3) == "NPU_CORE_0_1"
    assert mask_name(0) == "NPU_CORE_AUTO"
    assert mask_name(ALL) == "NPU_CORE_ALL"


@pytest.mark.parametrize(
    ("text", "cores"),
    [("0,1", {0, 1}), ("0_1", {0, 1}), (" 0 1 ", {0, 1}), ("2", {2}), ("1,2", {1, 2})],
)
def test_parse_core_list(text: str, cores: set[int]) -> None:
    assert parse_core_list(text) == cores


@pytest.mark.parametrize("text", ["", "0,0", "a", "0x3", "\u00b2", "16", "-1"])
def test_parse_core_list_rejects_with_a_fix(text: str) -> None:
    with pytest.raises(MaskError) as err:
        parse_core_list(text)
    assert "fix:" in str(err.value)


def test_core_lists_in_masks_name_what_the_user_wrote() -> None:
    with pytest.raises(MaskError, match="'NPU_CORE_0_0' names a core twice"):
        parse_mask("NPU_CORE_0_0")


@pytest.mark.parametrize(
    ("soc", "count", "groups", "order"),
    [
        ("rk3588", 3, [{0, 1}, {2}], (2, 0, 1)),
        ("rk3588", 2, [{0, 1}], (0, 1)),  # RK3582/3583 with core 2 fused off
        ("rk3576", 2, [{0, 1}], (0, 1)),
        ("rk3568", 1, [{0}], (0,)),
        ("rk3562", 1, [{0}], (0,)),
    ],
)
def test_context_groups_and_allocation_order_follow_the_masks(
    soc: str, count: int, groups: list[set[int]], order: tuple[int, ...]
) -> None:
    from rknnlaunch.npu import allocation_order, context_groups, soc_by_name

    spec = soc_by_name(soc)
    assert spec is not None
    found = context_groups(spec, count)
    assert [set(g) for g in found] == groups
    assert allocation_order(spec, count) == order
    for group in found:  # any cores of one group run as one context
        for size in range(1, len(group) + 1):
            for subset in itertools.combinations(sorted(group), size):
                assert is_runnable(spec, subset, count)
