"""The `rknnlaunch` command line: commands imported lazily, errors mapped to exit codes in one place."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._main import main

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "main": "._main",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "main",
]
