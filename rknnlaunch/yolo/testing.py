"""Testing aid, not runtime API: synthetic YOLO outputs for known objects, per layout.

Built through each layout's exact encoding (docs/yolo.md#test-encoders).

Used by the tests (decode must give the objects back) and the benchmarks (realistic 80-class
frames without a model). The inverse of the decoders: DFL bins whose softmax expectation is the
wanted side distance, anchors at grid cell centres, strides 8/16/32; rotated boxes through the
inverse of dist2rbox; YOLOv5 through its anchor encoding; keypoints, mask coefficients and
protos as given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from .decode import Quant
from .layouts import YOLOV5_ANCHORS

STRIDES = (8, 16, 32)
FloatArray = npt.NDArray[np.float32]
_LOGIT_FLOOR = -20.0  # class "probability 0" as a logit (zoo pose/obb heads output logits)


@dataclass(frozen=True)
class SynthObject:
    """One object to encode: xyxy box in input pixels, class, score (already sigmoid).

    ``angle`` (radians) rotates the box about its centre (obb layouts); ``keypoints`` are
    (x, y, visibility) in input pixels (pose); ``coefficients`` are its mask coefficients (seg).
    """

    box: tuple[float, float, float, float]
    class_id: int
    score: float
    angle: float = 0.0
    keypoints: tuple[tuple[float, float, float], ...] | None = None
    coefficients: tuple[float, ...] | None = None


@dataclass(frozen=True)
class _Placed:
    obj: SynthObject
    stride_index: int
    anchor: int  # flat index into that stride's H x W grid
    sides: tuple[float, float, float, float]  # DFL distances (left, top, right, bottom) in cells


def dfl_logits(distance: float, bins: int = 16) -> npt.NDArray[np.float32]:
    """Logits whose softmax over ``bins`` has expectation ``distance`` (0 <= distance <= bins - 1).

    The mass sits on the two bins around ``distance``; the others get ~e^-20 of it.
    """
    if not 0.0 <= distance <= bins - 1:
        raise ValueError(f"distance {distance} outside 0..{bins - 1}")
    low = min(int(np.floor(distance)), bins - 2)
    eps = 1e-9
    probs = np.full(bins, eps, np.float64)
    others = [i for i in range(bins) if i not in (low, low + 1)]
    leak_mass = eps * len(others)
    leak_mean = eps * sum(others)
    # p_low + p_high = 1 - leak_mass and p_low * low + p_high * (low + 1) = distance - leak_mean.
    high = distance - leak_mean - low * (1.0 - leak_mass)
    probs[low + 1] = max(high, 1e-12)
    probs[low] = max(1.0 - leak_mass - high, 1e-12)
    return np.log(probs).astype(np.float32)


def _sides(obj: SynthObject, ax: float, ay: float, stride: float) -> tuple[float, float, float, float]:
    """DFL side distances (cells) of ``obj`` from the anchor centre (ax, ay) in input pixels."""
    x1, y1, x2, y2 = obj.box
    if obj.angle == 0.0:
        return ((ax - x1) / stride, (ay - y1) / stride, (x2 - ax) / stride, (y2 - ay) / stride)
    # Inverse of dist2rbox: the centre's offset from the anchor, in the box's own (rotated) frame.
    cx, cy, w, h = (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1
    dx, dy = (cx - ax) / stride, (cy - ay) / stride
    cos, sin = math.cos(obj.angle), math.sin(obj.angle)
    off_x, off_y = dx * cos + dy * sin, -dx * sin + dy * cos
    half_w, half_h = w / (2 * stride), h / (2 * stride)
    return (half_w - off_x, half_h - off_y, half_w + off_x, half_h + off_y)


def place(objects: Sequence[SynthObject], input_size: int = 640, bins: int = 16) -> list[_Placed]:
    """Put each object on the anchor of the smallest stride whose bins can reach all four sides."""
    placed = []
    for obj in objects:
        x1, y1, x2, y2 = obj.box
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        for index, stride in enumerate(STRIDES):
            grid = input_size // stride
            gx, gy = min(int(cx // stride), grid - 1), min(int(cy // stride), grid - 1)
            sides = _sides(obj, (gx + 0.5) * stride, (gy + 0.5) * stride, stride)
            if all(0.0 <= s <= bins - 1 for s in sides):
                placed.append(_Placed(obj, index, gy * grid + gx, sides))
                break
        else:
            raise ValueError(f"box {obj.box} cannot be encoded at strides {STRIDES}")
    return placed


def _background(
    rng: np.random.Generator | None, shape: tuple[int, ...], mean_logit: float
) -> npt.NDArray[np.float32]:
    if rng is None:
        return np.zeros(shape, np.float32)
    logits = rng.normal(mean_logit, 1.5, size=shape).astype(np.float32)
    return np.asarray(1.0 / (1.0 + np.exp(-logits)), np.float32)


@dataclass(frozen=True)
class _Grids:
    """Per stride: DFL box logits (4*bins x H x W) and class probabilities (nc x H x W)."""

    boxes: list[FloatArray]
    scores: list[FloatArray]
    placed: list[_Placed]
    offsets: list[int]  # first global anchor of each stride

    def global_anchor(self, item: _Placed) -> int:
        return self.offsets[item.stride_index] + item.anchor


def _grids(
    objects: Sequence[SynthObject],
    num_classes: int,
    input_size: int,
    bins: int,
    rng: np.random.Generator | None,
    background_logit: float,
) -> _Grids:
    placed = place(objects, input_size, bins)
    boxes, scores, offsets = [], [], []
    offset = 0
    for index, stride in enumerate(STRIDES):
        grid = input_size // stride
        box = np.zeros((4 * bins, grid, grid), np.float32)
        if rng is not None:
            box += rng.normal(0.0, 1.0, size=box.shape).astype(np.float32)
        cls = _background(rng, (num_classes, grid, grid), background_logit)
        box2d, cls2d = box.reshape(4, bins, grid * grid), cls.reshape(num_classes, grid * grid)
        for item in (p for p in placed if p.stride_index == index):
            for side, distance in enumerate(item.sides):
                box2d[side, :, item.anchor] = dfl_logits(distance, bins)
            cls2d[item.obj.class_id, item.anchor] = item.obj.score
        boxes.append(box)
        scores.append(cls)
        offsets.append(offset)
        offset += grid * grid
    return _Grids(cast("list[FloatArray]", boxes), scores, placed, offsets)


def encode_rknn(
    objects: Sequence[SynthObject],
    num_classes: int = 80,
    input_size: int = 640,
    bins: int = 16,
    with_score_sum: bool = True,
    rng: np.random.Generator | None = None,
    background_logit: float = -9.0,
) -> list[npt.NDArray[np.float32]]:
    """rknn_model_zoo outputs: per stride [box 1x4*bins, scores 1xnc, (score_sum 1x1)] x H x W.

    ``rng`` adds sigmoid(N(background_logit, 1.5)) noise to every class score (real frames have it).
    """
    grids = _grids(objects, num_classes, input_size, bins, rng, background_logit)
    outputs: list[npt.NDArray[np.float32]] = []
    for box, scores in zip(grids.boxes, grids.scores, strict=True):
        outputs += [box[None], scores[None]]
        if with_score_sum:
            outputs.append(np.clip(scores.sum(axis=0, keepdims=True), 0.0, 1.0)[None].astype(np.float32))
    return outputs


def _logits(probs: FloatArray) -> FloatArray:
    clipped = np.clip(probs.astype(np.float64), 1e-12, 1 - 1e-12)
    logits: FloatArray = np.maximum(np.log(clipped / (1 - clipped)), _LOGIT_FLOOR).astype(np.float32)
    return logits


def encode_rknn_seg(
    objects: Sequence[SynthObject],
    protos: FloatArray,
    num_classes: int = 80,
    input_size: int = 640,
    rng: np.random.Generator | None = None,
) -> list[npt.NDArray[np.float32]]:
    """rknn_model_zoo YOLOv8-seg: per stride box, scores, score_sum, coefficients [1,nm,H,W]; protos."""
    masks = protos.shape[0]
    grids = _grids(objects, num_classes, input_size, 16, rng, -9.0)
    outputs: list[npt.NDArray[np.float32]] = []
    for index, (box, scores) in enumerate(zip(grids.boxes, grids.scores, strict=True)):
        grid = box.shape[1]
        coef = np.zeros((masks, grid * grid), np.float32)
        if rng is not None:
            coef += np.asarray(rng.normal(0, 1, size=coef.shape), np.float32)
        for item in (p for p in grids.placed if p.stride_index == index):
            if item.obj.coefficients is None:
                raise ValueError("seg objects need mask coefficients")
            coef[:, item.anchor] = item.obj.coefficients
        score_sum = np.clip(scores.sum(axis=0, keepdims=True), 0.0, 1.0)[None].astype(np.float32)
        outputs += [box[None], scores[None], score_sum, coef.reshape(1, masks, grid, grid)]
    return [*outputs, protos[None].astype(np.float32)]


def encode_rknn_pose(
    objects: Sequence[SynthObject],
    num_classes: int = 1,
    input_size: int = 640,
    keypoints: int = 17,
    rng: np.random.Generator | None = None,
) -> list[npt.NDArray[np.float32]]:
    """rknn_model_zoo YOLOv8-pose: per stride [1, 64 + nc, H, W] (class logits); [1, K, 3, N]."""
    grids = _grids(objects, num_classes, input_size, 16, rng, -9.0)
    total = sum((input_size // s) ** 2 for s in STRIDES)
    kpts = np.zeros((keypoints, 3, total), np.float32)
    for item in grids.placed:
        if item.obj.keypoints is None:
            raise ValueError("pose objects need keypoints")
        kpts[:, :, grids.global_anchor(item)] = np.asarray(item.obj.keypoints, np.float32)
    heads = [np.concatenate([b, _logits(s)])[None] for b, s in zip(grids.boxes, grids.scores, strict=True)]
    return [*heads, kpts[None]]


def encode_rknn_obb(
    objects: Sequence[SynthObject],
    num_classes: int = 15,
    input_size: int = 640,
    rng: np.random.Generator | None = None,
) -> list[npt.NDArray[np.float32]]:
    """rknn_model_zoo YOLOv8-obb: per stride [1, 64 + nc, H, W] (class logits); angles [1, 1, N]
    holding angle / pi + 0.25 (the head's sigmoid output)."""
    grids = _grids(objects, num_classes, input_size, 16, rng, -9.0)
    total = sum((input_size // s) ** 2 for s in STRIDES)
    angles = np.full((1, 1, total), 0.25, np.float32)
    for item in grids.placed:
        angles[0, 0, grids.global_anchor(item)] = item.obj.angle / math.pi + 0.25
    heads = [np.concatenate([b, _logits(s)])[None] for b, s in zip(grids.boxes, grids.scores, strict=True)]
    return [*heads, angles]


def encode_ultralytics(
    objects: Sequence[SynthObject],
    num_classes: int = 80,
    input_size: int = 640,
    bins: int = 16,
    task: str = "detect",
    keypoints: int = 17,
    masks: int = 32,
    rng: np.random.Generator | None = None,
) -> list[npt.NDArray[np.float32]]:
    """Ultralytics' single [1, 4 + nc + extras, N] output with the same anchors as `encode_rknn`.

    Extras: seg 32 mask coefficients, pose K x (x, y, visibility), obb the angle (radians, last).
    For obb, cx, cy, w, h are the rotated box's centre and own sides. ``rng`` adds faint class
    score noise everywhere and random boxes/extras on the other anchors (real frames have them).
    """
    sizes = [(input_size // s) ** 2 for s in STRIDES]
    offsets = np.cumsum([0, *sizes])
    extra = {"detect": 0, "segment": masks, "pose": keypoints * 3, "obb": 1}[task]
    table = np.zeros((4 + num_classes + extra, int(offsets[-1])), np.float32)
    if rng is not None:
        anchors = table.shape[1]
        table[:2] = rng.uniform(0, input_size, size=(2, anchors))
        table[2:4] = rng.uniform(4, 200, size=(2, anchors))
        table[4 : 4 + num_classes] = _background(rng, (num_classes, anchors), -9.0)
        table[4 + num_classes :] = rng.normal(0, 1, size=(extra, anchors))
    for item in place(objects, input_size, bins):
        x1, y1, x2, y2 = item.obj.box
        column = int(offsets[item.stride_index]) + item.anchor
        table[:4, column] = ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1)
        table[4 + item.obj.class_id, column] = item.obj.score
        rest = table[4 + num_classes :, column]
        if task == "obb":
            rest[0] = item.obj.angle
        elif task == "pose":
            if item.obj.keypoints is None:
                raise ValueError("pose objects need keypoints")
            rest[:] = np.asarray(item.obj.keypoints, np.float32).reshape(-1)
        elif task == "segment":
            if item.obj.coefficients is None:
                raise ValueError("seg objects need mask coefficients")
            rest[:] = item.obj.coefficients
    return [table[None]]


def encode_yolov5(
    objects: Sequence[SynthObject],
    num_classes: int = 80,
    input_size: int = 640,
    anchors: Sequence[Sequence[tuple[float, float]]] = YOLOV5_ANCHORS,
    rng: np.random.Generator | None = None,
) -> list[npt.NDArray[np.float32]]:
    """rknn_model_zoo YOLOv5: per stride [1, A*(5+nc), H, W], sigmoid-ed: x, y, w, h, obj, classes.

    xy = (v*2 - 0.5 + cell) * stride, wh = (v*2)^2 * anchor; each object goes to the anchor whose
    shape fits it best (objectness = score, class probability 1).
    """
    per = len(anchors[0])
    tensors = []
    for stride in STRIDES:
        grid = input_size // stride
        base = np.zeros((per, 5 + num_classes, grid * grid), np.float32)
        if rng is not None:
            base[:, :4] = rng.uniform(0, 1, size=(per, 4, grid * grid))
            base[:, 4] = rng.uniform(0, 0.02, size=(per, grid * grid))
            base[:, 5:] = rng.uniform(0, 0.3, size=(per, num_classes, grid * grid))
        tensors.append(base)
    for obj in objects:
        x1, y1, x2, y2 = obj.box
        cx, cy, w, h = (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1
        best: tuple[float, int, int] | None = None
        for s, row in enumerate(anchors):
            for a, (aw, ah) in enumerate(row):
                if w / aw <= 4 and h / ah <= 4:
                    fit = abs(math.log(w / aw)) + abs(math.log(h / ah))
                    if best is None or fit < best[0]:
                        best = (fit, s, a)
        if best is None:
            raise ValueError(f"box {obj.box} is too large for the anchors")
        _, s, a = best
        stride = STRIDES[s]
        grid = input_size // stride
        gx, gy = min(int(cx // stride), grid - 1), min(int(cy // stride), grid - 1)
        column = tensors[s][a, :, gy * grid + gx]
        column[:] = 0
        column[0] = ((cx / stride - gx) + 0.5) / 2
        column[1] = ((cy / stride - gy) + 0.5) / 2
        column[2] = math.sqrt(w / anchors[s][a][0]) / 2
        column[3] = math.sqrt(h / anchors[s][a][1]) / 2
        column[4] = obj.score
        column[5 + obj.class_id] = 1.0
    return [
        t.reshape(1, per * (5 + num_classes), input_size // st, input_size // st)
        for t, st in zip(tensors, STRIDES, strict=True)
    ]


def encode_end2end(
    objects: Sequence[SynthObject],
    rows: int = 300,
    task: str = "detect",
    keypoints: int = 17,
    masks: int = 32,
) -> list[npt.NDArray[np.float32]]:
    """An NMS-free head's [1, rows, 6 + extras]: x1, y1, x2, y2 (obb: cx, cy, w, h), score, class,
    then mask coefficients / keypoints (x, y, visibility) / the angle; unused rows all zero."""
    extra = {"detect": 0, "segment": masks, "pose": keypoints * 3, "obb": 1}[task]
    table = np.zeros((rows, 6 + extra), np.float32)
    for row, obj in enumerate(objects):
        x1, y1, x2, y2 = obj.box
        head = ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1) if task == "obb" else obj.box
        table[row, :6] = (*head, obj.score, obj.class_id)
        if task == "obb":
            table[row, 6] = obj.angle
        elif task == "pose":
            if obj.keypoints is None:
                raise ValueError("pose objects need keypoints")
            table[row, 6:] = np.asarray(obj.keypoints, np.float32).reshape(-1)
        elif task == "segment":
            if obj.coefficients is None:
                raise ValueError("seg objects need mask coefficients")
            table[row, 6:] = obj.coefficients
    return [table[None]]


def quantise(
    tensor: npt.NDArray[np.float32], dtype: type[np.integer] = np.int8
) -> tuple[npt.NDArray[np.integer], Quant]:
    """Affine-quantise a tensor over its own range, as RKNN's int8 outputs are."""
    info = np.iinfo(dtype)
    low, high = float(min(tensor.min(), 0.0)), float(max(tensor.max(), 0.0))
    scale = (high - low) / (info.max - info.min) or 1.0
    zero_point = round(info.min - low / scale)
    q = np.clip(np.round(tensor / scale + zero_point), info.min, info.max).astype(dtype)
    return q, Quant(zero_point, scale)


def realistic_objects(
    rng: np.random.Generator, objects: int = 20, num_classes: int = 80, input_size: int = 640
) -> list[SynthObject]:
    """``objects`` objects each seen by a 3 x 3 patch of neighbouring anchors with jittered boxes and
    scores (what NMS is for)."""
    items: list[SynthObject] = []
    for _ in range(objects):
        width, height = rng.uniform(20, 300), rng.uniform(20, 300)
        cx = rng.uniform(width / 2 + 40, input_size - width / 2 - 40)
        cy = rng.uniform(height / 2 + 40, input_size - height / 2 - 40)
        class_id = int(rng.integers(num_classes))
        base = rng.uniform(0.4, 0.95)
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                stride = 8 if max(width, height) < 200 else 16
                jitter = rng.normal(0, 2.0, 4)
                box = (
                    cx - width / 2 + dx * stride + jitter[0],
                    cy - height / 2 + dy * stride + jitter[1],
                    cx + width / 2 + dx * stride + jitter[2],
                    cy + height / 2 + dy * stride + jitter[3],
                )
                score = base * (1.0 if dx == dy == 0 else rng.uniform(0.3, 0.9))
                items.append(SynthObject(box, class_id, float(score)))
    return items


def realistic_layout_frame(
    layout: str, rng: np.random.Generator, objects: int = 20, num_classes: int | None = None
) -> tuple[list[npt.NDArray[np.float32]], dict[str, object]]:
    """A realistic 640 x 640 frame of ``layout`` (noise everywhere, ``objects`` objects each seen
    by 3 x 3 neighbouring anchors) and the metadata an export of it would carry.

    Class counts default to what such models have: 80 (detect, segment), 1 (pose), 15 (obb).
    """
    task = {"seg": "segment", "pose": "pose", "obb": "obb"}.get(layout.split("-")[-1], "detect")
    nc = num_classes or {"detect": 80, "segment": 80, "pose": 1, "obb": 15}[task]
    items = realistic_objects(rng, objects, nc)
    meta: dict[str, object] = {"task": task, "names": [f"c{i}" for i in range(nc)], "imgsz": [640, 640]}
    if task == "pose":
        meta["kpt_shape"] = [17, 3]
        items = [
            SynthObject(
                o.box,
                o.class_id,
                o.score,
                keypoints=tuple(
                    (float(rng.uniform(o.box[0], o.box[2])), float(rng.uniform(o.box[1], o.box[3])), float(v))
                    for v in rng.uniform(0, 1, 17)
                ),
            )
            for o in items
        ]
    elif task == "obb":
        base = rng.uniform(-0.7, 2.3, objects)  # one angle per object, jittered per anchor
        items = [
            SynthObject(o.box, o.class_id, o.score, angle=float(base[i // 9] + rng.normal(0, 0.03)))
            for i, o in enumerate(items)
        ]
    elif task == "segment":
        items = [
            SynthObject(o.box, o.class_id, o.score, coefficients=tuple(rng.normal(0, 1, 32))) for o in items
        ]
    if layout in ("rknn-9", "rknn-6"):
        return encode_rknn(items, nc, with_score_sum=layout == "rknn-9", rng=rng), meta
    if layout == "rknn-seg":
        return encode_rknn_seg(items, smooth_protos(rng), nc, rng=rng), meta
    if layout == "rknn-pose":
        return encode_rknn_pose(items, nc, rng=rng), meta
    if layout == "rknn-obb":
        return encode_rknn_obb(items, nc, rng=rng), meta
    if layout == "rknn-yolov5":
        return encode_yolov5(items, nc, rng=rng), meta
    if layout == "end2end":
        # An NMS-free head: one row per object (the centre of each 3 x 3 patch), the rest weak.
        centres = [items[i * 9 + 4] for i in range(objects)]
        weak = [SynthObject(o.box, o.class_id, float(rng.uniform(0, 0.1))) for o in items[: 300 - objects]]
        return encode_end2end([*centres, *weak]), {**meta, "end2end": True}
    table = encode_ultralytics(items, nc, task=task, rng=rng)
    return ([*table, smooth_protos(rng)[None]] if task == "segment" else table), meta


def smooth_protos(rng: np.random.Generator, masks: int = 32, size: int = 160) -> FloatArray:
    """Protos like a model's: smooth blobs (noise upsampled 8x), mean 0."""
    coarse = rng.normal(0, 1, size=(masks, size // 8, size // 8)).astype(np.float32)
    return np.ascontiguousarray(np.repeat(np.repeat(coarse, 8, axis=1), 8, axis=2))


def realistic_frame(
    rng: np.random.Generator,
    objects: int = 20,
    num_classes: int = 80,
    input_size: int = 640,
    with_score_sum: bool = True,
) -> list[npt.NDArray[np.float32]]:
    """An 80-class rknn-9/6 frame like a real one: faint noise everywhere plus `realistic_objects`."""
    items = realistic_objects(rng, objects, num_classes, input_size)
    # Neighbouring boxes can land on the same anchor; the last one written wins, like a model's
    # single prediction per anchor.
    return encode_rknn(items, num_classes, input_size, with_score_sum=with_score_sum, rng=rng)
