"""Rotated boxes: exact polygon IoU of rotated rectangles (vectorised over pairs) and OBB NMS."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ._nms import nms_with

FloatArray = npt.NDArray[np.float32]


def rbox_corners(rboxes: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """M x 5 (cx, cy, w, h, angle) -> M x 4 x 2 corners, in a consistent winding order."""
    r = np.asarray(rboxes, np.float64)
    cx, cy, w, h, a = (r[:, i : i + 1] for i in range(5))
    dx = np.concatenate([-w, w, w, -w], axis=1) / 2
    dy = np.concatenate([-h, -h, h, h], axis=1) / 2
    cos, sin = np.cos(a), np.sin(a)
    return np.stack([cx + dx * cos - dy * sin, cy + dx * sin + dy * cos], axis=2)


def _cross(
    ax: npt.NDArray[np.float64],
    ay: npt.NDArray[np.float64],
    bx: npt.NDArray[np.float64],
    by: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    return np.asarray(ax * by - ay * bx)


def _inside(points: npt.NDArray[np.float64], poly: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """M x P points inside (or on) the M convex quads ``poly`` (M x 4 x 2, consistent winding)."""
    start = poly[:, None, :, :]  # M x 1 x 4 x 2
    edge = np.roll(poly, -1, axis=1)[:, None, :, :] - start
    rel = points[:, :, None, :] - start
    cross = _cross(edge[..., 0], edge[..., 1], rel[..., 0], rel[..., 1])  # M x P x 4
    scale = np.abs(edge).sum(axis=-1) * 1e-9 + 1e-12
    return np.asarray((cross >= -scale).all(axis=2) | (cross <= scale).all(axis=2))


def _edge_crossings(
    a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The 16 edge-edge intersection points of quads a and b (M x 16 x 2) and which exist."""
    p = a[:, :, None, :]
    r = (np.roll(a, -1, axis=1) - a)[:, :, None, :]
    q = b[:, None, :, :]
    s = (np.roll(b, -1, axis=1) - b)[:, None, :, :]
    denom = _cross(r[..., 0], r[..., 1], s[..., 0], s[..., 1])
    qp = q - p
    with np.errstate(divide="ignore", invalid="ignore"):
        t = _cross(qp[..., 0], qp[..., 1], s[..., 0], s[..., 1]) / denom
        u = _cross(qp[..., 0], qp[..., 1], r[..., 0], r[..., 1]) / denom
    ok = (denom != 0) & (t >= 0) & (t <= 1) & (u >= 0) & (u <= 1)
    points = p + np.where(ok, t, 0.0)[..., None] * r
    return points.reshape(len(a), 16, 2), ok.reshape(len(a), 16)


def _polygon_area(points: npt.NDArray[np.float64], valid: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """Area of the convex hull of each row's valid points (they are a convex polygon's vertices)."""
    count = valid.sum(axis=1)
    weights = valid.astype(np.float64)
    centre = (points * weights[..., None]).sum(axis=1) / np.maximum(count, 1)[:, None]
    rel = points - centre[:, None, :]
    angle = np.where(valid, np.arctan2(rel[..., 1], rel[..., 0]), np.inf)
    order = np.argsort(angle, axis=1)
    ordered = np.take_along_axis(rel, order[..., None], axis=1)
    ordered_valid = np.take_along_axis(valid, order, axis=1)
    # Invalid slots (sorted last) repeat the first vertex: they add nothing to the shoelace sum.
    ordered = np.where(ordered_valid[..., None], ordered, ordered[:, :1, :])
    nxt = np.roll(ordered, -1, axis=1)
    area = 0.5 * np.abs(_cross(ordered[..., 0], ordered[..., 1], nxt[..., 0], nxt[..., 1]).sum(axis=1))
    return np.asarray(np.where(count >= 3, area, 0.0))


def rotated_iou_pairs(a: npt.NDArray[np.floating], b: npt.NDArray[np.floating]) -> FloatArray:
    """IoU of rotated box a[k] with b[k] for each k; boxes are (cx, cy, w, h, angle radians)."""
    if len(a) == 0:
        return np.zeros((0,), np.float32)
    ca, cb = rbox_corners(a), rbox_corners(b)
    crossings, crossing_ok = _edge_crossings(ca, cb)
    points = np.concatenate([ca, cb, crossings], axis=1)
    valid = np.concatenate([_inside(ca, cb), _inside(cb, ca), crossing_ok], axis=1)
    inter = _polygon_area(points, valid)
    area_a = np.abs(np.asarray(a, np.float64)[:, 2] * np.asarray(a, np.float64)[:, 3])
    area_b = np.abs(np.asarray(b, np.float64)[:, 2] * np.asarray(b, np.float64)[:, 3])
    union = area_a + area_b - inter
    return np.asarray(np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0), np.float32)


def nms_rotated(
    rboxes: FloatArray,
    scores: FloatArray,
    class_ids: npt.NDArray[np.int64],
    iou_threshold: float = 0.45,
    max_detections: int = 300,
) -> npt.NDArray[np.intp]:
    """Class-aware greedy NMS of rotated boxes (N x 5: cx, cy, w, h, angle) by exact polygon IoU."""
    return nms_with(rboxes, scores, class_ids, iou_threshold, max_detections, rotated_iou_pairs)
