"""YOLO output decoding for every layout in `_layouts` (float or int8/uint8), into `Detections`.

`make_decoder` is the one factory: shapes (+ metadata) -> a `Decoder` whose call turns one
frame's raw outputs into detections in source-image pixels; `YoloDecoder` (what the SDK and CLI
use) makes one per set of output shapes it sees. Thresholds are ``conf`` and ``iou`` everywhere.
They are applied before anything per anchor is computed (in the quantised domain for integer
outputs), box/keypoint/angle/mask work is done only for the survivors, masks only for the boxes
NMS kept. Nothing above the threshold gives an empty `Detections` with the task's fields.

This module is the front the package imports; each concept has its own module: `_quant` (raw
tensors and their quantisation), `_candidates` (candidates before NMS), `_dfl` (DFL heads split
per stride), `_yolov5` (anchor-based heads), `_tables` (Ultralytics tables and end-to-end rows),
`_decoder` (`Decoder` and `make_decoder`), `_yolodecoder` (`YoloDecoder` and `postprocess`).
"""

from __future__ import annotations

from ._catalog import LAYOUTS, Layout
from ._choose import class_count, detect_layout
from ._decoder import Decoder, make_decoder
from ._dfl import dfl_distances
from ._quant import Quant
from ._yolodecoder import YoloDecoder, postprocess

__all__ = [
    "LAYOUTS",
    "Decoder",
    "Layout",
    "Quant",
    "YoloDecoder",
    "class_count",
    "detect_layout",
    "dfl_distances",
    "make_decoder",
    "postprocess",
]
