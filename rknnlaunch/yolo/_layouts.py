"""Which YOLO output layout a model has: shapes + metadata -> a validated decoding `Plan`.

Each layout is documented in ``docs/yolo.md`` (shapes, encodings, how it is told apart). This
module owns recognising them and every `ModelError` about malformed output sets; the decoders in
`_decode` only run plans made here.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from .._errors import ModelError, UsageError

Layout = Literal[
    "rknn-9",
    "rknn-6",
    "rknn-yolov10",
    "rknn-yolov5",
    "rknn-seg",
    "rknn-pose",
    "rknn-obb",
    "ultralytics",
    "ultralytics-seg",
    "ultralytics-pose",
    "ultralytics-obb",
    "end2end",
    "end2end-seg",
    "end2end-pose",
    "end2end-obb",
]
"""Output layouts we decode (see docs/yolo.md). ``rknn-*``: rknn_model_zoo exports (split per
stride 8/16/32); ``ultralytics*``: Ultralytics' own ONNX exports (one ``[1, C, N]`` table);
``end2end*``: NMS-free ``[1, N, 6 + extras]`` heads (YOLOv10, YOLO26)."""

LAYOUTS: tuple[Layout, ...] = get_args(Layout)  # one list: the Literal above

Task = Literal["detect", "segment", "pose", "obb"]
TASKS: tuple[Task, ...] = get_args(Task)

TASK_OF: dict[Layout, Task] = {
    "rknn-9": "detect",
    "rknn-6": "detect",
    "rknn-yolov10": "detect",
    "rknn-yolov5": "detect",
    "rknn-seg": "segment",
    "rknn-pose": "pose",
    "rknn-obb": "obb",
    "ultralytics": "detect",
    "ultralytics-seg": "segment",
    "ultralytics-pose": "pose",
    "ultralytics-obb": "obb",
    "end2end": "detect",
    "end2end-seg": "segment",
    "end2end-pose": "pose",
    "end2end-obb": "obb",
}

YOLOV5_ANCHORS: tuple[tuple[tuple[float, float], ...], ...] = (
    ((10, 13), (16, 30), (33, 23)),
    ((30, 61), (62, 45), (59, 119)),
    ((116, 90), (156, 198), (373, 326)),
)
"""YOLOv5's standard COCO anchors (w, h in input pixels) for strides 8, 16, 32."""

COCO_KEYPOINTS = (17, 3)

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Branch:
    """One stride of a split (rknn_model_zoo) head: which outputs hold what, and its grid."""

    box: int  # output index of the DFL box logits (or of the combined box+class tensor)
    scores: int  # output index of the class scores (== box for combined pose/obb tensors)
    score_sum: int | None
    coefficients: int | None  # seg mask coefficients [1, nm, H, W]
    height: int
    width: int
    offset: int  # index of this branch's first anchor among all anchors (stride order)


@dataclass(frozen=True)
class Plan:
    """A layout matched against concrete output shapes: everything the decoder needs."""

    layout: Layout
    task: Task
    shapes: tuple[Shape, ...]
    num_classes: int
    branches: tuple[Branch, ...] = ()
    bins: int = 16
    table: int = 0  # output index of the single table (ultralytics*/end2end)
    channels_last: bool = False  # the table is [1, N, C] instead of [1, C, N]
    protos: int | None = None
    mask_channels: int = 0
    keypoints: int | None = None  # rknn-pose keypoint tensor index
    keypoint_shape: tuple[int, int] = COCO_KEYPOINTS
    angles: int | None = None  # rknn-obb angle tensor index
    anchors: tuple[tuple[tuple[float, float], ...], ...] = ()
    class_logits: bool = False  # class scores still need a sigmoid (zoo pose/obb)
    input_size: tuple[int, int] | None = None  # (width, height) from metadata
    note: str | None = None  # other layouts that fit the same shapes, and how to choose
    alternatives: tuple[Layout, ...] = ()  # those other layouts


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


