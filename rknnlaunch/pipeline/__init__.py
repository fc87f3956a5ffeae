"""Detection pipelines: letterbox -> infer -> decode in the pool's workers (`Detector`)."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

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


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "shown_names",
    "head_plan",
    "choose_pad",
    "DetectResult",
    "Detector",
    "ModelPipeline",
    "StageTimings",
]
