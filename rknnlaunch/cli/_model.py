"""`rknnlaunch model inspect FILE`: what an .rknn file says about itself, without any runtime."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..model import read_rknn


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    model_sub = parser.add_subparsers(dest="model_command", metavar="ACTION", parser_class=type(parser))
    inspect = model_sub.add_parser(
        "inspect", help="print an .rknn file's target SoC, toolkit version and tensors"
    )
    inspect.add_argument("file", type=Path, metavar="FILE")
    inspect.add_argument("--json", action="store_true", help="print the metadata as JSON")
    inspect.set_defaults(handler=run_inspect)
    parser.set_defaults(handler=lambda _args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_inspect(args: argparse.Namespace) -> int:
    info = read_rknn(args.file)
    if args.json:
        print(json.dumps(info.as_dict(), indent=2))
        return 0
    rows = [
        ("file", f"{info.path} ({info.size} bytes)"),
        ("format version", str(info.format_version)),
        ("toolkit version", info.toolkit_version or "unknown"),
        ("target platform", ", ".join(info.target_platforms) or "unknown"),
        ("source", info.source_platform or "unknown"),
    ]
    rows += [(f"input {i}", t.describe()) for i, t in enumerate(info.inputs)]
    rows += [(f"output {i}", t.describe()) for i, t in enumerate(info.outputs)]
    facts = info.facts
    if facts is not None:
        width, height = facts.input_size
        rows += [
            ("task", facts.task),
            ("classes", ", ".join(facts.class_names)),
            (
                "input",
                f"{width}x{height} {facts.input_layout} {facts.input_dtype} RGB, "
                f"letterbox pad {facts.pad_value}",
            ),
            ("output layout", facts.output_layout),
            (
                "quantization",
                facts.quantization
                + (" (the head's tail in float16)" if facts.quantization == "int8-hybrid" else ""),
            ),
            ("source onnx", f"sha256 {facts.source_onnx_sha256}"),
        ]
        if facts.calibration_sha256:
            rows.append(
                ("calibration", f"{facts.calibration_images} images, sha256 {facts.calibration_sha256}")
            )
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for problem, fix in info.warnings():
        print(f"warning: {problem}\n  fix: {fix}")
    return 0