def parse_task(value: Any, source: str = "task") -> Task:
    text = str(value).strip().lower()
    aliases = {"detection": "detect", "det": "detect", "seg": "segment", "segmentation": "segment"}
    text = aliases.get(text, text)
    if text not in TASKS:
        raise UsageError(f"unknown {source} {value!r}", f"use one of {', '.join(TASKS)}")
    return text


def parse_layout(value: Any, source: str = "layout") -> Layout:
    if value not in LAYOUTS:
        raise UsageError(f"unknown YOLO output {source} {value!r}", f"use one of {', '.join(LAYOUTS)}")
    return value  # type: ignore[no-any-return]


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


def _shape_list(shapes: Sequence[Shape]) -> str:
    return ", ".join(f"output {i} {list(s)}" for i, s in enumerate(shapes))


class _Mismatch(Exception):
    """A layout does not fit; the message says why (collected into the final `ModelError`)."""


def _four_d(shapes: Sequence[Shape], indices: Sequence[int]) -> None:
    for i in indices:
        shape = shapes[i]
        if len(shape) != 4:
            raise _Mismatch(f"output {i} {list(shape)} is not 4-D [1, C, H, W]")
        if shape[0] != 1:
            raise _Mismatch(f"output {i} {list(shape)} has batch {shape[0]}; only batch 1 is decoded")


def _branches(
    shapes: Sequence[Shape], per_branch: int, kinds: Sequence[str], count: int = 3
) -> list[tuple[int, ...]]:
    """Group the first ``count * per_branch`` outputs into branches, checking each shares a grid."""
    _four_d(shapes, range(count * per_branch))
    groups = [tuple(range(b * per_branch, (b + 1) * per_branch)) for b in range(count)]
    grids = [shapes[i][2:] for i in range(count * per_branch)]
    for group in groups:
        first = shapes[group[0]]
        for index, kind in zip(group[1:], kinds[1:], strict=True):
            if shapes[index][2:] != first[2:]:
                by_kind = all(grids[k * count : (k + 1) * count] == grids[:count] for k in range(per_branch))
                hint = (
                    " (the outputs look grouped by kind, all boxes then all scores: order them per "
                    "stride, e.g. box, scores, score_sum for stride 8, then 16, then 32)"
                    if by_kind and len(set(grids[:count])) == count
                    else ""
                )
                raise _Mismatch(
                    f"{kind} output {index} {list(shapes[index])} does not share the {first[2]}x{first[3]} "
                    f"grid of {kinds[0]} output {group[0]} {list(first)}{hint}"
                )
    return groups


def _branch_records(
    shapes: Sequence[Shape], groups: Sequence[tuple[int, ...]], roles: str
) -> tuple[Branch, ...]:
    """Branch records in stride order (largest grid first), with anchor offsets in that order."""
    order = sorted(range(len(groups)), key=lambda g: -shapes[groups[g][0]][2] * shapes[groups[g][0]][3])
    records = []
    offset = 0
    for g in order:
        group = groups[g]
        named = dict(zip(roles, group, strict=False))
        height, width = shapes[group[0]][2], shapes[group[0]][3]
        records.append(
            Branch(
                box=named["b"],
                scores=named.get("c", named["b"]),
                score_sum=named.get("s"),
                coefficients=named.get("m"),
                height=height,
                width=width,
                offset=offset,
            )
        )
        offset += height * width
    return tuple(records)


def _same_classes(shapes: Sequence[Shape], indices: Sequence[int], minus: int = 0) -> int:
    counts = [shapes[i][1] - minus for i in indices]
    if len(set(counts)) != 1:
        raise _Mismatch(
            "the branches disagree on the class count: "
            + ", ".join(f"output {i} {list(shapes[i])} -> {c}" for i, c in zip(indices, counts, strict=True))
        )
    if counts[0] < 1:
        raise _Mismatch(f"output {indices[0]} {list(shapes[indices[0]])} leaves no class channels")
    return counts[0]


