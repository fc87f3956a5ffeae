"""`validate` I/O: the ONNX reference on the CPU, the device under test (RKNNLite on the NPU, or the
toolkit's simulator right after `convert`), labels beside the images, the report, JSON and plot."""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from .._errors import BackendUnavailableError, ModelError, UsageError
from .._version import __version__
from ._compare import (
    CAUSES,
    Found,
    ImageComparison,
    Totals,
    compare_image,
    likely_cause,
    map50,
    parse_yolo_labels,
    relative_error,
    totals,
)
from ._images import decode_all

SCHEMA = "rknnlaunch.validate/1"
DEFAULT_MIN_AGREEMENT = 0.5
"""Without --min-agreement, exit 1 only below this (a model that broke, not one that drifted)."""

Device = Callable[[npt.NDArray[np.uint8]], Sequence[npt.NDArray[Any]]]
"""Runs one letterboxed NHWC uint8 RGB frame [1, H, W, 3]; returns the raw float outputs."""


@dataclass
class ValidateReport:
    """Everything `validate` measured."""

    model: str
    reference: str
    device: str
    settings: dict[str, Any]
    images: list[ImageComparison]
    total: Totals
    output_names: list[str]
    class_names: list[str]
    map50_reference: float | None = None
    map50_device: float | None = None
    likely_cause: str | None = None
    cause_errors: dict[str, float | None] = field(default_factory=dict)
    """Relative error of the device's outputs against the reference fed each hypothesis's input."""
    model_warnings: list[str] = field(default_factory=list)
    """What `read_rknn(model).warnings()` says (e.g. a plain-int8 Ultralytics table head)."""

    def exit_code(self, min_agreement: float | None) -> int:
        threshold = DEFAULT_MIN_AGREEMENT if min_agreement is None else min_agreement
        return 0 if self.total.agreement >= threshold else 1

    def class_name(self, cls: int) -> str:
        return self.class_names[cls] if 0 <= cls < len(self.class_names) else f"class {cls}"

    def as_dict(self, min_agreement: float | None = None) -> dict[str, Any]:
        t = self.total
        return {
            "schema": SCHEMA,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "rknnlaunch_version": __version__,
            "model": self.model,
            "reference": self.reference,
            "device": self.device,
            "settings": self.settings,
            "min_agreement": DEFAULT_MIN_AGREEMENT if min_agreement is None else min_agreement,
            "passed": self.exit_code(min_agreement) == 0,
            "total": {
                "images": t.images,
                "reference_detections": t.reference_count,
                "device_detections": t.device_count,
                "matched": t.matched,
                "union": t.reference_count + t.device_count - t.matched,
                "agreement": t.agreement,
                "mean_iou": t.mean_iou,
                "mean_score_drift": t.mean_score_drift,
                "mean_abs_score_drift": t.mean_abs_score_drift,
                "recall_per_class": {self.class_name(c): r for c, r in t.recall_per_class.items()},
                "outputs": [
                    {"name": name, "cosine_mean": mean, "cosine_min": low}
                    for name, mean, low in zip(self.output_names, t.cosine_mean, t.cosine_min, strict=False)
                ],
                "map50_reference": self.map50_reference,
                "map50_device": self.map50_device,
            },
            "likely_cause": self.likely_cause,
            "likely_cause_text": CAUSES.get(self.likely_cause or ""),
            "cause_errors": self.cause_errors,
            "model_warnings": self.model_warnings,
            "images": [
                {
                    "image": i.image,
                    "reference_detections": i.reference_count,
                    "device_detections": i.device_count,
                    "matched": i.matched,
                    "union": i.union,
                    "agreement": i.agreement,
                    "mean_iou": float(np.mean(i.ious)) if i.ious else None,
                    "mean_score_drift": float(np.mean(i.score_drifts)) if i.score_drifts else None,
                    "cosine": list(i.cosine),
                }
                for i in self.images
            ],
        }


