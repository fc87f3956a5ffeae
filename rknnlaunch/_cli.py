"""The `rknnlaunch` command line: argument parsing and the one place errors become exit codes."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ._entry import UsageParser, run_main
from ._version import __version__

# Each subcommand lives in its own module exposing `add_parser(subparsers) -> None`; the parser it
# adds sets `handler=<function(args) -> int>`. Listed here so `--help` shows them in this order.
_COMMAND_MODULES = ("_cmd_bench", "_cmd_detect", "_cmd_doctor", "_cmd_run", "_cmd_model")


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="rknnlaunch", description=__doc__)
    parser.add_argument("--version", action="version", version=f"rknnlaunch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=UsageParser)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"rknnlaunch.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (the table in `rknnlaunch._entry`)."""
    return run_main("rknnlaunch", lambda: _main(sys.argv[1:] if argv is None else argv))


def _main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    code: int = args.handler(args)
    return code
