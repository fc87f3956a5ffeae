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


def _max4(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Max over the last axis of length 4 (numpy's reductions over tiny axes are slow)."""
    out: npt.NDArray[np.float64] = np.maximum(
        np.maximum(a[..., 0], a[..., 1]), np.maximum(a[..., 2], a[..., 3])
    )
    return out


def _min4(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = np.minimum(
        np.minimum(a[..., 0], a[..., 1]), np.minimum(a[..., 2], a[..., 3])
    )
    return out


def _clipped_boundary(
    poly: npt.NDArray[np.float64], other: npt.NDArray[np.float64], keep_shared: bool
) -> npt.NDArray[np.float64]:
    """Twice the signed area contributed by the parts of ``poly``'s edges inside ``other``.

    Each edge p + t d (0 <= t <= 1) is clipped against the other quad's four half-planes
    (Cyrus-Beck); the kept piece adds cross(start, end) to the shoelace sum of the intersection's
    boundary. An edge lying on an edge of the other quad in the same direction is kept only from
    one side (``keep_shared``), so shared sides count once and touching sides not at all.
    Arrays are M x 4 (edges of poly) x 4 (half-planes of other), x and y kept apart.
    """
    px, py = poly[:, :, 0], poly[:, :, 1]
    dx, dy = np.roll(px, -1, axis=1) - px, np.roll(py, -1, axis=1) - py
    ox, oy = other[:, :, 0], other[:, :, 1]
    ex, ey = (np.roll(ox, -1, axis=1) - ox)[:, None, :], (np.roll(oy, -1, axis=1) - oy)[:, None, :]
    rx, ry = px[:, :, None] - ox[:, None, :], py[:, :, None] - oy[:, None, :]
    n0 = ex * ry - ey * rx  # >= 0: the edge's start is inside this half-plane
    n1 = ex * dy[:, :, None] - ey * dx[:, :, None]
    tol = (np.abs(ex) + np.abs(ey)) * (np.abs(dx) + np.abs(dy))[:, :, None] * 1e-9 + 1e-300
    tol = tol + (np.abs(ex) + np.abs(ey)) * (np.abs(rx) + np.abs(ry)) * 1e-9
    parallel = np.abs(n1) <= tol
    with np.errstate(divide="ignore", invalid="ignore"):
        t = -n0 / np.where(parallel, 1.0, n1)
    t0 = np.maximum(_max4(np.where(~parallel & (n1 > 0), t, 0.0)), 0.0)
    t1 = np.minimum(_min4(np.where(~parallel & (n1 < 0), t, 1.0)), 1.0)
    inside = n0 > tol
    if keep_shared:
        inside |= (np.abs(n0) <= tol) & ((dx[:, :, None] * ex + dy[:, :, None] * ey) > 0)
    allowed = ~parallel | inside
    ok = (t1 > t0) & allowed[..., 0] & allowed[..., 1] & allowed[..., 2] & allowed[..., 3]
    x0, y0 = px + t0 * dx, py + t0 * dy
    x1, y1 = px + t1 * dx, py + t1 * dy
    piece = np.where(ok, x0 * y1 - y0 * x1, 0.0)
    return np.asarray(piece[:, 0] + piece[:, 1] + piece[:, 2] + piece[:, 3])


def rotated_iou_pairs(a: npt.NDArray[np.floating], b: npt.NDArray[np.floating]) -> FloatArray:
    """IoU of rotated box a[k] with b[k] for each k; boxes are (cx, cy, w, h, angle radians)."""
    out = np.zeros((len(a),), np.float32)
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    # Only boxes whose circumscribed circles meet can intersect: the polygon work is for those.
    reach = (np.hypot(a64[:, 2], a64[:, 3]) + np.hypot(b64[:, 2], b64[:, 3])) / 2
    near = np.flatnonzero(np.hypot(a64[:, 0] - b64[:, 0], a64[:, 1] - b64[:, 1]) < reach)
    if near.size:
        out[near] = _polygon_iou(a64[near], b64[near])
    return out


def _polygon_iou(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> FloatArray:
    origin = a[:, None, :2]  # work relative to a's centre: smaller numbers, smaller errors
    ca, cb = rbox_corners(a) - origin, rbox_corners(b) - origin
    twice = _clipped_boundary(ca, cb, keep_shared=True) + _clipped_boundary(cb, ca, keep_shared=False)
    area_a = np.abs(a[:, 2] * a[:, 3])
    area_b = np.abs(b[:, 2] * b[:, 3])
    inter = np.clip(np.abs(twice) / 2, 0.0, np.minimum(area_a, area_b))
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
