"""A server program's `main()`: parse, settings, logging, run, with one place errors become exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from rknnlaunch import __version__, run_main

from ._preflight import os_error_with_fix
from ._signals import end_server_process


class ServerSettings(Protocol):
    """What `server_main` reads of a program's settings (both programs' models have these)."""

    @property
    def log_format(self) -> str: ...

    @property
    def log_level(self) -> str: ...


_S = TypeVar("_S", bound=ServerSettings)


def server_main(
    argv: Sequence[str] | None,
    *,
    prog: str,
    logger_name: str,
    build_parser: Callable[[], argparse.ArgumentParser],
    settings_from: Callable[[argparse.Namespace], _S],
    setup_logging: Callable[[str, str], Callable[[], None]],
    run: Callable[[_S], int],
    preflight: Callable[[_S], None] | None = None,
) -> int:
    """Run a server program: ``--version`` prints and exits 0; otherwise settings from the flags
    (and their env twins), ``preflight(settings)`` (every input checked before anything is bound:
    a `SettingsError` is exit 2, one line and its fix, before logging starts), logging set up,
    ``run(settings)``, logging stopped; exit codes as in `rknnlaunch.run_main` (0 clean stop, 1
    failure, 2 bad settings), a permission error with its fix line. Run as the program (``argv``
    None), the process ends here, without interpreter teardown (`end_server_process`)."""

    def body(args_list: Sequence[str]) -> int:
        args = build_parser().parse_args(list(args_list))
        if getattr(args, "version", False):
            print(f"{prog} {__version__}")
            return 0
        settings = settings_from(args)
        try:
            if preflight is not None:
                preflight(settings)
            stop_logging = setup_logging(settings.log_format, settings.log_level)
            try:
                return run(settings)
            finally:
                stop_logging()
        except OSError as exc:
            better = os_error_with_fix(exc)
            if better is None:
                raise
            raise better from None

    if argv is not None:
        return run_main(prog, lambda: body(argv), logger_name)
    end_server_process(run_main(prog, lambda: body(sys.argv[1:]), logger_name))


@dataclass(frozen=True)
class ServerProgram(Generic[_S]):
    """A server program as `server_main` runs it: its `main` is ``program.main``."""

    prog: str
    logger_name: str
    build_parser: Callable[[], argparse.ArgumentParser]
    settings_from: Callable[[argparse.Namespace], _S]
    setup_logging: Callable[[str, str], Callable[[], None]]
    run: Callable[[_S], int]
    preflight: Callable[[_S], None] | None = None

    def main(self, argv: Sequence[str] | None = None) -> int:
        """`server_main` with this program's parts."""
        return server_main(
            argv,
            prog=self.prog,
            logger_name=self.logger_name,
            build_parser=self.build_parser,
            settings_from=self.settings_from,
            setup_logging=self.setup_logging,
            run=self.run,
            preflight=self.preflight,
        )