def _check_nc(found: int, hints: Hints, what: str) -> None:
    if hints.num_classes is not None and hints.num_classes != found:
        raise _Mismatch(f"{what} gives {found} classes but the metadata names {hints.num_classes}")


def _fit_rknn_det(shapes: Sequence[Shape], hints: Hints, layout: Layout) -> Plan:
    if layout == "rknn-yolov10":
        if len(shapes) not in (6, 9):
            raise _Mismatch(f"needs 6 or 9 outputs (box, scores[, score_sum] per stride), got {len(shapes)}")
        per = len(shapes) // 3
    else:
        per = 3 if layout == "rknn-9" else 2
        if len(shapes) != 3 * per:
            raise _Mismatch(f"needs {3 * per} outputs, got {len(shapes)}")
    kinds = ("box", "class scores", "score_sum")[:per]
    groups = _branches(shapes, per, kinds)
    for g in groups:
        if shapes[g[0]][1] % 4 or shapes[g[0]][1] < 8:
            raise _Mismatch(f"box output {g[0]} {list(shapes[g[0]])} is not 4 sides x DFL bins")
        if per == 3 and shapes[g[2]][1] != 1:
            raise _Mismatch(f"score_sum output {g[2]} {list(shapes[g[2]])} should have 1 channel")
    bins = {shapes[g[0]][1] // 4 for g in groups}
    if len(bins) != 1:
        raise _Mismatch(f"the box outputs disagree on DFL bins: {sorted(bins)}")
    nc = _same_classes(shapes, [g[1] for g in groups])
    _check_nc(nc, hints, "the class-score outputs")
    roles = "bcs"[:per]
    return Plan(
        layout,
        "detect",
        tuple(shapes),
        nc,
        branches=_branch_records(shapes, groups, roles),
        bins=bins.pop(),
        input_size=hints.input_size,
    )


def _fit_rknn_seg(shapes: Sequence[Shape], hints: Hints) -> Plan:
    if len(shapes) != 13:
        raise _Mismatch(
            f"needs 13 outputs (box, scores, score_sum, coefficients per stride + protos), got {len(shapes)}"
        )
    groups = _branches(shapes, 4, ("box", "class scores", "score_sum", "mask coefficients"))
    protos = shapes[12]
    if len(protos) != 4 or protos[0] != 1:
        raise _Mismatch(f"protos output 12 {list(protos)} is not [1, nm, H, W]")
    for g in groups:
        if shapes[g[0]][1] % 4 or shapes[g[2]][1] != 1:
            raise _Mismatch(
                f"branch {list(g)}: box {list(shapes[g[0]])} / score_sum {list(shapes[g[2]])} malformed"
            )
        if shapes[g[3]][1] != protos[1]:
            raise _Mismatch(
                f"mask coefficients output {g[3]} {list(shapes[g[3]])} has {shapes[g[3]][1]} channels, "
                f"protos output 12 {list(protos)} has {protos[1]}"
            )
    nc = _same_classes(shapes, [g[1] for g in groups])
    _check_nc(nc, hints, "the class-score outputs")
    return Plan(
        "rknn-seg",
        "segment",
        tuple(shapes),
        nc,
        branches=_branch_records(shapes, groups, "bcsm"),
        bins=shapes[0][1] // 4,
        protos=12,
        mask_channels=protos[1],
        input_size=hints.input_size,
    )


def _fit_rknn_combined(shapes: Sequence[Shape], hints: Hints, layout: Layout) -> Plan:
    """rknn-pose / rknn-obb: 3 x [1, 64 + nc, H, W] plus one extra tensor (keypoints / angles)."""
    if len(shapes) != 4:
        raise _Mismatch(
            f"needs 4 outputs (box+scores per stride, then one {layout[5:]} tensor), got {len(shapes)}"
        )
    groups = _branches(shapes, 1, ("box+scores",))
    bins = 16
    nc = _same_classes(shapes, [g[0] for g in groups], minus=4 * bins)
    _check_nc(nc, hints, "the box+score outputs (64 DFL channels + classes)")
    branches = _branch_records(shapes, groups, "b")
    anchors = sum(b.height * b.width for b in branches)
    extra = shapes[3]
    size = math.prod(extra)
    if layout == "rknn-obb":
        if size != anchors or (extra and extra[0] != 1):
            raise _Mismatch(f"angle output 3 {list(extra)} should hold one value per anchor ({anchors})")
        return Plan(
            layout, "obb", tuple(shapes), nc, branches=branches, bins=bins, angles=3, class_logits=True,
            input_size=hints.input_size,
        )  # fmt: skip
    if len(extra) != 4 or extra[0] != 1 or extra[3] != anchors:
        raise _Mismatch(f"keypoint output 3 {list(extra)} is not [1, K, 3, {anchors}]")
    kpt = (extra[1], extra[2])
    if hints.keypoint_shape is not None and hints.keypoint_shape != kpt:
        raise _Mismatch(
            f"keypoint output 3 {list(extra)} disagrees with metadata kpt_shape {list(hints.keypoint_shape)}"
        )
    if kpt[1] not in (2, 3):
        raise _Mismatch(f"keypoint output 3 {list(extra)}: a keypoint has 2 or 3 values, not {kpt[1]}")
    return Plan(
        layout, "pose", tuple(shapes), nc, branches=branches, bins=bins, keypoints=3, keypoint_shape=kpt,
        class_logits=True, input_size=hints.input_size,
    )  # fmt: skip


def _fit_rknn_yolov5(shapes: Sequence[Shape], hints: Hints) -> Plan:
    if len(shapes) != 3:
        raise _Mismatch(f"needs 3 outputs [1, A*(5+nc), H, W], got {len(shapes)}")
    groups = _branches(shapes, 1, ("head",))
    anchors = hints.anchors or YOLOV5_ANCHORS
    per = len(anchors[0])
    if any(len(a) != per for a in anchors):
        raise _Mismatch("every stride needs the same number of anchors")
    counts = []
    for g in groups:
        channels = shapes[g[0]][1]
        if channels % per or channels // per < 6:
            raise _Mismatch(
                f"output {g[0]} {list(shapes[g[0]])}: {channels} channels is not {per} anchors x (5 + nc)"
            )
        counts.append(channels // per - 5)
    if len(set(counts)) != 1:
        raise _Mismatch(f"the branches disagree on the class count: {counts}")
    _check_nc(counts[0], hints, "the heads")
    return Plan(
        "rknn-yolov5", "detect", tuple(shapes), counts[0], branches=_branch_records(shapes, groups, "b"),
        anchors=anchors, input_size=hints.input_size,
    )  # fmt: skip


def _table_dims(shape: Shape, index: int) -> tuple[int, int, bool]:
    """(channels, anchors, channels_last) of a [1, C, N] / [1, N, C] / [C, N] table."""
    if len(shape) == 3:
        if shape[0] != 1:
            raise _Mismatch(f"output {index} {list(shape)} has batch {shape[0]}; only batch 1 is decoded")
        rows, cols = shape[1], shape[2]
    elif len(shape) == 2:
        rows, cols = shape
    else:
        raise _Mismatch(f"output {index} {list(shape)} is not a [1, C, N] table")
    if min(rows, cols) < 5:
        raise _Mismatch(f"output {index} {list(shape)} is too small for boxes plus class scores")
    return (rows, cols, False) if rows <= cols else (cols, rows, True)


def _is_anchor_grid(count: int, hints: Hints) -> bool:
    """Whether ``count`` is the number of anchors of strides 8/16/32 (else: a top-k list)."""
    if hints.input_size is not None:
        width, height = hints.input_size
        return count == sum(math.ceil(height / s) * math.ceil(width / s) for s in (8, 16, 32))
    side = math.isqrt(count // 21) if count % 21 == 0 else 0
    return side > 0 and 21 * side * side == count  # square inputs: 21 * (size / 32)^2


def _fit_ultralytics(shapes: Sequence[Shape], hints: Hints, layout: Layout) -> Plan:
    want = 2 if layout == "ultralytics-seg" else 1
    if len(shapes) != want:
        raise _Mismatch(f"needs {want} output{'s' if want > 1 else ''}, got {len(shapes)}")
    table = 0
    protos = None
    if layout == "ultralytics-seg":
        four = [i for i, s in enumerate(shapes) if len(s) == 4]
        if len(four) != 1:
            raise _Mismatch("needs one [1, C, N] table and one [1, nm, H, W] protos output")
        protos = four[0]
        table = 1 - protos
        if shapes[protos][0] != 1:
            raise _Mismatch(f"protos output {protos} {list(shapes[protos])} has batch {shapes[protos][0]}")
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
        raise _Mismatch(f"output {table} {list(shapes[table])}: {channels} rows leave no class scores")
    _check_nc(nc, hints, f"output {table} {list(shapes[table])}")
    if last and not _is_anchor_grid(count, hints):
        raise _Mismatch(
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


def _fit_end2end(shapes: Sequence[Shape], hints: Hints, layout: Layout) -> Plan:
    """NMS-free heads: rows of x1, y1, x2, y2 (obb: cx, cy, w, h), score, class, extras."""
    task = TASK_OF[layout]
    want = 2 if task == "segment" else 1
    if len(shapes) != want:
        raise _Mismatch(f"needs {want} output{'s' if want > 1 else ''}, got {len(shapes)}")
    table, protos = 0, None
    if task == "segment":
        four = [i for i, s in enumerate(shapes) if len(s) == 4]
        if len(four) != 1 or shapes[four[0]][0] != 1:
            raise _Mismatch("needs one [1, N, 6 + nm] row table and one [1, nm, H, W] protos output")
        protos = four[0]
        table = 1 - protos
    shape = shapes[table]
    kpt = hints.keypoint_shape or COCO_KEYPOINTS
    extra = {"detect": 0, "segment": shapes[protos][1] if protos is not None else 0, "pose": kpt[0] * kpt[1]}
    width = 6 + extra.get(task, 1)
    if len(shape) != 3 or shape[0] != 1 or shape[2] != width:
        what = {"detect": "", "segment": ", mask coefficients", "pose": ", keypoints", "obb": ", angle"}[task]
        head = "cx, cy, w, h" if task == "obb" else "x1, y1, x2, y2"
        raise _Mismatch(f"output {table} {list(shape)} is not [1, N, {width}] ({head}, score, class{what})")
    if hints.end2end is False:
        raise _Mismatch("the metadata says end2end: False")
    if _is_anchor_grid(shape[1], hints) and hints.end2end is not True:
        raise _Mismatch(f"output {table} {list(shape)} has one row per anchor: a channels-last table")
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


def _fit(layout: Layout, shapes: Sequence[Shape], hints: Hints) -> Plan:
    if layout in ("rknn-9", "rknn-6", "rknn-yolov10"):
        return _fit_rknn_det(shapes, hints, layout)
    if layout == "rknn-seg":
        return _fit_rknn_seg(shapes, hints)
    if layout in ("rknn-pose", "rknn-obb"):
        return _fit_rknn_combined(shapes, hints, layout)
    if layout == "rknn-yolov5":
        return _fit_rknn_yolov5(shapes, hints)
    if layout.startswith("end2end"):
        return _fit_end2end(shapes, hints, layout)
    return _fit_ultralytics(shapes, hints, layout)


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
        except _Mismatch as exc:
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
        except _Mismatch as exc:
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
