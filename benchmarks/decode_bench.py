"""Benchmark: decoding every YOLO layout, 640x640, 20 objects, ours vs edgefirst-decoder.

For each layout, ``--frames`` realistic frames (noise everywhere, each object seen by 3 x 3
neighbouring anchors; `rknnlaunch.yolo.testing.realistic_layout_frame`) are decoded ``--repeat``
times by `make_decoder`'s decoder (letterbox mapping and masks included). Where
``edgefirst-decoder`` (Rust, PyPI) decodes the same tensors (Ultralytics detection and
segmentation tables, end-to-end [1, N, 6]), it decodes them in the same loop, interleaved call
by call (order alternating), and both medians are printed side by side with the detection counts
compared. Its input tensors are built once per frame outside the timing (a real pipeline would
get them from its runtime). Class counts: 80 (detect, segment), 1 (pose), 15 (obb).

Targets (issue 13, this 2-core machine): detection (any layout) <= 0.8 ms, pose <= 1.0 ms,
segmentation with masks at proto resolution <= 3 ms, end-to-end <= 0.2 ms; ours <= edgefirst's
median on every task both decode.

    python benchmarks/decode_bench.py [--frames 10] [--repeat 20] [--objects 20] [--layouts a,b]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from rknnlaunch.yolo import Detections, LetterboxInfo, make_decoder
from rknnlaunch.yolo.testing import realistic_layout_frame

CONF, IOU = 0.25, 0.45
CASES = (
    "rknn-9",
    "rknn-6",
    "rknn-yolov5",
    "ultralytics",
    "end2end",
    "rknn-seg",
    "ultralytics-seg",
    "rknn-pose",
    "ultralytics-pose",
    "rknn-obb",
    "ultralytics-obb",
)
TARGET_MS = {"detect": 0.8, "pose": 1.0, "segment": 3.0, "end2end": 0.2, "obb": None}


def edgefirst_factory(layout: str, shapes: Sequence[tuple[int, ...]]) -> Callable[[list[Any]], Any] | None:
    """A decode call of edgefirst-decoder for this layout, or None (not installed / not its layout)."""
    try:
        from edgefirst.decoder import Decoder, DecoderVersion, Output
        from edgefirst.decoder import DimName as Dim
    except ImportError:
        return None
    if layout == "ultralytics":
        decoder = Decoder.new_from_outputs([Output.detection(shape=list(shapes[0]))], CONF, IOU)
    elif layout == "end2end":
        rows = [(Dim.Batch, 1), (Dim.NumBoxes, shapes[0][1]), (Dim.NumFeatures, shapes[0][2])]
        decoder = Decoder.new_from_outputs(
            [Output.detection(dshape=rows)], CONF, IOU, decoder_version=DecoderVersion.Yolo26
        )
    elif layout == "ultralytics-seg":
        table = [(Dim.Batch, 1), (Dim.NumFeatures, shapes[0][1]), (Dim.NumBoxes, shapes[0][2])]
        protos = [
            (Dim.Batch, 1),
            (Dim.NumProtos, shapes[1][1]),
            (Dim.Height, shapes[1][2]),
            (Dim.Width, shapes[1][3]),
        ]
        decoder = Decoder.new_from_outputs(
            [Output.detection(dshape=table).with_normalized(False), Output.protos(dshape=protos)],
            CONF,
            IOU,
            input_dims=(640, 640),
        )
    else:
        return None

    def run(tensors: list[Any]) -> Any:
        return decoder.decode(tensors, max_boxes=300)

    return run


def edgefirst_tensors(outputs: Sequence[npt.NDArray[np.float32]]) -> list[Any]:
    from edgefirst.tensor import Tensor, TensorMemory

    tensors = []
    for output in outputs:
        tensor = Tensor(list(output.shape), str(output.dtype), TensorMemory.MEM)
        tensor.from_numpy(np.ascontiguousarray(output))
        tensors.append(tensor)
    return tensors


@dataclass
class Case:
    layout: str
    task: str
    ours_ns: list[int] = field(default_factory=list)
    theirs_ns: list[int] = field(default_factory=list)
    ours_count: int = 0
    theirs_count: int | None = None

    def median_ms(self, values: list[int]) -> float:
        return statistics.median(values) / 1e6


def run_case(layout: str, frames: int, repeat: int, objects: int) -> Case:
    rng = np.random.default_rng(13)
    made = [realistic_layout_frame(layout, rng, objects) for _ in range(frames)]
    meta = made[0][1]
    decoder = make_decoder([o.shape for o in made[0][0]], meta, conf=CONF, iou=IOU)
    info = LetterboxInfo.identity(640, 640)
    theirs = edgefirst_factory(layout, [tuple(o.shape) for o in made[0][0]])
    tensors = [edgefirst_tensors(outputs) for outputs, _ in made] if theirs is not None else []
    task = "end2end" if layout == "end2end" else decoder.task
    case = Case(layout, task)
    found: Detections | None = None
    for rep in range(repeat):
        for index, (outputs, _) in enumerate(made):
            order = (0, 1) if (rep + index) % 2 == 0 else (1, 0)
            for who in order:
                if who == 0:
                    start = time.perf_counter_ns()
                    found = decoder(outputs, info)
                    case.ours_ns.append(time.perf_counter_ns() - start)
                elif theirs is not None:
                    start = time.perf_counter_ns()
                    result = theirs(tensors[index])
                    case.theirs_ns.append(time.perf_counter_ns() - start)
                    case.theirs_count = len(result[0])
    assert found is not None
    case.ours_count = len(found)
    return case


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--layouts", default=",".join(CASES), help="comma-separated subset")
    args = parser.parse_args(argv)
    layouts = [name for name in args.layouts.split(",") if name]
    try:
        from edgefirst.decoder import version as edgefirst_version

        peer = f"edgefirst-decoder {edgefirst_version()}"
    except ImportError:
        peer = "edgefirst-decoder not installed (pip install edgefirst-decoder): ours only"
    print(
        f"decode, 640x640, {args.objects} objects x 3x3 anchors, {args.frames} frames x {args.repeat}; {peer}"
    )
    header = f"{'layout':<17} {'task':<8} {'ours p50':>9} {'(best)':>8} {'target':>7}"
    header += f" {'edgefirst p50':>14} {'ratio':>6}"
    header += "  dets ours/theirs"
    print(header)
    print("-" * len(header))
    failed = []
    for layout in layouts:
        case = run_case(layout, args.frames, args.repeat, args.objects)
        ours = case.median_ms(case.ours_ns)
        target = TARGET_MS.get(case.task)
        best = min(case.ours_ns) / 1e6
        shown_target = "" if target is None else f"{target:.1f}ms"
        line = f"{layout:<17} {case.task:<8} {ours:>7.3f}ms {best:>6.3f}ms {shown_target:>7}"
        if case.theirs_ns:
            theirs = case.median_ms(case.theirs_ns)
            line += f" {theirs:>12.3f}ms {theirs / ours:>5.1f}x  {case.ours_count}/{case.theirs_count}"
            if ours > theirs:
                failed.append(f"{layout}: ours {ours:.3f} ms > edgefirst {theirs:.3f} ms")
        else:
            line += f" {'-':>14} {'':>6}  {case.ours_count}"
        if target is not None and ours > target:
            failed.append(f"{layout}: {ours:.3f} ms > target {target} ms")
        print(line)
    print("targets met" if not failed else "MISSED: " + "; ".join(failed))
    print("(best = fastest single call: what an idle machine gives; medians include other load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
