"""What a model's metadata says about its outputs (`Hints`), and YOLOv5 anchors.

`Hints`: task, class names, keypoint shape, input size, end2end, layout. Anchors: the standard
ones or given."""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..._errors import ModelError, UsageError
from ._catalog import Layout, Task, parse_layout, parse_task

YOLOV5_ANCHORS: tuple[tuple[tuple[float, float], ...], ...] = (
    ((10, 13), (16, 30), (33, 23)),
    ((30, 61), (62, 45), (59, 119)),
    ((116, 90), (156, 198), (373, 326)),
)
"""YOLOv5's standard COCO anchors (w, h in input pixels) for strides 8, 16, 32."""


@dataclass(frozen=True)
class Hints:
    """What model metadata says (all optional)."""

    task: Task | None = None
    num_classes: int | None = None
    keypoint_shape: tuple[int, int] | None = None
    anchors: tuple[tuple[tuple[float, float], ...], ...] | None = None
    input_size: tuple[int, int] | None = None  # (width, height)
    end2end: bool | None = None
    layout: Layout | None = None


def _literal(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


def class_names(metadata: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """Class names from metadata ``names``: a list, or {id: name} (also as their Python repr)."""
    raw = _literal((metadata or {}).get("names"))
    if isinstance(raw, Mapping) and raw and all(isinstance(_literal(k), int) for k in raw):
        by_id = {int(_literal(k)): str(v) for k, v in raw.items()}
        return tuple(by_id.get(i, f"class {i}") for i in range(max(by_id) + 1))
    if isinstance(raw, list | tuple) and raw:
        return tuple(str(name) for name in raw)
    return None


def hints_from(
    metadata: Mapping[str, Any] | None, *, task_given: bool = False, layout_given: bool = False
) -> Hints:
    """Read the optional metadata keys (task, names, imgsz, kpt_shape, anchors, layout, end2end).

    Unreadable values are a `ModelError`: the model's metadata is what is wrong.
    """
    if not metadata:
        return Hints()
    task = None if task_given else metadata.get("task")
    names = class_names(metadata)
    kpt = _literal(metadata.get("kpt_shape"))
    keypoint_shape = None
    if kpt is not None:
        if not (isinstance(kpt, list | tuple) and len(kpt) == 2 and all(isinstance(v, int) for v in kpt)):
            raise ModelError(f"model metadata kpt_shape {kpt!r} is not [keypoints, 2 or 3]")
        if kpt[0] < 1 or kpt[1] not in (2, 3):
            raise ModelError(f"model metadata kpt_shape {list(kpt)} is not [keypoints >= 1, 2 or 3]")
        keypoint_shape = (int(kpt[0]), int(kpt[1]))
    imgsz = _literal(metadata.get("imgsz"))
    input_size = None
    if isinstance(imgsz, int) and imgsz > 0:
        input_size = (imgsz, imgsz)
    elif (
        isinstance(imgsz, list | tuple)
        and len(imgsz) == 2
        and all(isinstance(v, int) and v > 0 for v in imgsz)
    ):
        input_size = (int(imgsz[1]), int(imgsz[0]))  # Ultralytics writes [height, width]
    anchors = None
    raw_anchors = _literal(metadata.get("anchors"))
    if raw_anchors is not None:
        anchors = parse_anchors(raw_anchors)
    layout = None if layout_given else metadata.get("layout")
    end2end = _literal(metadata.get("end2end"))
    try:
        parsed_task = None if task is None else parse_task(task, "metadata task")
        parsed_layout = None if layout is None else parse_layout(layout, "metadata layout")
    except UsageError as exc:  # the model's own metadata names something we do not decode
        raise ModelError(exc.problem, "pass task=/layout= to override the model's metadata") from None
    return Hints(
        task=parsed_task,
        num_classes=None if names is None else len(names),
        keypoint_shape=keypoint_shape,
        anchors=anchors,
        input_size=input_size,
        end2end=end2end if isinstance(end2end, bool) else None,
        layout=parsed_layout,
    )


def parse_anchors(raw: Any) -> tuple[tuple[tuple[float, float], ...], ...]:
    """YOLOv5 anchors: 3 strides x A anchors x (w, h), nested or flat (the zoo's anchors file)."""
    flat: list[float] = []

    def walk(value: Any) -> None:
        if isinstance(value, list | tuple):
            for item in value:
                walk(item)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            flat.append(float(value))
        else:
            raise UsageError(f"anchor value {value!r} is not a number", "give w,h pairs in input pixels")

    walk(_literal(raw))
    if not flat or len(flat) % 6 or not all(v > 0 and math.isfinite(v) for v in flat):
        raise UsageError(
            f"{len(flat)} anchor values given: need 3 strides x A anchors x (w, h), all positive",
            "e.g. the standard YOLOv5 anchors 10,13, 16,30, 33,23, 30,61, 62,45, 59,119, 116,90, ...",
        )
    per_stride = len(flat) // 3
    return tuple(
        tuple(
            (flat[s * per_stride + 2 * a], flat[s * per_stride + 2 * a + 1]) for a in range(per_stride // 2)
        )
        for s in range(3)
    )
