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

from ._catalog import LAYOUTS, TASK_OF, TASKS, Layout, Task, parse_layout, parse_task
from ._choose import class_count, detect_layout, plan_layout
from ._hints import YOLOV5_ANCHORS, Hints, class_names, hints_from, parse_anchors
from ._plan import COCO_KEYPOINTS, Branch, Plan, Shape

__all__ = [
    "COCO_KEYPOINTS",
    "LAYOUTS",
    "TASKS",
    "TASK_OF",
    "YOLOV5_ANCHORS",
    "Branch",
    "Hints",
    "Layout",
    "Plan",
    "Shape",
    "Task",
    "class_count",
    "class_names",
    "detect_layout",
    "hints_from",
    "parse_anchors",
    "parse_layout",
    "parse_task",
    "plan_layout",
]
