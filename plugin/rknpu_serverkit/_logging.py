"""A server's log lines: one line per record, text or JSON, bounded in length (`setup_logging`).

Structured fields ride in ``extra={"fields": {...}}``; `JsonFormatter` puts them beside ``time``,
``level`` and ``msg``, `TextFormatter` appends them as ``key=value``. No line is longer than
`MAX_LOG_LINE_CHARS`, and control characters are escaped, so a log line is never split.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

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


# Our own loggers need no "logger" field; a foreign one (grpc, a library) is named in it.
_OWN_LOGGER_PREFIXES = ("rknpu_device_plugin", "rknpu_node", "rknpu_serverkit", "rknnlaunch")


def setup_logging(
    logger_name: str,
    log_format: str,
    level: str,
    stream: TextIO | None = None,
    queued: bool = True,
    shared: Sequence[str] = (),
) -> Callable[[], None]:
    """Log ``logger_name``'s records (and other libraries' warnings) one line each, text or JSON.

    With ``queued``, records go through a queue to a writer thread, so a request never waits on
    stderr (a slow log pipe would otherwise show up in kubelet's admission latency). Foreign
    loggers (grpc, the standard library) get the same format at WARNING and above, and Python
    warnings are logged too, so ``--log-format json`` means every line is JSON. Returns ``stop()``,
    which writes out what is queued; later records of ``logger_name`` are written directly, and
    the rest (root handler, warnings, thread hook) is as it was before. The ``shared`` loggers
    (the layers under a program: ``rknpu_node``, ``rknpu_serverkit``) write the same way.
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
    for name in shared:
        layer = logging.getLogger(name)
        layer.setLevel(logger.level)
        layer.propagate = False
        layer.handlers[:] = logger.handlers

    def stop() -> None:
        if listener is not None:
            listener.stop()
        logger.handlers[:] = [handler]
        for name in shared:
            logging.getLogger(name).handlers[:] = [handler]
        root.removeHandler(handler)
        threading.excepthook = previous_hook
        logging.captureWarnings(False)

    return stop
