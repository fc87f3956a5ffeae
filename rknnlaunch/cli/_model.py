"""`rknnlaunch model inspect FILE`: what an .rknn file says about itself, without any runtime."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..model._rknnfile import read_rknn


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
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0
