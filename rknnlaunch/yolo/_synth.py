"""Synthetic YOLOv8 output tensors built from known boxes through the exact encodings.

Used by the tests (decode must give the boxes back) and the benchmarks (a realistic 80-class
frame without a model). The inverse of the decoders: DFL bins whose softmax expectation is the
wanted side distance, anchors at grid cell centres, strides 8/16/32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._decode import Quant

STRIDES = (8, 16, 32)


@dataclass(frozen=True)
class SynthObject:
    """One object to encode: xyxy box in input pixels, class, score (already sigmoid)."""

    box: tuple[float, float, float, float]
    class_id: int
    score: float


@dataclass(frozen=True)
class _Placed:
    obj: SynthObject
    stride_index: int
    anchor: int  # flat index into that stride's H x W grid


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


def place(objects: Sequence[SynthObject], input_size: int = 640, bins: int = 16) -> list[_Placed]:
    """Put each object on the anchor of the smallest stride whose bins can reach all four sides."""
    placed = []
    for obj in objects:
        x1, y1, x2, y2 = obj.box
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        for index, stride in enumerate(STRIDES):
            grid = input_size // stride
            gx, gy = min(int(cx // stride), grid - 1), min(int(cy // stride), grid - 1)
            ax, ay = (gx + 0.5) * stride, (gy + 0.5) * stride
            sides = ((ax - x1) / stride, (ay - y1) / stride, (x2 - ax) / stride, (y2 - ay) / stride)
            if all(0.0 <= s <= bins - 1 for s in sides):
                placed.append(_Placed(obj, index, gy * grid + gx))
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
    outputs: list[npt.NDArray[np.float32]] = []
    placed = place(objects, input_size, bins)
    for index, stride in enumerate(STRIDES):
        grid = input_size // stride
        box = np.zeros((1, 4 * bins, grid, grid), np.float32)
        if rng is not None:
            box += rng.normal(0.0, 1.0, size=box.shape).astype(np.float32)
        scores = _background(rng, (1, num_classes, grid, grid), background_logit)
        box2d = box.reshape(4, bins, grid * grid)
        scores2d = scores.reshape(num_classes, grid * grid)
        for item in (p for p in placed if p.stride_index == index):
            x1, y1, x2, y2 = item.obj.box
            ax = (item.anchor % grid + 0.5) * stride
            ay = (item.anchor // grid + 0.5) * stride
            sides = ((ax - x1) / stride, (ay - y1) / stride, (x2 - ax) / stride, (y2 - ay) / stride)
            for side, distance in enumerate(sides):
                box2d[side, :, item.anchor] = dfl_logits(distance, bins)
            scores2d[item.obj.class_id, item.anchor] = item.obj.score
        outputs += [box, scores]
        if with_score_sum:
            outputs.append(np.clip(scores.sum(axis=1, keepdims=True), 0.0, 1.0).astype(np.float32))
    return outputs


def encode_ultralytics(
    objects: Sequence[SynthObject], num_classes: int = 80, input_size: int = 640, bins: int = 16
) -> list[npt.NDArray[np.float32]]:
    """Ultralytics' single [1, 4 + nc, N] output with the same anchors as `encode_rknn`."""
    sizes = [(input_size // s) ** 2 for s in STRIDES]
    offsets = np.cumsum([0, *sizes])
    table = np.zeros((4 + num_classes, int(offsets[-1])), np.float32)
    for item in place(objects, input_size, bins):
        x1, y1, x2, y2 = item.obj.box
        column = int(offsets[item.stride_index]) + item.anchor
        table[:4, column] = ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1)
        table[4 + item.obj.class_id, column] = item.obj.score
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


def realistic_frame(
    rng: np.random.Generator,
    objects: int = 20,
    num_classes: int = 80,
    input_size: int = 640,
    with_score_sum: bool = True,
) -> list[npt.NDArray[np.float32]]:
    """An 80-class frame like a real one: faint noise everywhere, ``objects`` objects each seen by a
    3 x 3 patch of neighbouring anchors with jittered boxes and scores (what NMS is for)."""
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
    # Neighbouring boxes can land on the same anchor; the last one written wins, like a model's
    # single prediction per anchor.
    return encode_rknn(items, num_classes, input_size, with_score_sum=with_score_sum, rng=rng)
