"""Detection pipelines: letterbox -> infer -> decode in the pool's workers (`Detector`)."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._detector import Detector, DetectResult, StageTimings
    from ._spec import ModelPipeline, choose_pad, head_plan, shown_names

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "shown_names": "._spec",
    "head_plan": "._spec",
    "choose_pad": "._spec",
    "DetectResult": "._detector",
    "Detector": "._detector",
    "ModelPipeline": "._spec",
    "StageTimings": "._detector",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "shown_names",
    "head_plan",
    "choose_pad",
    "DetectResult",
    "Detector",
    "ModelPipeline",
    "StageTimings",
]
