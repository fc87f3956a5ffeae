"""Fitting the single-table layouts to output shapes: Ultralytics tables and end-to-end rows.

Ultralytics' ``[1, C, N]`` tables (detect/seg/pose/obb) and the NMS-free end-to-end
``[1, N, 6 + extras]`` rows, told apart by whether rows are anchors."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._catalog import TASK_OF, Layout
from ._hints import Hints
from ._plan import COCO_KEYPOINTS, Mismatch, Plan, Shape, check_nc


def _table_dims(shape: Shape, index: int) -> tuple[int, int, bool]:
    """(channels, anchors, channels_last) of a [1, C, N] / [1, N, C] / [C, N] table."""
    if len(shape) == 3:
        if shape[0] != 1:
            raise Mismatch(f"output {index} {list(shape)} has batch {shape[0]}; only batch 1 is decoded")
        rows, cols = shape[1], shape[2]
    elif len(shape) == 2:
        rows, cols = shape
    else:
        raise Mismatch(f"output {index} {list(shape)} is not a [1, C, N] table")
    if min(rows, cols) < 5:
        raise Mismatch(f"output {index} {list(shape)} is too small for boxes plus class scores")
    return (rows, cols, False) if rows <= cols else (cols, rows, True)


def _is_anchor_grid(count: int, hints: Hints) -> bool:
    """Whether ``count`` is the number of anchors of strides 8/16/32 (else: a top-k list)."""
    if hints.input_size is not None:
        width, height = hints.input_size
        return count == sum(math.ceil(height / s) * math.ceil(width / s) for s in (8, 16, 32))
    side = math.isqrt(count // 21) if count % 21 == 0 else 0
    return side > 0 and 21 * side * side == count  # square inputs: 21 * (size / 32)^2


def fit_ultralytics(shapes: Sequence[Shape], hints: Hints, layout: Layout) -> Plan:
    want = 2 if layout == "ultralytics-seg" else 1
    if len(shapes) != want:
        raise Mismatch(f"needs {want} output{'s' if want > 1 else ''}, got {len(shapes)}")
    table = 0
    protos = None
    if layout == "ultralytics-seg":
        four = [i for i, s in enumerate(shapes) if len(s) == 4]
        if len(four) != 1:
            raise Mismatch("needs one [1, C, N] table and one [1, nm, H, W] protos output")
        protos = four[0]
        table = 1 - protos
        if shapes[protos][0] != 1:
            raise Mismatch(f"protos output {protos} {list(shapes[protos])} has batch {shapes[protos][0]}")
    channels, count, last = _table_dims(shapes[table], table)
    extra = 0
    kpt = hints.keypoint_shape or COCO_KEYPOINTS
    if layout == "ultralytics-seg" and protos is not None:
        extra = shapes[protos][1]
    elif layout == "ultralytics-obb":
        extra = 1
    elif layout == "ultralytics-pose":
        extra = kpt[0] * kpt[1]
    nc = channels - 4 - extra
    if nc < 1:
        raise Mismatch(f"output {table} {list(shapes[table])}: {channels} rows leave no class scores")
    check_nc(nc, hints, f"output {table} {list(shapes[table])}")
    if last and not _is_anchor_grid(count, hints):
        raise Mismatch(
            f"output {table} {list(shapes[table])} is channels-last with {count} rows, not an anchor grid"
        )
    return Plan(
        layout,
        TASK_OF[layout],
        tuple(shapes),
        nc,
        table=table,
        channels_last=last,
        protos=protos,
        mask_channels=extra if protos is not None else 0,
        keypoint_shape=kpt,
        input_size=hints.input_size,
    )


def fit_end2end(shapes: Sequence[Shape], hints: Hints, layout: Layout) -> Plan:
    """NMS-free heads: rows of x1, y1, x2, y2 (obb: cx, cy, w, h), score, class, extras."""
    task = TASK_OF[layout]
    want = 2 if task == "segment" else 1
    if len(shapes) != want:
        raise Mismatch(f"needs {want} output{'s' if want > 1 else ''}, got {len(shapes)}")
    table, protos = 0, None
    if task == "segment":
        four = [i for i, s in enumerate(shapes) if len(s) == 4]
        if len(four) != 1 or shapes[four[0]][0] != 1:
            raise Mismatch("needs one [1, N, 6 + nm] row table and one [1, nm, H, W] protos output")
        protos = four[0]
        table = 1 - protos
    shape = shapes[table]
    kpt = hints.keypoint_shape or COCO_KEYPOINTS
    extra = {"detect": 0, "segment": shapes[protos][1] if protos is not None else 0, "pose": kpt[0] * kpt[1]}
    width = 6 + extra.get(task, 1)
    if len(shape) != 3 or shape[0] != 1 or shape[2] != width:
        what = {"detect": "", "segment": ", mask coefficients", "pose": ", keypoints", "obb": ", angle"}[task]
        head = "cx, cy, w, h" if task == "obb" else "x1, y1, x2, y2"
        raise Mismatch(f"output {table} {list(shape)} is not [1, N, {width}] ({head}, score, class{what})")
    if hints.end2end is False:
        raise Mismatch("the metadata says end2end: False")
    if _is_anchor_grid(shape[1], hints) and hints.end2end is not True:
        raise Mismatch(f"output {table} {list(shape)} has one row per anchor: a channels-last table")
    return Plan(
        layout,
        task,
        tuple(shapes),
        hints.num_classes or 0,
        table=table,
        channels_last=True,
        protos=protos,
        mask_channels=extra["segment"],
        keypoint_shape=kpt,
        input_size=hints.input_size,
    )
