"""The preflight: checks that a container is ready to run a model on its NPU cores, and why not."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._checks import Findings, exit_code, overall, report_json, report_text, run_checks

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "Findings": "._checks",
    "exit_code": "._checks",
    "overall": "._checks",
    "report_json": "._checks",
    "report_text": "._checks",
    "run_checks": "._checks",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "Findings",
    "exit_code",
    "overall",
    "report_json",
    "report_text",
    "run_checks",
]
