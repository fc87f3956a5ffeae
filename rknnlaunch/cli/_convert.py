"""`rknnlaunch convert MODEL.onnx --target SOC`: build an .rknn with rknn-toolkit2 (optionally validate it
in the toolkit's simulator, the only way to run a model on x86)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TextIO

from .._errors import UsageError
from .._files import check_output
from ..convert import parse_size
from ..npu import SOCS
from ._completion import offer


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    parser.description = __doc__
    parser.add_argument("onnx", type=Path, metavar="MODEL.onnx")
    socs = [soc.name for soc in SOCS]
    offer(parser.add_argument("--target", required=True, help=f"SoC to build for: {', '.join(socs)}"), socs)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quant-images",
        nargs="+",
        metavar="DIR|FILE",
        default=[],
        help="int8: calibration images (a folder or files; 20-200 of the scenes the model sees)",
    )
    mode.add_argument(
        "--fp16", action="store_true", help="float16, no calibration (about 2x slower on the NPU)"
    )
    parser.add_argument(
        "-o", "--output", type=Path, help="output .rknn (default MODEL-TARGET-int8|fp16.rknn)"
    )
    parser.add_argument("--input-size", help="W or WxH, for ONNX exports with a dynamic input size")
    parser.add_argument("--pad", type=int, default=114, help="letterbox pad the model was trained with (114)")
    parser.add_argument("--mean", default="0,0,0", help="per-channel mean on 0-255 RGB (0,0,0)")
    parser.add_argument(
        "--std", default="255,255,255", help="per-channel std on 0-255 RGB (255,255,255 = /255)"
    )
    parser.add_argument(
        "--validate",
        nargs="+",
        metavar="DIR|FILE",
        help="after building, compare the model in the toolkit's simulator with the ONNX on these images",
    )
    parser.add_argument(
        "--min-agreement", type=float, default=None, help="with --validate: exit 1 below this"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="with --validate: write the report as JSON")
    parser.add_argument("--verbose", action="store_true", help="show the toolkit's whole log")
    parser.set_defaults(handler=run)


def _triple(text: str, option: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(v) for v in text.replace(" ", "").split(","))
    except ValueError:
        values = ()
    if len(values) == 1:
        values = values * 3
    finite = all(math.isfinite(v) for v in values)
    if len(values) != 3 or not finite or (option == "--std" and min(values) <= 0):
        raise UsageError(f"{option} {text!r} is not three numbers", f"e.g. {option} 0,0,0 (std values > 0)")
    return (values[0], values[1], values[2])


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from ..convert import ConvertRequest, convert

    out = out or sys.stdout
    if not 0 <= args.pad <= 255:
        raise UsageError(f"--pad {args.pad} is not a pixel value", "use 0-255 (114 for Ultralytics models)")
    if args.min_agreement is not None and not 0.0 <= args.min_agreement <= 1.0:
        raise UsageError(
            f"--min-agreement {args.min_agreement} is not a ratio", "use a value in 0..1, e.g. 0.8"
        )
    check_output(args.json, "--json", example="validate.json")
    request = ConvertRequest(
        onnx=args.onnx,
        target=args.target,
        output=args.output,
        quant_images=tuple(args.quant_images),
        fp16=args.fp16,
        input_size=parse_size(args.input_size) if args.input_size else None,
        pad_value=args.pad,
        mean=_triple(args.mean, "--mean"),
        std=_triple(args.std, "--std"),
        verbose=args.verbose,
    )
    validate_images = None
    if args.validate:
        from ..validate import image_files

        validate_images = image_files(args.validate, "--validate")  # checked before the long build

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    converted = convert(request, progress, keep_simulator=validate_images is not None)
    try:
        facts = converted.facts
        print(f"wrote {converted.path}: {converted.choice}", file=out)
        names = ", ".join(facts.class_names[:5]) + (", ..." if len(facts.class_names) > 5 else "")
        width, height = facts.input_size
        print(
            f"  embedded: {facts.task}, {len(facts.class_names)} classes ({names}), input {width}x{height} "
            f"{facts.input_layout} uint8 RGB, pad {facts.pad_value}, output layout {facts.output_layout}",
            file=out,
        )
        if converted.names_file is not None:
            print(
                f"  class names: in {converted.names_file} (too many for rknn-toolkit2's custom string); "
                "keep that file next to the .rknn wherever you copy it",
                file=out,
            )
        for line in converted.log.describe():
            print(f"  {line}", file=out)
        if validate_images is None:
            return 0
        from ..validate import compare_with_reference, print_report, write_json

        report = compare_with_reference(
            reference=request.onnx,
            device=converted.infer,
            device_label=f"rknn-toolkit2 simulator ({converted.path.name})",
            images=validate_images,
            pad_value=facts.pad_value,
            input_size=facts.input_size,
            layout=facts.output_layout,
            model=converted.path,
            class_names=facts.class_names,
            progress=progress,
        )
        print_report(report, out, args.min_agreement)
        if args.json:
            write_json(report, args.json, args.min_agreement)
        code: int = report.exit_code(args.min_agreement)
        return code
    finally:
        converted.close()
