"""The entry-point kit of the three commands (`rknnlaunch`, `rknpu-device-plugin`, `rknpu-exporter`):
usage errors, settings from flags and environment, log setup, stop signals, and the one table
that turns how a `main()` ended into an exit code.

How a `main()` ends -> exit code and what is printed (`exit_code_for`; `run_main` applies it):

- returns normally -> its own code, nothing printed;
- a server's SIGTERM / SIGINT -> 0: a stop request is a clean stop;
- `UsageError` (a bad flag, `SettingsError`) -> 2, ``PROG: error: ...`` and a ``fix:`` line;
- any other `RknnLaunchError` -> its ``exit_code`` (1), the same two lines;
- `BrokenPipeError` (the reader of stdout went away) -> 141 (128 + SIGPIPE), nothing;
- any other `OSError` -> 1, ``PROG: error: <reason>: <path>``;
- a `KeyboardInterrupt` that escapes -> 130, ``PROG: interrupted``;
- `SystemExit` (argparse's ``--help``/``--version``) -> its code;
- anything else raises with its traceback: that is a bug.

Servers (plugin, exporter) turn SIGTERM and SIGINT into a stop event (`stop_on_signals`), so
Ctrl-C on a server is the same clean stop as a Kubernetes SIGTERM (exit 0); a Ctrl-C that
reaches code as `KeyboardInterrupt` (the `rknnlaunch` commands, or before a server installed its
handlers) is an interruption: 130, whichever command.

Standard library and pydantic only: the device plugin and the SDK both use it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import logging.handlers
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, TextIO, TypeVar, get_args

from ._errors import RknnLaunchError, SettingsError, UsageError

# pydantic loads only when settings are built: `rknnlaunch run` (every container's ENTRYPOINT)
# uses this kit too and must start fast.
if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

# --- shared settings validators -----------------------------------------------------------------

_LogLevelName = Literal["debug", "info", "warning", "error"]
LOG_LEVELS: list[str] = list(get_args(_LogLevelName))
if TYPE_CHECKING:
    LogLevel = _LogLevelName
    """A log level setting; ``INFO`` from the environment counts as ``info``."""


def __getattr__(name: str) -> Any:
    # LogLevel carries a pydantic validator: built on first use (by a settings model).
    if name == "LogLevel":
        from pydantic import BeforeValidator

        value = Annotated[_LogLevelName, BeforeValidator(_lower_level)]
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _lower_level(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


LOG_FORMATS: list[str] = ["text", "json"]
LogFormat = Literal["text", "json"]


def check_soc_name(value: str | None) -> str | None:
    """A ``--soc`` validator: the names come from the shared SoC table."""
    from .npu import SOCS, soc_by_name

    if value is not None and soc_by_name(value) is None:
        raise ValueError(f"unknown SoC {value!r}; use {', '.join(soc.name for soc in SOCS)}")
    return value


# --- argparse and settings ----------------------------------------------------------------------


def check_output_folder(path: str | os.PathLike[str] | None, flag: str) -> None:
    """Refuse a report path whose folder does not exist up front, not after minutes of work."""
    if path is not None and not Path(path).resolve().parent.is_dir():
        raise UsageError(
            f"{flag} {path}: the folder {Path(path).parent} does not exist",
            f"create it or pick another {flag}",
        )


class UsageParser(argparse.ArgumentParser):
    """argparse that raises `UsageError` instead of exiting, so `main()` owns every exit code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see `{self.prog} --help`")


_M = TypeVar("_M", bound="BaseModel")


def add_setting_flags(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    env_prefix: str,
    types: Mapping[str, Any] | None = None,
    choices: Mapping[str, list[str]] | None = None,
) -> None:
    """One ``--flag`` per settings field (booleans get ``--no-flag``), its help naming the env twin.

    Use with ``argument_default=argparse.SUPPRESS`` so only flags given reach `settings_from_flags`.
    """
    types = types or {}
    choices = choices or {}
    for name, field in model.model_fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = f"{field.description} (default: {field.default}; env {env_prefix}{name.upper()})"
        if field.annotation is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=help_text)
        elif name in choices:
            parser.add_argument(flag, choices=choices[name], type=str.lower, help=help_text)
        else:
            parser.add_argument(flag, metavar=name.upper(), type=types.get(name, str), help=help_text)


