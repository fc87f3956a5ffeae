"""YOLOv8 pre- and post-processing for RKNN and ONNX models: letterbox, decode, NMS, drawing.

Pure numpy; OpenCV (the `vision` extra) is imported only when an image is resized or drawn.
"""

from ._decode import (
    LAYOUTS,
    Layout,
    Quant,
    YoloDecoder,
    class_count,
    detect_layout,
    dfl_distances,
    postprocess,
)
from ._draw import COCO_NAMES, class_name, draw_detections
from ._image import read_image
from ._letterbox import PAD_RKNN_MODEL_ZOO, PAD_ULTRALYTICS, Letterboxer, geometry, letterbox
from ._nms import iou_matrix, nms
from ._types import Detections, LetterboxInfo

__all__ = [
    "COCO_NAMES",
    "LAYOUTS",
    "PAD_RKNN_MODEL_ZOO",
    "PAD_ULTRALYTICS",
    "Detections",
    "Layout",
    "LetterboxInfo",
    "Letterboxer",
    "Quant",
    "YoloDecoder",
    "class_count",
    "class_name",
    "detect_layout",
    "dfl_distances",
    "draw_detections",
    "geometry",
    "iou_matrix",
    "letterbox",
    "nms",
    "postprocess",
    "read_image",
]
