"""Drawing results of every task onto an image (OpenCV, imported on use) and the COCO class names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._image import opencv
from ._types import Detections

COCO_NAMES: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
    "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant",
    "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip
"""The 80 COCO classes in the order YOLOv8's COCO models predict them."""

COCO_SKELETON: tuple[tuple[int, int], ...] = (
    (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8),
    (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6),
)  # fmt: skip
"""Limbs between COCO's 17 keypoints (nose, eyes, ears, shoulders, elbows, wrists, hips, knees,
ankles; left before right)."""

KEYPOINT_MIN_VISIBILITY = 0.5


def class_name(class_id: int, names: Sequence[str] | None) -> str:
    if names is not None and 0 <= class_id < len(names):
        return names[class_id]
    return f"class {class_id}"


def _colour(class_id: int) -> tuple[int, int, int]:
    # A fixed, well-spread hue per class (golden-ratio steps), as BGR.
    hue = (class_id * 0.618033988749895) % 1.0
    sector, frac = divmod(hue * 6.0, 1.0)
    up, down = int(255 * frac), int(255 * (1 - frac))
    rgb = [(255, up, 0), (down, 255, 0), (0, 255, up), (0, down, 255), (up, 0, 255), (255, 0, down)]
    red, green, blue = rgb[int(sector) % 6]
    return blue, green, red


def draw_detections(
    image: npt.NDArray[np.uint8],
    detections: Detections,
    names: Sequence[str] | None = None,
    mask_alpha: float = 0.45,
) -> npt.NDArray[np.uint8]:
    """A copy of the BGR ``image`` with each detection drawn: box (rotated for OBB), "name score"
    label, mask overlay (segment) and keypoints with the COCO skeleton (pose, 17 keypoints).

    ``names`` default to the detections' own (from the model's metadata).
    """
    cv2 = opencv()
    names = names if names is not None else detections.names
    canvas = np.ascontiguousarray(image).copy()
    thickness = max(1, round(min(canvas.shape[:2]) / 400))
    if detections.masks is not None and len(detections):
        _draw_masks(cv2, canvas, detections, mask_alpha)
    corners = detections.corners() if detections.angles is not None else None
    for index, (box, score, class_id) in enumerate(
        zip(detections.boxes, detections.scores, detections.class_ids, strict=True)
    ):
        x1, y1, x2, y2 = (round(float(v)) for v in box)
        colour = _colour(int(class_id))
        if corners is not None:
            polygon = np.round(corners[index]).astype(np.int32).reshape(-1, 1, 2)
            cv2.polylines(canvas, [polygon], True, colour, thickness)
            x1, y1 = (int(v) for v in polygon[:, 0, :].min(axis=0))
        else:
            cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, thickness)
        if detections.keypoints is not None:
            _draw_keypoints(cv2, canvas, detections.keypoints[index], colour, thickness)
        label = f"{class_name(int(class_id), names)} {float(score):.2f}"
        (tw, th), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
        top = max(y1 - th - base - 2, 0)
        cv2.rectangle(canvas, (x1, top), (x1 + tw + 2, top + th + base + 2), colour, -1)
        cv2.putText(canvas, label, (x1 + 1, top + th + 1), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1)
    return canvas


def image_masks(detections: Detections, width: int, height: int) -> npt.NDArray[np.bool_]:
    """The detections' masks as N x height x width (source image) masks, whatever their resolution."""
    masks = detections.masks
    if masks is None:
        return np.zeros((len(detections), height, width), bool)
    if masks.shape[1:] == (height, width):
        return masks
    cv2 = opencv()
    x1, y1, x2, y2 = detections.mask_region or (0.0, 0.0, float(masks.shape[2]), float(masks.shape[1]))
    c0, r0 = max(0, int(np.floor(x1))), max(0, int(np.floor(y1)))
    c1, r1 = min(masks.shape[2], int(np.ceil(x2))), min(masks.shape[1], int(np.ceil(y2)))
    out = np.zeros((len(masks), height, width), bool)
    for k in range(len(masks)):
        crop = masks[k, r0:r1, c0:c1].astype(np.uint8)
        if crop.size:
            out[k] = cv2.resize(crop, (width, height), interpolation=cv2.INTER_NEAREST) > 0
    return out


def _draw_masks(cv2: Any, canvas: npt.NDArray[np.uint8], detections: Detections, alpha: float) -> None:
    height, width = canvas.shape[:2]
    masks = image_masks(detections, width, height)
    for k in range(len(masks) - 1, -1, -1):  # highest score drawn last, on top
        colour = np.array(_colour(int(detections.class_ids[k])), np.float32)
        region = masks[k]
        if region.any():
            canvas[region] = (canvas[region] * (1 - alpha) + colour * alpha).astype(np.uint8)


def _draw_keypoints(
    cv2: Any,
    canvas: npt.NDArray[np.uint8],
    points: npt.NDArray[np.float32],
    colour: tuple[int, int, int],
    thickness: int,
) -> None:
    visible = points[:, 2] >= KEYPOINT_MIN_VISIBILITY
    if len(points) == 17:
        for a, b in COCO_SKELETON:
            if visible[a] and visible[b]:
                pa = (round(float(points[a, 0])), round(float(points[a, 1])))
                pb = (round(float(points[b, 0])), round(float(points[b, 1])))
                cv2.line(canvas, pa, pb, colour, thickness, cv2.LINE_AA)
    radius = max(2, thickness + 1)
    for x, y, _ in points[visible]:
        cv2.circle(canvas, (round(float(x)), round(float(y))), radius, (255, 255, 255), -1, cv2.LINE_AA)
        cv2.circle(canvas, (round(float(x)), round(float(y))), radius, colour, 1, cv2.LINE_AA)