class OnnxReference:
    """The ONNX model on the CPU (onnxruntime): NCHW float (x - mean) / std from the same frame.

    ``mean``/``std`` are what the ONNX expects (Ultralytics: 0 and 255, i.e. RGB / 255), never the
    values a model was converted with: those are what `validate` checks.
    """

    def __init__(self, path: Path, mean: Sequence[float], std: Sequence[float]) -> None:
        try:
            import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]
        except ImportError:
            raise BackendUnavailableError(
                "onnxruntime is needed for the reference run", "pip install 'rknnlaunch[cpu]'"
            ) from None
        if not path.is_file():
            raise UsageError(
                f"--reference {path} does not exist", "pass the .onnx the model was converted from"
            )
        options = ort.SessionOptions()
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelError(f"onnxruntime cannot load {path}: {exc}", "pass a valid ONNX model") from None
        self.input = self.session.get_inputs()[0].name
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.mean = np.asarray(mean, np.float32).reshape(1, 3, 1, 1)
        self.std = np.asarray(std, np.float32).reshape(1, 3, 1, 1)

    def run_nchw(self, nchw: npt.NDArray[np.float32]) -> list[npt.NDArray[Any]]:
        return [np.asarray(o) for o in self.session.run(None, {self.input: nchw.astype(np.float32)})]

    def __call__(self, nhwc: npt.NDArray[np.uint8]) -> list[npt.NDArray[Any]]:
        nchw = nhwc.transpose(0, 3, 1, 2).astype(np.float32)
        return self.run_nchw((nchw - self.mean) / self.std)

    def mistaken(self, nhwc: npt.NDArray[np.uint8], cause: str) -> list[npt.NDArray[Any]]:
        """What a model built with the mistake ``cause`` (a key of `CAUSES`) computes on ``nhwc``."""
        nchw = nhwc.transpose(0, 3, 1, 2).astype(np.float32)
        if cause == "scale":  # std 1: the network sees 0-255 where it was trained on 0-1
            return self.run_nchw(nchw - self.mean)
        if cause == "mean":  # ImageNet-style mean subtracted on top of /255
            return self.run_nchw((nchw - np.float32(128.0)) / self.std)
        if cause == "bgr":
            return self.run_nchw((nchw[:, ::-1] - self.mean) / self.std)
        if cause == "layout":  # the NHWC bytes read as NCHW
            n, h, w, c = nhwc.shape
            return self.run_nchw((nhwc.reshape(n, c, h, w).astype(np.float32) - self.mean) / self.std)
        return self(nhwc)


def compare_with_reference(
    *,
    reference: Path,
    device: Device,
    device_label: str,
    images: Sequence[Path],
    pad_value: int,
    input_size: tuple[int, int],
    layout: str | None,
    model: Path,
    class_names: Sequence[str] = (),
    mean: Sequence[float] = (0.0, 0.0, 0.0),
    std: Sequence[float] = (255.0, 255.0, 255.0),
    conf_threshold: float = 0.25,
    iou_threshold: float = 0.45,
    progress: Callable[[str], None] | None = None,
) -> ValidateReport:
    """Run every image through the reference and the device and compare (see `ValidateReport`)."""
    from ..yolo import Letterboxer, YoloDecoder

    frames = decode_all(images, "--images")
    onnx = OnnxReference(reference, mean, std)
    boxer = Letterboxer(input_size, pad_value=pad_value)
    decoder = YoloDecoder(conf_threshold, iou_threshold, layout=layout)  # type: ignore[arg-type]
    compared: list[ImageComparison] = []
    device_found: list[Found] = []
    reference_found: list[Found] = []
    labels: list[Found | None] = []
    worst: tuple[float, npt.NDArray[np.uint8], list[npt.NDArray[Any]]] | None = None
    for index, (path, frame) in enumerate(zip(images, frames, strict=True)):
        x, info = boxer(frame)
        x = x.copy()
        ref_out = onnx(x)
        dev_out = [np.asarray(o, np.float32) for o in device(x)]
        ref = _found(decoder(ref_out, info))
        dev = _found(decoder(dev_out, info))
        reference_found.append(ref)
        device_found.append(dev)
        labels.append(_labels_for(path, frame.shape[1], frame.shape[0]))
        comparison = compare_image(path.name, ref, dev, ref_out, dev_out)
        compared.append(comparison)
        first_cos = next((c for c in comparison.cosine if c is not None), 1.0)
        if worst is None or first_cos < worst[0]:
            worst = (first_cos, x, dev_out)
        if progress:
            progress(
                f"[{index + 1}/{len(images)}] {path.name}: {comparison.matched} of {comparison.union} "
                f"detections agree, cosine {', '.join(_fmt(c) for c in comparison.cosine)}"
            )
    total = totals(compared)
    report = ValidateReport(
        model=str(model),
        reference=str(reference),
        device=device_label,
        settings={
            "input_width": input_size[0],
            "input_height": input_size[1],
            "pad_value": pad_value,
            "layout": layout,
            "mean": list(mean),
            "std": list(std),
            "conf_threshold": conf_threshold,
            "iou_threshold": iou_threshold,
            "match_iou": 0.5,
        },
        images=compared,
        total=total,
        output_names=onnx.output_names,
        class_names=list(class_names),
    )
    if all(label is not None for label in labels) and labels:
        truth = [label for label in labels if label is not None]
        report.map50_reference, _ = map50(reference_found, truth)
        report.map50_device, _ = map50(device_found, truth)
    low_cosine = any(c is not None and c < 0.95 for c in total.cosine_min)
    if worst is not None and (total.agreement < 0.8 or low_cosine):
        _, x, dev_out = worst
        errors: dict[str, float | None] = {
            "correct": _first(relative_error(r, d) for r, d in zip(onnx(x), dev_out, strict=False))
        }
        for cause in CAUSES:
            errors[cause] = _first(
                relative_error(r, d) for r, d in zip(onnx.mistaken(x, cause), dev_out, strict=False)
            )
        report.cause_errors = errors
        report.likely_cause = likely_cause(errors)
    report.model_warnings = _model_warnings(model)
    return report


