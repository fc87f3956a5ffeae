"""`rknnlaunch validate MODEL.rknn --reference MODEL.onnx --images DIR|FILES`: run both on the same
frames (the .rknn on the NPU through RKNNLite, the ONNX on the CPU) and report how far they agree."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any, TextIO

from .._errors import DiscoveryError, MaskError, ModelError, UsageError
from .._files import PLOT_SUFFIXES, check_output, require_file
from ..model import read_rknn
from ..runtime import RknnLiteFactory
from ..settings import NpuSettings, load_settings


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    parser.description = __doc__
    parser.add_argument("model", type=Path, metavar="MODEL.rknn")
    parser.add_argument("--reference", type=Path, required=True, metavar="MODEL.onnx", help="the source ONNX")
    parser.add_argument("--images", nargs="+", required=True, metavar="DIR|FILE", help="images to compare on")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the report (rknnlaunch.validate/1)")
    parser.add_argument(
        "--plot", type=Path, metavar="FILE.png", help="plot per-output similarity, per-class recall"
    )
    parser.add_argument(
        "--min-agreement",
        type=float,
        default=None,
        help="exit 1 below this matched/union ratio (default 0.5)",
    )
    parser.add_argument(
        "--pad", type=int, help="letterbox pad (default: the model's embedded facts, else 114)"
    )
    parser.add_argument("--conf", type=float, default=0.25, help="confidence threshold (0.25)")
    parser.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold (0.45)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return execute(args, load_settings())


def execute(
    args: argparse.Namespace,
    settings: NpuSettings,
    rknnlite: RknnLiteFactory | None = None,
    stream: TextIO | None = None,
) -> int:
    """The validate command with its dependencies passed in (tests inject settings and a fake RKNNLite)."""
    from ..runtime import open_plan, plan
    from ..validate import compare_with_reference, image_files, print_report, write_json, write_plot

    out = stream if stream is not None else sys.stdout
    if args.min_agreement is not None and not 0.0 <= args.min_agreement <= 1.0:
        raise UsageError(
            f"--min-agreement {args.min_agreement} is not a ratio", "use a value in 0..1, e.g. 0.8"
        )
    if args.model.suffix.lower() == ".onnx":
        raise UsageError(
            f"{args.model} is the ONNX; validate compares an .rknn against it",
            "pass MODEL.rknn first and the ONNX as --reference",
        )
    if args.pad is not None and not 0 <= args.pad <= 255:
        raise UsageError(f"--pad {args.pad} is not a pixel value", "use 0-255 (114 for Ultralytics models)")
    for flag, value in (("--conf", args.conf), ("--iou", args.iou)):
        if not 0.0 <= value <= 1.0:  # nan fails this too
            raise UsageError(f"{flag} {value} is not a threshold", f"use a value in 0..1, e.g. {flag} 0.25")
    check_output(args.json, "--json", example="validate.json")
    check_output(args.plot, "--plot", suffixes=PLOT_SUFFIXES, example="validate.png")
    # Every input by the one rule (exit 2) before the NPU is looked for: a wrong path is named as what it is.
    require_file(args.model, "MODEL.rknn", "pass the path of an existing .rknn file", ModelError)
    require_file(args.reference, "--reference", "pass the ONNX the .rknn was converted from")
    with args.reference.open("rb") as handle:
        head = handle.read(4)
    if head == b"RKNN":
        raise UsageError(
            f"--reference {args.reference} is an .rknn model; the reference is the source ONNX",
            "pass MODEL.onnx as --reference",
        )
    if head[:1] != b"\x08":  # an ONNX ModelProto starts with its field 1, ir_version
        raise UsageError(
            f"--reference {args.reference} is not an ONNX model (it starts with {head!r}; an ONNX file "
            "starts with its ir_version field, byte 0x08)",
            "pass the .onnx the .rknn was converted from",
        )
    images = image_files(args.images, "--images")
    info = read_rknn(args.model)
    facts = info.facts
    width, height = facts.input_size if facts else _size_of(info)
    pad = args.pad if args.pad is not None else (facts.pad_value if facts else 114)
    try:
        try:  # one context over the allocation, as rknnlaunch.open runs it
            the_plan = plan(args.model, None, "npu", settings, "one")
        except MaskError:  # cores no one context can run ({0,2} on RK3588): the first core's
            the_plan = plan(args.model, None, "npu", settings, "per-core")
    except DiscoveryError as exc:
        raise UsageError(
            f"no NPU to run {args.model.name} on ({exc.problem})",
            "on the board run this again; on an x86 machine rknn-toolkit2's simulator cannot load a built "
            ".rknn, so convert and validate in one go: rknnlaunch convert MODEL.onnx --target SOC "
            "--quant-images DIR --validate IMAGES",
        ) from None
    the_plan = dataclasses.replace(the_plan, groups=the_plan.groups[:1])
    runtime = open_plan(the_plan, settings.compatible_file, rknnlite)[0]
    try:
        report = compare_with_reference(
            reference=args.reference,
            device=runtime.infer,
            device_label=runtime.label,
            images=images,
            pad_value=pad,
            input_size=(width, height),
            layout=facts.output_layout if facts else None,
            model=args.model,
            class_names=facts.class_names if facts else (),
            conf_threshold=args.conf,
            iou_threshold=args.iou,
        )
    finally:
        runtime.close()
    print_report(report, out, args.min_agreement)
    if args.json:
        write_json(report, args.json, args.min_agreement)
    if args.plot:
        write_plot(report, args.plot)
    code: int = report.exit_code(args.min_agreement)
    return code


def _size_of(info: Any) -> tuple[int, int]:
    """(width, height) from the model's first input when it has no embedded facts."""
    if info.inputs:
        shape = info.inputs[0].runtime_shape()
        if len(shape) == 4 and shape[3] in (1, 3, 4):
            return int(shape[2]), int(shape[1])
        if len(shape) == 4 and shape[1] in (1, 3, 4):
            return int(shape[3]), int(shape[2])
    raise ModelError(
        f"{info.path} says nothing about its input size", "convert it with `rknnlaunch convert` (embeds it)"
    )
