"""The `rknpu-dra-driver` entry point: settings built once, the start-up checks, the `Driver` run,
and the one place errors become exit codes (as the device plugin's: 0 clean stop, 1 failure, 2
bad settings)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from rknpu_serverkit import ServerProgram

from ._log import LOGGER_NAME, setup_logging
from ._settings import PROG, DraSettings, build_parser, settings_from


def _preflight(settings: DraSettings) -> None:
    """Every input checked before the lock is taken or a socket bound (exit 2 on a bad one)."""
    from ._preflight import preflight

    preflight(settings, os.environ)


def run(settings: DraSettings, stop: threading.Event | None = None) -> int:
    """Serve until SIGTERM/SIGINT (or ``stop``); 0 on a clean stop (`Driver`)."""
    # gRPC's C core prints INFO lines of its own that would break --log-format json; keep its
    # errors. Must be set before grpc is imported (the driver's rooms import it).
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from ._driver import Driver

    return Driver(settings).run(stop)


PROGRAM = ServerProgram(PROG, LOGGER_NAME, build_parser, settings_from, setup_logging, run, _preflight)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the driver until SIGTERM/SIGINT (`rknpu_serverkit.server_main`: exit codes, and the
    process ends there when run as the program)."""
    return PROGRAM.main(argv)
