"""Turning YOLO outputs (float or int8/uint8) into `Detections`, for every layout `layouts` plans.

`make_decoder` is the one factory: shapes (+ metadata) -> a `Decoder` whose call turns one
frame's raw outputs into detections in source-image pixels; `YoloDecoder` (what the SDK and CLI
use) makes one per set of output shapes it sees. Thresholds are ``conf`` and ``iou`` everywhere.
They are applied before anything per anchor is computed (in the quantised domain for integer
outputs), box/keypoint/angle/mask work is done only for the survivors, masks only for the boxes
NMS kept. Nothing above the threshold gives an empty `Detections` with the task's fields.

Modules: `_quant` (raw tensors and their quantisation), `_candidates` (candidates before NMS),
`_dfl` (DFL heads split per stride), `_yolov5` (anchor-based heads), `_tables` (Ultralytics tables
and end-to-end rows), `_masks` (instance masks from protos), `_decoder` (`Decoder` of one layout
and `make_decoder`), `_yolo_decoder` (`YoloDecoder`, any layout, and `postprocess`).
"""

from __future__ import annotations

from ._decoder import Decoder, make_decoder
from ._dfl import dfl_distances
from ._masks import MaskResolution
from ._quant import Quant
from ._yolo_decoder import YoloDecoder, postprocess

__all__ = [
    "Decoder",
    "MaskResolution",
    "Quant",
    "YoloDecoder",
    "dfl_distances",
    "make_decoder",
    "postprocess",
]
