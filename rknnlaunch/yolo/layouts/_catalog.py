"""The names of the YOLO output layouts and tasks we decode (`Layout`, `Task`).

The task of each layout, and reading a layout or task name a user or a model's metadata gives."""

from __future__ import annotations

from typing import Any, Literal, get_args

from ..._errors import UsageError

Layout = Literal[
    "rknn-9",
    "rknn-6",
    "rknn-yolov10",
    "rknn-yolov5",
    "rknn-seg",
    "rknn-pose",
    "rknn-obb",
    "ultralytics",
    "ultralytics-seg",
    "ultralytics-pose",
    "ultralytics-obb",
    "end2end",
    "end2end-seg",
    "end2end-pose",
    "end2end-obb",
]
"""Output layouts we decode (see docs/yolo.md). ``rknn-*``: rknn_model_zoo exports (split per
stride 8/16/32); ``ultralytics*``: Ultralytics' own ONNX exports (one ``[1, C, N]`` table);
``end2end*``: NMS-free ``[1, N, 6 + extras]`` heads (YOLOv10, YOLO26)."""

LAYOUTS: tuple[Layout, ...] = get_args(Layout)  # one list: the Literal above

Task = Literal["detect", "segment", "pose", "obb"]
TASKS: tuple[Task, ...] = get_args(Task)

TASK_OF: dict[Layout, Task] = {
    "rknn-9": "detect",
    "rknn-6": "detect",
    "rknn-yolov10": "detect",
    "rknn-yolov5": "detect",
    "rknn-seg": "segment",
    "rknn-pose": "pose",
    "rknn-obb": "obb",
    "ultralytics": "detect",
    "ultralytics-seg": "segment",
    "ultralytics-pose": "pose",
    "ultralytics-obb": "obb",
    "end2end": "detect",
    "end2end-seg": "segment",
    "end2end-pose": "pose",
    "end2end-obb": "obb",
}


def parse_task(value: Any, source: str = "task") -> Task:
    text = str(value).strip().lower()
    aliases = {"detection": "detect", "det": "detect", "seg": "segment", "segmentation": "segment"}
    text = aliases.get(text, text)
    if text not in TASKS:
        raise UsageError(f"unknown {source} {value!r}", f"use one of {', '.join(TASKS)}")
    return text


def parse_layout(value: Any, source: str = "layout") -> Layout:
    if value not in LAYOUTS:
        raise UsageError(f"unknown YOLO output {source} {value!r}", f"use one of {', '.join(LAYOUTS)}")
    return value  # type: ignore[no-any-return]
