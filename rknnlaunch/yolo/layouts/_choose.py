"""Choosing the layout of a set of output shapes (`plan_layout`).

The forced one, or every layout that fits in order of preference, with a note naming the others
and one `ModelError` when none does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..._errors import ModelError, UsageError
from ._catalog import TASK_OF, Layout, Task, parse_layout, parse_task
from ._hints import Hints, hints_from, parse_anchors
from ._plan import Mismatch, Plan, Shape
from ._rknn import fit_rknn_combined, fit_rknn_det, fit_rknn_seg, fit_rknn_yolov5
from ._tables import fit_end2end, fit_ultralytics


def _shape_list(shapes: Sequence[Shape]) -> str:
    return ", ".join(f"output {i} {list(s)}" for i, s in enumerate(shapes))


def _fit(layout: Layout, shapes: Sequence[Shape], hints: Hints) -> Plan:
    if layout in ("rknn-9", "rknn-6", "rknn-yolov10"):
        return fit_rknn_det(shapes, hints, layout)
    if layout == "rknn-seg":
        return fit_rknn_seg(shapes, hints)
    if layout in ("rknn-pose", "rknn-obb"):
        return fit_rknn_combined(shapes, hints, layout)
    if layout == "rknn-yolov5":
        return fit_rknn_yolov5(shapes, hints)
    if layout.startswith("end2end"):
        return fit_end2end(shapes, hints, layout)
    return fit_ultralytics(shapes, hints, layout)


_PREFERENCE: tuple[Layout, ...] = (
    "end2end",
    "end2end-seg",
    "end2end-pose",
    "end2end-obb",
    "rknn-9",
    "rknn-6",
    "rknn-yolov10",
    "rknn-seg",
    "rknn-pose",
    "rknn-obb",
    "rknn-yolov5",
    "ultralytics-seg",
    "ultralytics",
    "ultralytics-pose",
    "ultralytics-obb",
)
"""When several layouts fit, the first of these wins (the commoner export), and the decoder says
which others fit. ``rknn-yolov10`` has rknn-9/6 shapes: only ``layout=`` or metadata picks it."""


def _diagnose(shapes: Sequence[Shape]) -> str | None:
    """A specific reason for the common malformed output sets, before listing every layout."""
    four = [s for s in shapes if len(s) == 4]
    batches = [(i, s) for i, s in enumerate(shapes) if len(s) >= 3 and s[0] != 1]
    if batches:
        i, s = batches[0]
        return f"output {i} {list(s)} has batch {s[0]}: only batch-1 outputs are decoded"
    if len(four) >= 3 and len(four) == len(shapes):
        nhwc = all(s[1] == s[2] for s in four) and any(s[3] != s[2] for s in four)
        if nhwc:
            return (
                f"the outputs look NHWC ([1, H, W, C], e.g. {list(four[0])}): the decoder reads NCHW "
                "[1, C, H, W]; export without the transpose, or pass outputs transposed to NCHW"
            )
    return None


def plan_layout(
    shapes: Sequence[Shape],
    metadata: Mapping[str, Any] | None = None,
    *,
    layout: Layout | None = None,
    task: Task | str | None = None,
    anchors: Any = None,
) -> Plan:
    """The decoding plan for these output shapes: forced ``layout``, else detected.

    Metadata narrows the choice (``task``, class count from ``names``, ``kpt_shape``, ``imgsz``,
    ``end2end``, ``layout``). Raises `ModelError` naming the tensor, its shape and what was
    expected when nothing fits, `UsageError` for an unknown layout or task name.
    """
    shapes = [tuple(int(d) for d in s) for s in shapes]
    hints = hints_from(metadata, task_given=task is not None, layout_given=layout is not None)
    if anchors is not None:
        hints = replace(hints, anchors=parse_anchors(anchors))
    wanted_task = parse_task(task) if task is not None else hints.task
    forced = parse_layout(layout) if layout is not None else hints.layout
    if not shapes:
        raise ModelError("the model gave no outputs", "check the model file")
    if forced is not None:
        if forced.startswith("end2end") and hints.end2end is None:  # forced: no row-count guessing
            hints = replace(hints, end2end=True)
        try:
            plan = _fit(forced, shapes, hints)
        except Mismatch as exc:
            raise ModelError(
                f"layout {forced} does not fit the outputs ({_shape_list(shapes)}): {exc}",
                "drop layout= to detect it, or export the model in that layout (docs/yolo.md)",
            ) from None
        if wanted_task is not None and plan.task != wanted_task:
            raise UsageError(
                f"layout {forced} is a {plan.task} layout, not {wanted_task}", "drop one of them"
            )
        return plan
    fits: list[Plan] = []
    reasons: dict[Layout, str] = {}
    for name in _PREFERENCE:
        if name == "rknn-yolov10" or (wanted_task is not None and TASK_OF[name] != wanted_task):
            continue
        try:
            fits.append(_fit(name, shapes, hints))
        except Mismatch as exc:
            reasons[name] = str(exc)
    if not fits:
        specific = _diagnose(shapes)
        if specific is None:
            # The layouts that wanted this many outputs explain best what is off.
            close, seen = [], set()
            for name in sorted(reasons, key=lambda n: (n.startswith("end2end"), _PREFERENCE.index(n))):
                why = reasons[name]
                if not why.startswith("needs ") and why not in seen:
                    seen.add(why)
                    close.append(f"{name}: {why}")
            specific = "; ".join(close[:3]) if close else "no YOLO layout has this many outputs"
        scope = f" {wanted_task}" if wanted_task else ""
        raise ModelError(
            f"model outputs ({_shape_list(shapes)}) are not a YOLO{scope} layout we decode: {specific}",
            "export with rknn_model_zoo or Ultralytics (docs/yolo.md lists the layouts and shapes), "
            "or pass layout=/--layout if the detection guessed wrong",
        )
    chosen = fits[0]
    others = tuple(p.layout for p in fits[1:])
    if chosen.layout in ("rknn-9", "rknn-6"):
        others = (*others, "rknn-yolov10")
    if others:
        note = (
            f"outputs fit {chosen.layout} ({chosen.task}, {chosen.num_classes} classes); they also fit "
            + ", ".join(others)
            + ": pass layout=/--layout (or task=/--task, or give the model's names/task metadata) "
            "if the model is one of those"
        )
        chosen = replace(chosen, note=note, alternatives=others)
    return chosen


def detect_layout(shapes: Sequence[Shape], metadata: Mapping[str, Any] | None = None) -> Layout:
    """Which layout these output shapes are (`ModelError` when none fits)."""
    return plan_layout(shapes, metadata).layout


def class_count(shapes: Sequence[Shape], metadata: Mapping[str, Any] | None = None) -> int:
    """How many classes the model predicts, from its output shapes (`ModelError` if not YOLO).

    0 for ``end2end`` outputs without ``names`` metadata (the class count is not in the shape).
    """
    return plan_layout(shapes, metadata).num_classes
