"""The `rknnlaunch` command line: argument parsing and the one place errors become exit codes."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence

from ._errors import RknnLaunchError
from ._version import __version__

# Each subcommand lives in its own module exposing `add_parser(subparsers) -> None`; the parser it
# adds sets `handler=<function(args) -> int>`. Listed here so `--help` shows them in this order.
_COMMAND_MODULES = (
    "_cmd_bench",
    "_cmd_detect",
    "_cmd_doctor",
    "_cmd_run",
    "_cmd_model",
    "_cmd_convert",
    "_cmd_validate",
)


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() owns every exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageExit(f"{self.prog}: {message}\n  fix: see `{self.prog} --help`")


class _UsageExit(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rknnlaunch", description=__doc__)
    parser.add_argument("--version", action="version", version=f"rknnlaunch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"rknnlaunch.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 failure, 2 usage error)."""
    try:
        parser = build_parser()
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        if getattr(args, "handler", None) is None:
            parser.print_help()
            return 2
        code: int = args.handler(args)
        return code
    except _UsageExit as exc:
        print(exc, file=sys.stderr)
        return 2
    except RknnLaunchError as exc:
        print(f"rknnlaunch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("rknnlaunch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`rknnlaunch doctor --json | head`): not worth a traceback. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by the pipe
