"""Drawing detections onto an image (OpenCV, imported on use) and the COCO class names."""

from __future__ import annotations

from collections.abc import Sequence

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
    image: npt.NDArray[np.uint8], detections: Detections, names: Sequence[str] | None = None
) -> npt.NDArray[np.uint8]:
    """A copy of the BGR ``image`` with each detection's box and "name score" label drawn."""
    cv2 = opencv()
    canvas = np.ascontiguousarray(image).copy()
    thickness = max(1, round(min(canvas.shape[:2]) / 400))
    for box, score, class_id in zip(detections.boxes, detections.scores, detections.class_ids, strict=True):
        x1, y1, x2, y2 = (round(float(v)) for v in box)
        colour = _colour(int(class_id))
        cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, thickness)
        label = f"{class_name(int(class_id), names)} {float(score):.2f}"
        (tw, th), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
        top = max(y1 - th - base - 2, 0)
        cv2.rectangle(canvas, (x1, top), (x1 + tw + 2, top + th + base + 2), colour, -1)
        cv2.putText(canvas, label, (x1 + 1, top + th + 1), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1)
    return canvas
