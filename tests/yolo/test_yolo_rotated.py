"""Rotated-box IoU (exact polygon intersection) and rotated NMS."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rknnlaunch.yolo import nms, nms_rotated, rotated_iou_pairs
from rknnlaunch.yolo._nms import _pair_iou
from rknnlaunch.yolo._rotated import rbox_corners


def raster_iou(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], samples: int = 400) -> float:
    """IoU by counting sample points inside each rotated box (a slow, obviously-right reference)."""
    corners = np.concatenate([rbox_corners(a[None])[0], rbox_corners(b[None])[0]])
    low, high = corners.min(axis=0), corners.max(axis=0)
    xs = np.linspace(low[0], high[0], samples)
    ys = np.linspace(low[1], high[1], samples)
    gx, gy = np.meshgrid(xs, ys)

    def inside(box: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
        cx, cy, w, h, angle = box
        dx, dy = gx - cx, gy - cy
        u = dx * math.cos(angle) + dy * math.sin(angle)
        v = -dx * math.sin(angle) + dy * math.cos(angle)
        return np.asarray((np.abs(u) <= w / 2) & (np.abs(v) <= h / 2))

    ia, ib = inside(a), inside(b)
    union = (ia | ib).sum()
    return float((ia & ib).sum() / union) if union else 0.0


def test_rotated_iou_known_values() -> None:
    box = np.array([[100.0, 100.0, 40.0, 20.0, 0.3]])
    assert rotated_iou_pairs(box, box)[0] == pytest.approx(1.0, abs=1e-6)
    far = np.array([[300.0, 300.0, 40.0, 20.0, 0.3]])
    assert rotated_iou_pairs(box, far)[0] == 0.0
    square = np.array([[0.0, 0.0, 10.0, 10.0, 0.0]])
    turned = np.array([[0.0, 0.0, 10.0, 10.0, math.pi / 2]])
    assert rotated_iou_pairs(square, turned)[0] == pytest.approx(1.0, abs=1e-6)
    diamond = np.array([[0.0, 0.0, 10.0, 10.0, math.pi / 4]])  # octagon overlap: 2(sqrt2 - 1) x 100 ...
    inter = 100 * (2 * math.sqrt(2) - 2)  # area of the regular octagon square & rotated square share
    assert rotated_iou_pairs(square, diamond)[0] == pytest.approx(inter / (200 - inter), abs=1e-5)
    crossed = np.array([[0.0, 0.0, 120.0, 40.0, 0.0]]), np.array([[0.0, 0.0, 120.0, 40.0, math.pi / 2]])
    assert rotated_iou_pairs(*crossed)[0] == pytest.approx(1600 / 8000, abs=1e-6)
    degenerate = np.array([[0.0, 0.0, 0.0, 10.0, 0.2]])
    assert rotated_iou_pairs(degenerate, degenerate)[0] == 0.0


def test_axis_aligned_rotated_iou_equals_the_xyxy_iou() -> None:
    rng = np.random.default_rng(0)
    xyxy_a = np.sort(rng.uniform(0, 100, (200, 2, 2)), axis=1).reshape(200, 4)
    xyxy_b = np.sort(rng.uniform(0, 100, (200, 2, 2)), axis=1).reshape(200, 4)

    def rbox(xyxy: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        x1, y1, x2, y2 = xyxy.T
        return np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, np.zeros_like(x1)], axis=1)

    want = _pair_iou(xyxy_a.astype(np.float32), xyxy_b.astype(np.float32))
    np.testing.assert_allclose(rotated_iou_pairs(rbox(xyxy_a), rbox(xyxy_b)), want, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-1.0, 1.0), min_size=10, max_size=10),
)
def test_rotated_iou_matches_a_raster_estimate(values: list[float]) -> None:
    v = np.array(values)
    a = np.array([50 + 10 * v[0], 50 + 10 * v[1], 30 + 20 * abs(v[2]), 10 + 20 * abs(v[3]), math.pi * v[4]])
    b = np.array([50 + 10 * v[5], 50 + 10 * v[6], 30 + 20 * abs(v[7]), 10 + 20 * abs(v[8]), math.pi * v[9]])
    got = float(rotated_iou_pairs(a[None], b[None])[0])
    assert 0.0 <= got <= 1.0 + 1e-6
    assert got == pytest.approx(raster_iou(a, b), abs=0.02)
    assert got == pytest.approx(float(rotated_iou_pairs(b[None], a[None])[0]), abs=1e-6)


def test_rotated_nms_with_zero_angles_is_plain_nms() -> None:
    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 200, (60, 2))
    wh = rng.uniform(10, 60, (60, 2))
    boxes = np.concatenate([xy - wh / 2, xy + wh / 2], axis=1).astype(np.float32)
    rboxes = np.concatenate([xy, wh, np.zeros((60, 1))], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, 60).astype(np.float32)
    classes = rng.integers(0, 3, 60).astype(np.int64)
    np.testing.assert_array_equal(nms_rotated(rboxes, scores, classes, 0.3), nms(boxes, scores, classes, 0.3))