def settings_from_flags(model: type[_M], args: argparse.Namespace, env_prefix: str, prog: str) -> _M:
    """``model`` built from the flags given (a pydantic-settings model reads the rest from its
    environment variables); `SettingsError` naming the flag and its variable when a value is bad."""
    from pydantic import ValidationError

    given = {key: value for key, value in vars(args).items() if key in model.model_fields}
    try:
        return model(**given)
    except ValidationError as exc:
        raise settings_error(exc, env_prefix, prog) from None


def settings_error(exc: ValidationError, env_prefix: str, prog: str) -> SettingsError:
    """A pydantic ValidationError as one `SettingsError`: each bad field as ``--flag (env VAR)``."""
    problems = "; ".join(_describe(error["loc"], error["msg"], env_prefix) for error in exc.errors())
    return SettingsError(
        f"invalid {prog} settings: {problems}",
        f"fix the flag or its {env_prefix}* environment variable (see {prog} --help)",
    )


def _describe(loc: tuple[int | str, ...], message: str, env_prefix: str) -> str:
    message = message.removeprefix("Value error, ")
    if not loc:
        return message
    name = str(loc[0])
    return f"--{name.replace('_', '-')} (env {env_prefix}{name.upper()}): {message}"


# --- exit codes ---------------------------------------------------------------------------------


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code for an exception that ended a `main()`; None for a bug (let it raise)."""
    if isinstance(exc, RknnLaunchError):
        return exc.exit_code
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


def end_server_process(code: int) -> NoReturn:
    """End a server's process now: flush the logs and the standard streams, then `os._exit`.

    A server that stopped cleanly has nothing left to do, yet interpreter teardown (gRPC's C core,
    module clean-up) took 0.3-1.3 s on a loaded 2-core machine after the last atexit handler, and
    a SIGTERM'd plugin must be gone within 1 s. Only for a `main()` run as the program.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _silence_stdout() -> None:
    # The reader went away (`... --json | head`): point stdout at /dev/null so the interpreter's
    # final flush does not raise again.
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# --- stop signals -------------------------------------------------------------------------------


class StopEvent(threading.Event):
    """A stop flag whose `wait` also wakes for a signal that the kernel delivered to another thread.

    Python runs signal handlers in the main thread only, and a main thread blocked in a plain
    `threading.Event.wait` is not woken when the signal lands on one of the process's other
    threads (gRPC's, a scrape's): SIGTERM would then wait for the next timeout. Within
    `stop_on_signals`, the signal's C-level handler writes to this event's socket
    (`signal.set_wakeup_fd`), which is what `wait` sleeps on.
    """

    def __init__(self) -> None:
        super().__init__()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # full (already woken) or closed
            self._wake_write.send(b"\0")

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with contextlib.suppress(OSError, ValueError):  # closed under us: look at the flag
                select.select([self._wake_read], [], [], left)
                self._wake_read.recv(4096)  # a call: pending signal handlers run here at the latest
        return True

    def wakeup_fd(self) -> int:
        return self._wake_write.fileno()


