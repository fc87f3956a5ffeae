"""YOLO pre- and post-processing for RKNN and ONNX models: letterbox, decode, NMS, drawing.

Every YOLO family layout people deploy on Rockchip NPUs (docs/yolo.md): YOLOv8/YOLO11 detection
(rknn_model_zoo 9/6 outputs, Ultralytics single output), YOLOv5 (zoo anchors) and YOLOv5u,
YOLOv10 (zoo) and end-to-end ``[1, N, 6]`` heads (YOLOv10/YOLO26), segmentation, pose and OBB.

The one factory::

    decoder = make_decoder(output_shapes, metadata=None, *, layout=None, task=None,
                           conf=0.25, iou=0.45, max_detections=300, quant=None,
                           anchors=None, masks="proto")
    result = decoder(outputs, letterbox_info)  # -> Detections (boxes, scores, class_ids,
                                               #    + masks / keypoints / angles by task)

``output_shapes`` are the model's output shapes, ``metadata`` its metadata mapping (optional
keys ``task``, ``names``, ``imgsz``, ``stride``, ``layout``, ``kpt_shape``, ``anchors``,
``end2end``). Malformed outputs raise `ModelError` (exit 1) naming the tensor, its shape and what
was expected; ``decoder.note`` says when other layouts fit the same shapes. `YoloDecoder(conf, iou,
...)` detects the layout on each call and decodes with the `make_decoder` decoder for those shapes:
what `Detector` and the CLI use. `postprocess` is a one-shot `YoloDecoder`. Thresholds are ``conf``
and ``iou`` everywhere (``conf_threshold``/``iou_threshold`` are deprecated spellings).
`rknnlaunch.yolo.testing` (test encoders: outputs for known objects) is a testing aid, not API.

Pure numpy; OpenCV (the `vision` extra) is imported only when an image is resized or drawn.

Where things live: `layouts` (how each output layout is recognised: shapes + metadata -> `Plan`),
`decode` (running a plan: outputs -> `Detections`, `make_decoder`, `YoloDecoder`), and at the top
`_types` (`Detections`, `LetterboxInfo`), `_letterbox`, `_image` (image files), `_nms`,
`_rotated` (rotated IoU, OBB NMS), `_draw`; `testing` (test encoders) is above them all.
"""

from ._draw import COCO_NAMES, COCO_SKELETON, class_name, draw_detections, image_masks
from ._image import (
    FORMATS,
    MAX_IMAGE_PIXELS,
    ImageHeader,
    check_image,
    check_image_writable,
    image_header,
    opencv,
    read_image,
    write_image,
)
from ._letterbox import PAD_RKNN_MODEL_ZOO, PAD_ULTRALYTICS, Letterboxer, geometry, letterbox
from ._nms import iou_matrix, nms
from ._rotated import nms_rotated, rotated_iou_pairs
from ._types import Detections, LetterboxInfo, mask_rle, rle_decode
from .decode import Decoder, MaskResolution, Quant, YoloDecoder, dfl_distances, make_decoder, postprocess
from .layouts import (
    LAYOUTS,
    TASKS,
    YOLOV5_ANCHORS,
    Layout,
    Plan,
    Task,
    class_count,
    class_names,
    detect_layout,
    parse_anchors,
    plan_layout,
)

__all__ = [
    "Plan",
    "plan_layout",
    "COCO_NAMES",
    "COCO_SKELETON",
    "Decoder",
    "Detections",
    "LAYOUTS",
    "Layout",
    "LetterboxInfo",
    "Letterboxer",
    "MaskResolution",
    "PAD_RKNN_MODEL_ZOO",
    "PAD_ULTRALYTICS",
    "Quant",
    "TASKS",
    "Task",
    "YOLOV5_ANCHORS",
    "YoloDecoder",
    "FORMATS",
    "ImageHeader",
    "MAX_IMAGE_PIXELS",
    "check_image",
    "check_image_writable",
    "image_header",
    "class_count",
    "class_name",
    "class_names",
    "detect_layout",
    "dfl_distances",
    "draw_detections",
    "geometry",
    "image_masks",
    "iou_matrix",
    "letterbox",
    "make_decoder",
    "mask_rle",
    "nms",
    "nms_rotated",
    "opencv",
    "parse_anchors",
    "postprocess",
    "read_image",
    "rle_decode",
    "rotated_iou_pairs",
    "write_image",
]