def _model_warnings(model: Path) -> list[str]:
    """The .rknn's own warnings (none for other files, or one we cannot read: validate goes on)."""
    from .._errors import RknnLaunchError
    from ..model import read_rknn

    if model.suffix.lower() != ".rknn" or not model.is_file():
        return []
    try:
        return [problem for problem, _fix in read_rknn(model).warnings()]
    except RknnLaunchError:
        return []


def _first(values: Any) -> float | None:
    for value in values:
        return value if value is None else float(value)
    return None


def _found(detections: Any) -> Found:
    return Found(detections.boxes, detections.scores, detections.class_ids)


def _labels_for(image: Path, width: int, height: int) -> Found | None:
    """YOLO labels in ``image``'s ``.txt`` twin, or in ``../labels/<name>.txt`` (the YOLO dataset layout)."""
    for candidate in (image.with_suffix(".txt"), image.parent.parent / "labels" / f"{image.stem}.txt"):
        if candidate.is_file():
            try:
                return parse_yolo_labels(candidate.read_text(), width, height, str(candidate))
            except (ValueError, UnicodeDecodeError) as exc:
                raise UsageError(
                    str(exc), "fix or remove the label file (YOLO format: class cx cy w h, 0-1)"
                ) from None
    return None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def print_report(report: ValidateReport, out: TextIO, min_agreement: float | None = None) -> None:
    t = report.total
    print(
        f"validate {report.model} on {report.device} against {report.reference} (CPU, onnxruntime)", file=out
    )
    for image in report.images:
        print(
            f"  {image.image}: {image.matched}/{image.union} agree (reference {image.reference_count}, "
            f"device {image.device_count})"
            + (f", mean IoU {np.mean(image.ious):.3f}" if image.ious else "")
            + f", cosine {', '.join(_fmt(c) for c in image.cosine)}",
            file=out,
        )
    union = t.reference_count + t.device_count - t.matched
    print(
        f"total: {t.matched} of {union} detections agree ({t.agreement:.3f}) over {t.images} images; "
        f"mean IoU {_fmt(t.mean_iou)}; score drift {_fmt(t.mean_score_drift)} "
        f"(mean |drift| {_fmt(t.mean_abs_score_drift)})",
        file=out,
    )
    for name, mean, low in zip(report.output_names, t.cosine_mean, t.cosine_min, strict=False):
        print(f"  output {name}: cosine mean {_fmt(mean)}, min {_fmt(low)}", file=out)
    for cls, recall in t.recall_per_class.items():
        print(f"  recall {report.class_name(cls)}: {recall:.3f}", file=out)
    if report.map50_reference is not None:
        print(
            f"  mAP50 vs labels: reference {_fmt(report.map50_reference)}, "
            f"device {_fmt(report.map50_device)}",
            file=out,
        )
    threshold = DEFAULT_MIN_AGREEMENT if min_agreement is None else min_agreement
    verdict = "PASS" if report.exit_code(min_agreement) == 0 else "FAIL"
    print(
        f"{verdict}: agreement {t.agreement:.3f} {'>=' if verdict == 'PASS' else '<'} {threshold}", file=out
    )
    table = next((w for w in report.model_warnings if "Ultralytics [1, 4+nc" in w), None)
    if verdict == "FAIL" and table is not None:
        # the model's own header explains a failure before any input hypothesis does
        print(
            f"likely cause: a plain-int8 Ultralytics table head ({table}): rebuild with "
            "`rknnlaunch convert MODEL.onnx --quant-images DIR` (the hybrid build keeps the head's tail "
            "in float16) or --fp16",
            file=out,
        )
    elif report.likely_cause:
        print(f"likely cause: {CAUSES[report.likely_cause]}", file=out)
    elif verdict == "FAIL":
        print(
            "likely cause: quantisation error (none of the input mistakes fits better): rebuild with more, "
            "more typical calibration images, or --fp16",
            file=out,
        )


def write_json(report: ValidateReport, path: Path, min_agreement: float | None = None) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(report.as_dict(min_agreement), indent=2) + "\n")
    os.replace(temp, path)


def write_plot(report: ValidateReport, path: Path) -> None:
    """Per-output cosine similarity (mean and min) and per-class recall, side by side."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib", "pip install 'rknnlaunch[bench]'") from None
    t = report.total
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    names = report.output_names[: len(t.cosine_mean)]
    xs = np.arange(len(names))
    left.bar(xs - 0.2, [v or 0.0 for v in t.cosine_mean], 0.4, label="mean")
    left.bar(xs + 0.2, [v or 0.0 for v in t.cosine_min], 0.4, label="min")
    left.set_xticks(xs, names, rotation=30, ha="right")
    left.set_ylim(min([0.9, *[v for v in t.cosine_min if v is not None]]), 1.0)
    left.set_title("raw output cosine similarity")
    left.legend()
    classes = list(t.recall_per_class)
    right.bar(range(len(classes)), [t.recall_per_class[c] for c in classes], color="tab:orange")
    right.set_xticks(range(len(classes)), [report.class_name(c) for c in classes], rotation=30, ha="right")
    right.set_ylim(0, 1.05)
    right.set_title(f"recall vs reference (agreement {t.agreement:.2f})")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
