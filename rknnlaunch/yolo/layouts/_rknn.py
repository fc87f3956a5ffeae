"""Fitting the rknn_model_zoo layouts, split per stride, to output shapes.

rknn-9/6/yolov10 detection, rknn-seg, rknn-pose / rknn-obb (box+scores per stride plus one
tensor) and rknn-yolov5 (anchor heads)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._catalog import Layout
from ._hints import YOLOV5_ANCHORS, Hints
from ._plan import Branch, Mismatch, Plan, Shape, check_nc


def _four_d(shapes: Sequence[Shape], indices: Sequence[int]) -> None:
    for i in indices:
        shape = shapes[i]
        if len(shape) != 4:
            raise Mismatch(f"output {i} {list(shape)} is not 4-D [1, C, H, W]")
        if shape[0] != 1:
            raise Mismatch(f"output {i} {list(shape)} has batch {shape[0]}; only batch 1 is decoded")


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
                raise Mismatch(
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
        raise Mismatch(
            "the branches disagree on the class count: "
            + ", ".join(f"output {i} {list(shapes[i])} -> {c}" for i, c in zip(indices, counts, strict=True))
        )
    if counts[0] < 1:
        raise Mismatch(f"output {indices[0]} {list(shapes[indices[0]])} leaves no class channels")
    return counts[0]


def fit_rknn_det(shapes: Sequence[Shape], hints: Hints, layout: Layout) -> Plan:
    if layout == "rknn-yolov10":
        if len(shapes) not in (6, 9):
            raise Mismatch(f"needs 6 or 9 outputs (box, scores[, score_sum] per stride), got {len(shapes)}")
        per = len(shapes) // 3
    else:
        per = 3 if layout == "rknn-9" else 2
        if len(shapes) != 3 * per:
            raise Mismatch(f"needs {3 * per} outputs, got {len(shapes)}")
    kinds = ("box", "class scores", "score_sum")[:per]
    groups = _branches(shapes, per, kinds)
    for g in groups:
        if shapes[g[0]][1] % 4 or shapes[g[0]][1] < 8:
            raise Mismatch(f"box output {g[0]} {list(shapes[g[0]])} is not 4 sides x DFL bins")
        if per == 3 and shapes[g[2]][1] != 1:
            raise Mismatch(f"score_sum output {g[2]} {list(shapes[g[2]])} should have 1 channel")
    bins = {shapes[g[0]][1] // 4 for g in groups}
    if len(bins) != 1:
        raise Mismatch(f"the box outputs disagree on DFL bins: {sorted(bins)}")
    nc = _same_classes(shapes, [g[1] for g in groups])
    check_nc(nc, hints, "the class-score outputs")
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


def fit_rknn_seg(shapes: Sequence[Shape], hints: Hints) -> Plan:
    if len(shapes) != 13:
        raise Mismatch(
            f"needs 13 outputs (box, scores, score_sum, coefficients per stride + protos), got {len(shapes)}"
        )
    groups = _branches(shapes, 4, ("box", "class scores", "score_sum", "mask coefficients"))
    protos = shapes[12]
    if len(protos) != 4 or protos[0] != 1:
        raise Mismatch(f"protos output 12 {list(protos)} is not [1, nm, H, W]")
    for g in groups:
        if shapes[g[0]][1] % 4 or shapes[g[2]][1] != 1:
            raise Mismatch(
                f"branch {list(g)}: box {list(shapes[g[0]])} / score_sum {list(shapes[g[2]])} malformed"
            )
        if shapes[g[3]][1] != protos[1]:
            raise Mismatch(
                f"mask coefficients output {g[3]} {list(shapes[g[3]])} has {shapes[g[3]][1]} channels, "
                f"protos output 12 {list(protos)} has {protos[1]}"
            )
    nc = _same_classes(shapes, [g[1] for g in groups])
    check_nc(nc, hints, "the class-score outputs")
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


def fit_rknn_combined(shapes: Sequence[Shape], hints: Hints, layout: Layout) -> Plan:
    """rknn-pose / rknn-obb: 3 x [1, 64 + nc, H, W] plus one extra tensor (keypoints / angles)."""
    if len(shapes) != 4:
        raise Mismatch(
            f"needs 4 outputs (box+scores per stride, then one {layout[5:]} tensor), got {len(shapes)}"
        )
    groups = _branches(shapes, 1, ("box+scores",))
    bins = 16
    nc = _same_classes(shapes, [g[0] for g in groups], minus=4 * bins)
    check_nc(nc, hints, "the box+score outputs (64 DFL channels + classes)")
    branches = _branch_records(shapes, groups, "b")
    anchors = sum(b.height * b.width for b in branches)
    extra = shapes[3]
    size = math.prod(extra)
    if layout == "rknn-obb":
        if size != anchors or (extra and extra[0] != 1):
            raise Mismatch(f"angle output 3 {list(extra)} should hold one value per anchor ({anchors})")
        return Plan(
            layout, "obb", tuple(shapes), nc, branches=branches, bins=bins, angles=3, class_logits=True,
            input_size=hints.input_size,
        )  # fmt: skip
    if len(extra) != 4 or extra[0] != 1 or extra[3] != anchors:
        raise Mismatch(f"keypoint output 3 {list(extra)} is not [1, K, 3, {anchors}]")
    kpt = (extra[1], extra[2])
    if hints.keypoint_shape is not None and hints.keypoint_shape != kpt:
        raise Mismatch(
            f"keypoint output 3 {list(extra)} disagrees with metadata kpt_shape {list(hints.keypoint_shape)}"
        )
    if kpt[1] not in (2, 3):
        raise Mismatch(f"keypoint output 3 {list(extra)}: a keypoint has 2 or 3 values, not {kpt[1]}")
    return Plan(
        layout, "pose", tuple(shapes), nc, branches=branches, bins=bins, keypoints=3, keypoint_shape=kpt,
        class_logits=True, input_size=hints.input_size,
    )  # fmt: skip


def fit_rknn_yolov5(shapes: Sequence[Shape], hints: Hints) -> Plan:
    if len(shapes) != 3:
        raise Mismatch(f"needs 3 outputs [1, A*(5+nc), H, W], got {len(shapes)}")
    groups = _branches(shapes, 1, ("head",))
    anchors = hints.anchors or YOLOV5_ANCHORS
    per = len(anchors[0])
    if any(len(a) != per for a in anchors):
        raise Mismatch("every stride needs the same number of anchors")
    counts = []
    for g in groups:
        channels = shapes[g[0]][1]
        if channels % per or channels // per < 6:
            raise Mismatch(
                f"output {g[0]} {list(shapes[g[0]])}: {channels} channels is not {per} anchors x (5 + nc)"
            )
        counts.append(channels // per - 5)
    if len(set(counts)) != 1:
        raise Mismatch(f"the branches disagree on the class count: {counts}")
    check_nc(counts[0], hints, "the heads")
    return Plan(
        "rknn-yolov5", "detect", tuple(shapes), counts[0], branches=_branch_records(shapes, groups, "b"),
        anchors=anchors, input_size=hints.input_size,
    )  # fmt: skip
