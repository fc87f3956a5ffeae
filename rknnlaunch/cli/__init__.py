"""The `rknnlaunch` command line: commands imported lazily, errors mapped to exit codes in one place."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._main import main

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "main": "._main",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "main",
]
