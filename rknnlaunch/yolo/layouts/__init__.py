"""How each YOLO output layout is recognised: output shapes + metadata -> a validated `Plan`.

Each layout is documented in ``docs/yolo.md`` (shapes, encodings, how it is told apart). This
package owns recognising them and every `ModelError` about malformed output sets; the decoders in
`rknnlaunch.yolo.decode` only run plans made here, and nothing here imports them.

Modules: `_catalog` (layout and task names), `_hints` (what model metadata says, YOLOv5 anchors),
`_plan` (`Plan`, `Branch`, why a layout does not fit), `_rknn` (fitting the rknn_model_zoo split
layouts), `_tables` (fitting Ultralytics tables and end-to-end rows), `_choose` (`plan_layout`:
which layout fits).
"""

from __future__ import annotations

from ._catalog import LAYOUTS, TASKS, Layout, Task, parse_layout
from ._choose import class_count, detect_layout, plan_layout
from ._hints import YOLOV5_ANCHORS, class_names, parse_anchors
from ._plan import Plan

__all__ = [
    "LAYOUTS",
    "TASKS",
    "YOLOV5_ANCHORS",
    "Layout",
    "Plan",
    "Task",
    "class_count",
    "class_names",
    "detect_layout",
    "parse_anchors",
    "parse_layout",
    "plan_layout",
]
