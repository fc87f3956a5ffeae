"""The comparison maths of `validate`, pure: detection matching, agreement, score drift, per-class
recall, raw-tensor cosine similarity, mAP50 against labels, and which input mistake fits best."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Boxes = npt.NDArray[np.float32]
"""N x 4 xyxy."""

MATCH_IOU = 0.5


@dataclass(frozen=True)
class Found:
    """Detections of one image: boxes (N x 4 xyxy), scores (N), class ids (N)."""

    boxes: Boxes
    scores: npt.NDArray[np.float32]
    class_ids: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    @classmethod
    def of(cls, boxes: Sequence[Sequence[float]], scores: Sequence[float], class_ids: Sequence[int]) -> Found:
        return cls(
            np.asarray(boxes, np.float32).reshape(-1, 4),
            np.asarray(scores, np.float32).reshape(-1),
            np.asarray(class_ids, np.int64).reshape(-1),
        )


def pairwise_iou(a: Boxes, b: Boxes) -> npt.NDArray[np.float64]:
    """IoU of every box in ``a`` with every box in ``b`` (len(a) x len(b)); empty boxes give 0."""
    a64 = np.asarray(a, np.float64).reshape(-1, 4)
    b64 = np.asarray(b, np.float64).reshape(-1, 4)
    x1 = np.maximum(a64[:, None, 0], b64[None, :, 0])
    y1 = np.maximum(a64[:, None, 1], b64[None, :, 1])
    x2 = np.minimum(a64[:, None, 2], b64[None, :, 2])
    y2 = np.minimum(a64[:, None, 3], b64[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = np.clip(a64[:, 2] - a64[:, 0], 0, None) * np.clip(a64[:, 3] - a64[:, 1], 0, None)
    area_b = np.clip(b64[:, 2] - b64[:, 0], 0, None) * np.clip(b64[:, 3] - b64[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    result: npt.NDArray[np.float64] = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    return result


def match(reference: Found, device: Found, threshold: float = MATCH_IOU) -> list[tuple[int, int, float]]:
    """One-to-one matches (reference index, device index, IoU): same class, IoU >= ``threshold``,
    greedily by highest IoU first (ties: lower indices first, i.e. higher scores)."""
    if not len(reference) or not len(device):
        return []
    iou = pairwise_iou(reference.boxes, device.boxes)
    iou[reference.class_ids[:, None] != device.class_ids[None, :]] = -1.0
    pairs = [(float(iou[i, j]), i, j) for i, j in zip(*np.nonzero(iou >= threshold), strict=True)]
    pairs.sort(key=lambda p: (-p[0], p[1], p[2]))
    used_ref: set[int] = set()
    used_dev: set[int] = set()
    matches = []
    for value, i, j in pairs:
        if i in used_ref or j in used_dev:
            continue
        used_ref.add(i)
        used_dev.add(j)
        matches.append((int(i), int(j), value))
    return sorted(matches)


@dataclass(frozen=True)
class ImageComparison:
    """One image: reference (ONNX on the CPU) against the device under test (.rknn)."""

    image: str
    reference_count: int
    device_count: int
    matched: int
    ious: tuple[float, ...]
    score_drifts: tuple[float, ...]
    """device score - reference score, per match."""
    reference_per_class: Mapping[int, int]
    matched_per_class: Mapping[int, int]
    cosine: tuple[float | None, ...]
    """Per output: cosine similarity of the raw tensors (None when shapes differ in size)."""

    @property
    def union(self) -> int:
        return self.reference_count + self.device_count - self.matched

    @property
    def agreement(self) -> float:
        """Matched over the union of both sets; 1.0 when neither found anything."""
        return self.matched / self.union if self.union else 1.0


def compare_image(
    image: str,
    reference: Found,
    device: Found,
    reference_outputs: Sequence[npt.NDArray[np.generic]],
    device_outputs: Sequence[npt.NDArray[np.generic]],
) -> ImageComparison:
    matches = match(reference, device)
    ref_classes = [int(c) for c in reference.class_ids]
    matched_classes = [ref_classes[i] for i, _, _ in matches]
    return ImageComparison(
        image=image,
        reference_count=len(reference),
        device_count=len(device),
        matched=len(matches),
        ious=tuple(iou for _, _, iou in matches),
        score_drifts=tuple(float(device.scores[j] - reference.scores[i]) for i, j, _ in matches),
        reference_per_class={c: ref_classes.count(c) for c in sorted(set(ref_classes))},
        matched_per_class={c: matched_classes.count(c) for c in sorted(set(matched_classes))},
        cosine=tuple(cosine(r, d) for r, d in zip(reference_outputs, device_outputs, strict=False)),
    )


def cosine(a: npt.NDArray[np.generic], b: npt.NDArray[np.generic]) -> float | None:
    """Cosine similarity of two tensors (flattened, float64); None when their sizes differ; 1.0 for
    two all-zero tensors, 0.0 when only one is all zero."""
    x = np.asarray(a, np.float64).ravel()
    y = np.asarray(b, np.float64).ravel()
    if x.size != y.size:
        return None
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if nx == 0.0 or ny == 0.0:
        return 1.0 if nx == ny else 0.0
    return float(np.clip(np.dot(x, y) / (nx * ny), -1.0, 1.0))


@dataclass(frozen=True)
class Totals:
    """All images together."""

    images: int
    reference_count: int
    device_count: int
    matched: int
    agreement: float
    mean_iou: float | None
    mean_score_drift: float | None
    mean_abs_score_drift: float | None
    recall_per_class: Mapping[int, float]
    """Matched / reference detections per class the reference found."""
    cosine_mean: tuple[float | None, ...]
    cosine_min: tuple[float | None, ...]


def totals(images: Sequence[ImageComparison]) -> Totals:
    reference = sum(i.reference_count for i in images)
    device = sum(i.device_count for i in images)
    matched = sum(i.matched for i in images)
    union = reference + device - matched
    ious = [v for i in images for v in i.ious]
    drifts = [v for i in images for v in i.score_drifts]
    ref_class: dict[int, int] = {}
    hit_class: dict[int, int] = {}
    for image in images:
        for c, n in image.reference_per_class.items():
            ref_class[c] = ref_class.get(c, 0) + n
        for c, n in image.matched_per_class.items():
            hit_class[c] = hit_class.get(c, 0) + n
    outputs = max((len(i.cosine) for i in images), default=0)
    per_output = [
        [i.cosine[k] for i in images if k < len(i.cosine) and i.cosine[k] is not None] for k in range(outputs)
    ]
    return Totals(
        images=len(images),
        reference_count=reference,
        device_count=device,
        matched=matched,
        agreement=matched / union if union else 1.0,
        mean_iou=float(np.mean(ious)) if ious else None,
        mean_score_drift=float(np.mean(drifts)) if drifts else None,
        mean_abs_score_drift=float(np.mean(np.abs(drifts))) if drifts else None,
        recall_per_class={c: hit_class.get(c, 0) / n for c, n in sorted(ref_class.items())},
        cosine_mean=tuple(float(np.mean(v)) if v else None for v in per_output),  # type: ignore[arg-type]
        cosine_min=tuple(float(np.min(v)) if v else None for v in per_output),  # type: ignore[arg-type]
    )


# --- mAP50 against ground-truth labels ----------------------------------------------------------


def parse_yolo_labels(text: str, width: int, height: int, source: str = "labels") -> Found:
    """A YOLO ``.txt`` label file (``class cx cy w h`` per line, normalised 0-1) as pixel boxes.

    Raises ValueError naming ``source`` and the line for anything else (the caller makes it a
    `UsageError`). Scores are 1.
    """
    boxes: list[list[float]] = []
    classes: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            if len(fields) != 5:
                raise ValueError
            cls = int(fields[0])
            cx, cy, w, h = (float(v) for v in fields[1:])
        except ValueError:
            raise ValueError(
                f"{source}:{number}: expected 'class cx cy w h', got {line.strip()[:80]!r}"
            ) from None
        if cls < 0 or not all(0.0 <= v <= 1.0 for v in (cx, cy, w, h)):
            raise ValueError(f"{source}:{number}: class must be >= 0 and coordinates in 0..1")
        boxes.append(
            [(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height]
        )
        classes.append(cls)
    return Found.of(boxes, [1.0] * len(classes), classes)


def average_precision(recall: npt.NDArray[np.float64], precision: npt.NDArray[np.float64]) -> float:
    """Area under the precision envelope (all-point interpolation, as VOC 2010+ and COCO-style AP50)."""
    r = np.concatenate(([0.0], recall, [1.0]))
    p = np.concatenate(([1.0], precision, [0.0]))
    p = np.maximum.accumulate(p[::-1])[::-1]
    steps = np.nonzero(r[1:] != r[:-1])[0]
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))


def map50(predictions: Sequence[Found], labels: Sequence[Found]) -> tuple[float | None, dict[int, float]]:
    """mAP at IoU 0.5 over the classes that have labels, and AP50 per class."""
    per_class: dict[int, float] = {}
    classes = sorted({int(c) for found in labels for c in found.class_ids})
    for cls in classes:
        scored: list[tuple[float, bool]] = []
        positives = 0
        for predicted, truth in zip(predictions, labels, strict=True):
            truth_boxes = truth.boxes[truth.class_ids == cls]
            positives += len(truth_boxes)
            mine = predicted.class_ids == cls
            boxes, scores = predicted.boxes[mine], predicted.scores[mine]
            taken = np.zeros(len(truth_boxes), bool)
            ious = pairwise_iou(boxes, truth_boxes)
            for k in np.argsort(-scores, kind="stable"):
                hit = False
                if len(truth_boxes):
                    candidates = np.where(taken, -1.0, ious[k])
                    best = int(np.argmax(candidates))
                    if candidates[best] >= MATCH_IOU:
                        taken[best] = hit = True
                scored.append((float(scores[k]), hit))
        scored.sort(key=lambda s: -s[0])
        hits = np.array([h for _, h in scored], bool)
        tp = np.cumsum(hits)
        fp = np.cumsum(~hits)
        recall = tp / positives if positives else np.zeros(len(hits))
        precision = tp / np.maximum(tp + fp, 1)
        per_class[cls] = average_precision(recall.astype(np.float64), precision.astype(np.float64))
    return (float(np.mean(list(per_class.values()))) if per_class else None), per_class


# --- what went wrong --------------------------------------------------------------------------

CAUSES = {
    "scale": "the model does not divide by 255: it was built with the wrong std "
    "(convert uses --std 255,255,255 for 0-255 RGB input; rebuild without overriding it)",
    "mean": "the model subtracts a mean the ONNX does not: rebuild with --mean 0,0,0",
    "bgr": "the colour order is swapped (BGR vs RGB): feed RGB (rknnlaunch's letterbox does) or "
    "rebuild without quant_img_RGB2BGR",
    "layout": "the input layout is swapped (NHWC bytes read as NCHW): pass NHWC uint8 [1,H,W,C] to "
    "the runtime, or rebuild the model from an NCHW ONNX without a custom input layout",
}
"""Hypotheses `validate` tests by re-running the reference on a mis-prepared input; the one whose
outputs the device's outputs resemble best (clearly better than the correct input) is the likely cause."""


def relative_error(reference: npt.NDArray[np.generic], device: npt.NDArray[np.generic]) -> float | None:
    """||device - reference|| / ||reference|| over the flattened tensors (None when sizes differ).

    Unlike cosine, this is not dominated into ~1 by large box coordinates sharing a tensor with
    small scores, so it separates "the same input, slightly quantised" from "another input"."""
    x = np.asarray(reference, np.float64).ravel()
    y = np.asarray(device, np.float64).ravel()
    if x.size != y.size:
        return None
    norm = float(np.linalg.norm(x))
    diff = float(np.linalg.norm(y - x))
    return diff / norm if norm else (0.0 if diff == 0.0 else float("inf"))


def likely_cause(errors: Mapping[str, float | None], factor: float = 0.5) -> str | None:
    """The hypothesis (key of `CAUSES`) whose reference outputs the device's outputs are closest to
    (`relative_error`), when it is under ``factor`` x the error against the correct input; else
    None (quantisation error or a bad calibration set are then the usual causes)."""
    baseline = errors.get("correct")
    best, value = None, (baseline if baseline is not None else float("inf")) * factor
    for name, error in errors.items():
        if name != "correct" and error is not None and error < value:
            best, value = name, error
    return best
