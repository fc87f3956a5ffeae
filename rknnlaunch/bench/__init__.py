"""The benchmark behind `rknnlaunch bench`: its cases, runner, report and one run from its options."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._report import TABLE_HEADER, BenchReport
    from ._session import CPU_DEFAULTS, NPU_DEFAULTS, BenchOptions, prepare, synthetic_frame

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "TABLE_HEADER": "._report",
    "BenchReport": "._report",
    "CPU_DEFAULTS": "._session",
    "NPU_DEFAULTS": "._session",
    "BenchOptions": "._session",
    "prepare": "._session",
    "synthetic_frame": "._session",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "BenchOptions",
    "BenchReport",
    "CPU_DEFAULTS",
    "NPU_DEFAULTS",
    "TABLE_HEADER",
    "prepare",
    "synthetic_frame",
]
