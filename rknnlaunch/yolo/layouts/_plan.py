"""What fitting a layout to output shapes gives: a `Plan` for the decoder, or a `Mismatch`.

A `Plan` holds a `Branch` per stride of a split head; a `Mismatch` says why the layout does not
fit."""

from __future__ import annotations

from dataclasses import dataclass

from ._catalog import Layout, Task
from ._hints import Hints

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


class Mismatch(Exception):
    """A layout does not fit; the message says why (collected into the final `ModelError`)."""


def check_nc(found: int, hints: Hints, what: str) -> None:
    if hints.num_classes is not None and hints.num_classes != found:
        raise Mismatch(f"{what} gives {found} classes but the metadata names {hints.num_classes}")
