"""The `rknnlaunch` command line: argument parsing and the one place errors become exit codes."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .._entry import UsageParser, run_main
from .._errors import UsageError
from .._version import __version__

# Each command lives in its own module exposing `configure(parser) -> None`, which adds the
# arguments and sets `handler=<function(args) -> int>`. Only the module of the command being run is
# imported: `rknnlaunch run` is every container's ENTRYPOINT and must not pay for numpy, YOLO or the
# bench. Listed here (name -> module, one-line help) in the order `--help` shows them.
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("_bench", "measure YOLOv8 latency per NPU core set and pool throughput (CPU fallback)"),
    "detect": (
        "_detect",
        "detect objects in one image with a YOLOv8 model (boxes printed, optionally drawn)",
    ),
    "watch": (
        "_watch",
        "detect objects in many cameras or video files at once (JSON lines; reconnects failing streams)",
    ),
    "doctor": (
        "_doctor",
        "check that this container can run a model on its NPU cores, and say how to fix what cannot",
    ),
    "run": ("_run", "check the NPU, export the normalised RKNN_NPU_* env, then exec a command"),
    "model": ("_model", "inspect model files"),
    "convert": ("_convert", "convert a YOLO ONNX model to .rknn (rknn-toolkit2, x86_64 Linux)"),
    "validate": ("_validate", "check that an .rknn still detects what its ONNX detects"),
    "completion": (
        "_completion",
        "print a bash or zsh completion script (source <(rknnlaunch completion bash))",
    ),
}


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command named in ``argv`` (its first non-option word), if it is one of ours."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None, all_commands: bool = False) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported and configured (None: none, e.g. for --help),
    or every command's with ``all_commands`` (the completion script is generated from it)."""
    parser = UsageParser(
        prog="rknnlaunch",
        description="Run YOLO models on the Rockchip NPU cores this container was given.",
    )
    parser.add_argument("--version", action="version", version=f"rknnlaunch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=UsageParser)
    for name, (module, summary) in COMMANDS.items():
        subparser = sub.add_parser(name, help=summary)
        if name == command or all_commands:
            importlib.import_module(f"{__package__}.{module}").configure(subparser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (the table in `rknnlaunch._entry`)."""
    return run_main("rknnlaunch", lambda: _main(list(sys.argv[1:] if argv is None else argv)))


def _main(words: list[str]) -> int:
    parser = build_parser(chosen_command(words))
    args = parser.parse_args(words)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        raise UsageError(
            "no command given", f"name one: rknnlaunch {{{','.join(COMMANDS)}}} ... (e.g. rknnlaunch bench)"
        )
    code: int = args.handler(args)
    return code
