"""The table of Rockchip SoCs with an NPU, and lookup from device-tree `compatible` strings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SocSpec:
    """What we know about one SoC's NPU (see docs/hardware.md#socs-and-cores)."""

    name: str
    """Canonical lower-case name, as rknn-toolkit-lite2 and `RKNN_NPU_SOC` spell it: ``rk3588``."""
    compatibles: tuple[str, ...]
    """Device-tree `compatible` strings that identify this SoC."""
    npu_cores: int
    """Cores on the full part (a fused-down RK3582/3583 reports fewer through the driver)."""
    kernel_mask_limit: int
    """Highest core mask the kernel driver accepts."""
    core_mask_settable: bool
    """False where RKNNLite rejects any non-zero core mask (single-core NPUs)."""
    devfreq_node: str | None
    """Folder name under /sys/class/devfreq, or None where it must be found by glob."""
    npu_family: str
    """Rockchip's NPU generation; models built for one SoC run on others of the same family."""
    runtime_masks: tuple[tuple[int, int], ...]
    """(requested mask, mask RKNNLite really runs with) for every mask `init_runtime` accepts;
    any other mask makes it return -1."""

    @property
    def all_cores(self) -> frozenset[int]:
        return frozenset(range(self.npu_cores))


# rknn-toolkit-lite2's mask handling (docs/hardware.md#core-masks):
# RK3588 passes 1,2,4,3,7 and maps ALL (0xffff) to 7; 5 and 6 fail. RK3576 passes 1,2,3 and
# remaps 4->1 and 7->3 with a warning. Single-core NPUs accept only AUTO (0).
_RK3588_MASKS = ((0, 0), (1, 1), (2, 2), (4, 4), (3, 3), (7, 7), (0xFFFF, 7))
_RK3576_MASKS = ((0, 0), (1, 1), (2, 2), (3, 3), (4, 1), (7, 3))
_SINGLE_CORE_MASKS = ((0, 0),)

SOCS: tuple[SocSpec, ...] = (
    SocSpec(
        "rk3588",
        ("rockchip,rk3588", "rockchip,rk3588s"),
        3,
        0x7,
        True,
        "fdab0000.npu",
        "RKNPU2-V2",
        _RK3588_MASKS,
    ),
    SocSpec("rk3576", ("rockchip,rk3576",), 2, 0x3, True, "27700000.npu", "RKNPU2-F2", _RK3576_MASKS),
    SocSpec("rk3568", ("rockchip,rk3568",), 1, 0x1, False, "fde40000.npu", "RKNPU2-LITE", _SINGLE_CORE_MASKS),
    SocSpec("rk3566", ("rockchip,rk3566",), 1, 0x1, False, "fde40000.npu", "RKNPU2-LITE", _SINGLE_CORE_MASKS),
    SocSpec("rk3562", ("rockchip,rk3562",), 1, 0x1, False, None, "RKNPU2-LITE-3562", _SINGLE_CORE_MASKS),
)

_BY_COMPATIBLE = {compat: soc for soc in SOCS for compat in soc.compatibles}
_BY_NAME = {soc.name: soc for soc in SOCS} | {"rk3588s": SOCS[0]}


def soc_by_name(name: str) -> SocSpec | None:
    """The SoC called ``name`` (case-insensitive, ``rk3588s`` is ``rk3588``), or None."""
    return _BY_NAME.get(name.strip().lower())


def soc_from_compatible(compatible: bytes | str) -> SocSpec | None:
    """The SoC named by a device-tree `compatible` value (NUL-separated, most specific first)."""
    text = compatible.decode("ascii", "replace") if isinstance(compatible, bytes) else compatible
    for entry in split_compatible(text):
        soc = _BY_COMPATIBLE.get(entry.lower())
        if soc is not None:
            return soc
    return None


def split_compatible(text: str) -> tuple[str, ...]:
    """``"radxa,rock-5b\\0rockchip,rk3588\\0"`` -> ``("radxa,rock-5b", "rockchip,rk3588")``."""
    return tuple(part.strip() for part in text.split("\0") if part.strip())


def models_compatible(model_platform: str, soc: SocSpec) -> bool:
    """Whether a model built for ``model_platform`` (e.g. ``rk3566``) runs on ``soc``."""
    built_for = soc_by_name(model_platform)
    return built_for is not None and built_for.npu_family == soc.npu_family
