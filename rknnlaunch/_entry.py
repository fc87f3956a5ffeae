"""The exit-code table of the three commands (`rknnlaunch`, `rknpu-device-plugin`, `rknpu-exporter`):
usage errors and the one table that turns how a `main()` ended into an exit code (`run_main`).
The servers' own kit (settings flags, log lines, stop signals, lifecycle actors) is
`rknpu_serverkit`; the servers reach this module through `rknnlaunch.run_main`.

How a `main()` ends -> exit code and what is printed (`exit_code_for`; `run_main` applies it):

- returns normally -> its own code, nothing printed;
- a server's SIGTERM / SIGINT -> 0: a stop request is a clean stop;
- `UsageError` (a bad flag, `SettingsError`) -> 2, ``PROG: error: ...`` and a ``fix:`` line;
- any other `RknnLaunchError` -> its ``exit_code`` (1), the same two lines;
- `BrokenPipeError` (the reader of stdout went away) -> 141 (128 + SIGPIPE), nothing;
- any other `OSError` -> 1, ``PROG: error: <reason>: <path>``;
- a `ModuleNotFoundError` for a third-party package (an install missing a dependency, or a
  dependency the running user cannot read) -> 1, ``PROG: error: missing Python package`` and the
  ``pip install`` that brings it; one for our own modules is a bug and raises;
- a `KeyboardInterrupt` that escapes -> 130, ``PROG: interrupted``;
- `SystemExit` (argparse's ``--help``/``--version``) -> its code;
- anything else raises with its traceback: that is a bug.

Servers (plugin, exporter) turn SIGTERM and SIGINT into a stop (`rknpu_serverkit`), so
Ctrl-C on a server is the same clean stop as a Kubernetes SIGTERM (exit 0); a Ctrl-C that
reaches code as `KeyboardInterrupt` (the `rknnlaunch` commands, or before a server installed its
handlers) is an interruption: 130, whichever command.

Standard library only: every command imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from ._errors import RknnLaunchError, UsageError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

# --- argparse -------------------------------------------------------------------------------------


class UsageParser(argparse.ArgumentParser):
    """argparse that raises `UsageError` instead of exiting, so `main()` owns every exit code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see `{self.prog} --help`")


# --- exit codes ---------------------------------------------------------------------------------


# Third-party module (top-level import name) -> the extra that installs it (`pyproject.toml`).
EXTRA_FOR_MODULE: dict[str, str] = {
    "numpy": "",
    "pydantic": "",
    "pydantic_settings": "",
    "pydantic_core": "",
    "cv2": "vision",
    "onnxruntime": "cpu",
    "rich": "bench",
    "matplotlib": "bench",
    "grpc": "plugin",
    "google": "plugin",
    "inotify_simple": "plugin",
    "prometheus_client": "plugin",
    "kubernetes": "dra",
    "rknnlite": "npu",
    "av": "video",
}
OUR_PACKAGES = ("rknnlaunch", "rknpu_device_plugin", "rknpu_dra_driver", "rknpu_serverkit")


def missing_package(exc: BaseException) -> str | None:
    """The top-level name of the third-party package whose import failed; None when ``exc`` is not
    such a failure (an import of one of our own modules failing is a bug, not an install problem)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.partition(".")[0]
    return None if top in OUR_PACKAGES else top


def install_hint(package: str) -> str:
    """The ``pip install`` that brings ``package`` back."""
    extra = EXTRA_FOR_MODULE.get(package)
    if extra is None:
        return f"pip install {package}, or reinstall: pip install --force-reinstall rknnlaunch"
    target = f"'rknnlaunch[{extra}]'" if extra else "rknnlaunch"
    return f"pip install {target} (or, if it is installed, let this user read its site-packages folder)"


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code for an exception that ended a `main()`; None for a bug (let it raise)."""
    if isinstance(exc, RknnLaunchError):
        return exc.exit_code
    if missing_package(exc) is not None:
        return EXIT_FAILURE
    if isinstance(exc, BrokenPipeError):
        return EXIT_BROKEN_PIPE
    if isinstance(exc, OSError):
        return EXIT_FAILURE
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, SystemExit):  # argparse's --help / --version
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_FAILURE)
    return None


def error_line(prog: str, exc: BaseException) -> str | None:
    """The one line (two with a fix) `run_main` prints for ``exc``; None when nothing is said."""
    if isinstance(exc, (BrokenPipeError, SystemExit)):
        return None
    if isinstance(exc, KeyboardInterrupt):
        return f"{prog}: interrupted"
    if isinstance(exc, RknnLaunchError):
        return f"{prog}: error: {exc}"
    package = missing_package(exc)
    if package is not None:
        return f"{prog}: error: missing Python package: {package}\n  fix: {install_hint(package)}"
    if isinstance(exc, OSError):
        return f"{prog}: error: {describe_os_error(exc)}"
    return None


def describe_os_error(exc: OSError) -> str:
    """``Permission denied: /etc/kubernetes/node-feature-discovery/features.d`` rather than a repr."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    paths = [str(path) for path in (exc.filename, exc.filename2) if path is not None]
    return f"{reason}: {' -> '.join(paths)}" if paths else reason


def run_main(prog: str, body: Callable[[], int], logger_name: str | None = None) -> int:
    """Run ``body`` and return its exit code, or the table's code for how it failed.

    The error line goes to the logger ``logger_name`` when it has been set up (so a server with
    ``--log-format json`` says it in JSON), else to stderr as plain text.
    """
    try:
        return body()
    except BaseException as exc:
        code = exit_code_for(exc)
        if code is None:
            raise
        line = error_line(prog, exc)
        if isinstance(exc, BrokenPipeError):
            _silence_stdout()
        if line is not None:
            logger = logging.getLogger(logger_name) if logger_name else None
            if logger is not None and logger.handlers:
                logger.error(line.removeprefix(f"{prog}: error: "))
            else:
                print(line, file=sys.stderr)
        return code


def _silence_stdout() -> None:
    # The reader went away (`... --json | head`): point stdout at /dev/null so the interpreter's
    # final flush does not raise again.
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