@contextlib.contextmanager
def stop_on_signals(stop: StopEvent, on_signal: Callable[[int], None] | None = None) -> Iterator[StopEvent]:
    """Within the block, SIGTERM and SIGINT set ``stop`` (a server's clean stop); handlers are
    restored after. Off the main thread (tests) signals cannot be handled: nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()
        if on_signal is not None:
            on_signal(signum)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous_fd = signal.set_wakeup_fd(stop.wakeup_fd(), warn_on_full_buffer=False)
    try:
        yield stop
    finally:
        signal.set_wakeup_fd(previous_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --- logging ------------------------------------------------------------------------------------

MAX_LOG_LINE_CHARS = 4096
"""No log line is longer: a field value, the message or a traceback is cut to fit."""
_MAX_VALUE_CHARS = 1024
_MAX_LIST_ITEMS = 16


def _bounded(value: object) -> object:
    if isinstance(value, str):
        return _clip(value, _MAX_VALUE_CHARS)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        shown: list[object] = [_bounded(item) for item in items[:_MAX_LIST_ITEMS]]
        if len(items) > _MAX_LIST_ITEMS:
            shown.append(f"... ({len(items):,} items)")
        return shown
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return _clip(str(value), _MAX_VALUE_CHARS)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _escape_controls(text: str) -> str:
    """Control characters as escapes: a text log line can never be split or overwritten."""
    return "".join(
        char if char.isprintable() or char == " " else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, msg, the record's ``fields``, logger, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "msg": _clip(record.getMessage(), _MAX_VALUE_CHARS),
        }
        if not record.name.startswith(_OWN_LOGGER_PREFIXES):
            line["logger"] = record.name
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({str(key): _bounded(value) for key, value in fields.items()})
        if record.exc_info:
            line["exception"] = _clip(self.formatException(record.exc_info), _MAX_VALUE_CHARS * 2)
        text = json.dumps(line, default=str)
        if len(text) > MAX_LOG_LINE_CHARS:  # many fields: keep the line, drop what made it huge
            keep: dict[str, Any] = {k: line[k] for k in ("time", "level", "msg", "logger") if k in line}
            keep["truncated"] = f"{len(text):,} characters of fields left out"
            text = json.dumps(keep)
        return text


class TextFormatter(logging.Formatter):
    """``TIME LEVEL message key=value ...`` on one line, control characters escaped."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            text += " " + " ".join(f"{key}={_text_value(_bounded(value))}" for key, value in fields.items())
        text = _escape_controls(text.replace("\n", " | "))
        return _clip(text, MAX_LOG_LINE_CHARS)


def _text_value(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    text = str(value)
    return json.dumps(text) if " " in text else text


_OWN_LOGGER_PREFIXES = ("rknpu_device_plugin", "rknnlaunch")


def setup_logging(
    logger_name: str,
    log_format: str,
    level: str,
    stream: TextIO | None = None,
    queued: bool = True,
) -> Callable[[], None]:
    """Log ``logger_name``'s records (and other libraries' warnings) one line each, text or JSON.

    With ``queued``, records go through a queue to a writer thread, so a request never waits on
    stderr (a slow log pipe would otherwise show up in kubelet's admission latency). Foreign
    loggers (grpc, the standard library) get the same format at WARNING and above, and Python
    warnings are logged too, so ``--log-format json`` means every line is JSON. Returns ``stop()``,
    which writes out what is queued; later records of ``logger_name`` are written directly, and
    the rest (root handler, warnings, thread hook) is as it was before.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logger = logging.getLogger(logger_name)
    logger.setLevel(level.upper())
    logger.propagate = False
    root = logging.getLogger()  # WARNING and above unless someone chose otherwise
    root.addHandler(handler)
    logging.captureWarnings(True)
    previous_hook = threading.excepthook

    def thread_died(args: threading.ExceptHookArgs) -> None:
        # A thread's uncaught exception as one log record, not a raw traceback on stderr.
        name = args.thread.name if args.thread is not None else "?"
        exc_info = (args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback)
        logger.error("thread %s died: %r", name, args.exc_value, exc_info=exc_info)

    threading.excepthook = thread_died
    listener: logging.handlers.QueueListener | None = None
    if queued:
        records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        listener = logging.handlers.QueueListener(records, handler)
        logger.handlers[:] = [logging.handlers.QueueHandler(records)]
        listener.start()
    else:
        logger.handlers[:] = [handler]

    def stop() -> None:
        if listener is not None:
            listener.stop()
        logger.handlers[:] = [handler]
        root.removeHandler(handler)
        threading.excepthook = previous_hook
        logging.captureWarnings(False)

    return stop
