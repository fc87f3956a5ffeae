"""Benchmark: YOLOv8 post-processing of an 80-class 640x640 rknn_model_zoo 9-output frame.

Prints the median (and p90) time of `rknnlaunch.yolo.YoloDecoder` next to a straightforward
implementation in the style of the public rknn_model_zoo Python demo, written here from its
description (softmax-DFL over every anchor of every stride, then filter by score, then greedy NMS
per class in a Python loop), on the same frames in the same run, and asserts both find identical
detections. Targets (issue 5): fast <= 1.5 ms median, and >= 3x faster than the straightforward one.

    python benchmarks/postprocess_bench.py [--frames 20] [--repeat 30] [--objects 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from rknnlaunch.yolo import Detections, YoloDecoder
from rknnlaunch.yolo.testing import quantise, realistic_frame

CONF, IOU = 0.25, 0.45
Outputs = list[npt.NDArray[np.float32]]


def straightforward(outputs: Sequence[npt.NDArray[np.float32]], input_size: int = 640) -> Detections:
    """Decode every anchor first, then filter, then NMS class by class (the reference style)."""
    all_boxes, all_scores = [], []
    for branch in range(3):
        box_t, cls_t = outputs[3 * branch], outputs[3 * branch + 1]
        _, channels, height, width = box_t.shape
        bins = channels // 4
        # DFL: softmax over the bins of every side of every anchor, expectation = distance.
        logits = box_t.reshape(1, 4, bins, height, width)
        exp = np.exp(logits - logits.max(axis=2, keepdims=True))
        probs = exp / exp.sum(axis=2, keepdims=True)
        dist = (probs * np.arange(bins, dtype=np.float32).reshape(1, 1, bins, 1, 1)).sum(axis=2)
        cols, rows = np.meshgrid(np.arange(width), np.arange(height))
        grid = np.stack((cols, rows)).reshape(1, 2, height, width).astype(np.float32) + 0.5
        stride = input_size / height
        xy1 = (grid - dist[:, 0:2]) * stride
        xy2 = (grid + dist[:, 2:4]) * stride
        xyxy = np.concatenate((xy1, xy2), axis=1)
        all_boxes.append(xyxy.transpose(0, 2, 3, 1).reshape(-1, 4))
        all_scores.append(cls_t.transpose(0, 2, 3, 1).reshape(-1, cls_t.shape[1]))
    boxes = np.concatenate(all_boxes).astype(np.float32)
    scores_table = np.concatenate(all_scores)
    best = scores_table.max(axis=-1)
    classes = scores_table.argmax(axis=-1)
    mask = best >= CONF
    boxes, best, classes = boxes[mask], best[mask], classes[mask]
    kept_boxes, kept_scores, kept_classes = [], [], []
    for class_id in sorted(set(classes.tolist())):
        sel = classes == class_id
        b, s = boxes[sel], best[sel]
        for index in _greedy_nms(b, s):
            kept_boxes.append(b[index])
            kept_scores.append(s[index])
            kept_classes.append(class_id)
    if not kept_boxes:
        return Detections.empty()
    order = np.argsort(-np.asarray(kept_scores, np.float32), kind="stable")
    return Detections(
        np.asarray(kept_boxes, np.float32)[order],
        np.asarray(kept_scores, np.float32)[order],
        np.asarray(kept_classes, np.int64)[order],
    )


def _greedy_nms(boxes: npt.NDArray[np.float32], scores: npt.NDArray[np.float32]) -> list[int]:
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size > 0:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        w = np.clip(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), 0, None)
        h = np.clip(np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), 0, None)
        inter = w * h
        iou = inter / (areas[i] + areas[rest] - inter)
        order = rest[iou <= IOU]
    return keep


def canonical(d: Detections) -> Detections:
    order = np.lexsort((d.boxes[:, 0], d.class_ids, -d.scores))
    return Detections(d.boxes[order], d.scores[order], d.class_ids[order])


def time_it(fn: Callable[[Outputs], Detections], frames: list[Outputs], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        for frame in frames:
            start = time.perf_counter_ns()
            fn(frame)
            times.append((time.perf_counter_ns() - start) / 1e6)
    return times


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    frames = [realistic_frame(rng, objects=args.objects) for _ in range(args.frames)]
    fast = YoloDecoder(CONF, IOU)
    total = 0
    for frame in frames:
        got, want = canonical(fast(frame)), canonical(straightforward(frame))
        assert len(got) == len(want), (len(got), len(want))
        np.testing.assert_array_equal(got.class_ids, want.class_ids)
        np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got.boxes, want.boxes, rtol=0, atol=1e-3)
        total += len(got)
    print(
        f"frames: {len(frames)} x 80-class 640x640 rknn-9, {args.objects} objects each; "
        f"identical detections: {total} in total ({total / len(frames):.1f} per frame)"
    )
    for _ in range(3):  # warm-up of both, interleaved so neither gets a cold cache advantage
        fast(frames[0])
        straightforward(frames[0])
    fast_ms = time_it(fast, frames, args.repeat)
    ref_ms = time_it(straightforward, frames, max(1, args.repeat // 3))
    fast_med, ref_med = statistics.median(fast_ms), statistics.median(ref_ms)

    def p90(values: list[float]) -> float:
        return float(np.percentile(values, 90))

    print(f"rknnlaunch.yolo    median {fast_med:7.3f} ms  p90 {p90(fast_ms):7.3f} ms  (n={len(fast_ms)})")
    print(f"straightforward    median {ref_med:7.3f} ms  p90 {p90(ref_ms):7.3f} ms  (n={len(ref_ms)})")
    # For information: the same frames in the other two layouts and as int8 (not targets).
    six = [[t for i, t in enumerate(frame) if i % 3 != 2] for frame in frames]
    quantised = [[quantise(t) for t in frame] for frame in frames]
    int8_frames = [[q for q, _ in frame] for frame in quantised]
    int8_decoders = [YoloDecoder(CONF, IOU, quant=[qp for _, qp in frame]) for frame in quantised]
    for name, inputs, decoders in (
        ("rknn-6 (no score_sum)", six, [fast] * len(frames)),
        ("rknn-9 int8 outputs", int8_frames, int8_decoders),
    ):
        times = []
        for _ in range(max(1, args.repeat // 3)):
            for frame, decoder in zip(inputs, decoders, strict=True):
                start = time.perf_counter_ns()
                decoder(frame)
                times.append((time.perf_counter_ns() - start) / 1e6)
        print(f"{name:<22} median {statistics.median(times):7.3f} ms  (information only)")
    speedup = ref_med / fast_med
    print(
        f"speed-up: {speedup:.1f}x   target: <= 1.5 ms and >= 3x -> "
        f"{'PASS' if fast_med <= 1.5 and speedup >= 3 else 'FAIL'}"
    )
    return 0 if fast_med <= 1.5 and speedup >= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
