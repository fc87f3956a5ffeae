"""Log setup: one line per event, as text or JSON; structured fields ride in ``extra={"fields": ...}``."""

from __future__ import annotations

import json
import logging
import logging.handlers
import queue
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

LOGGER_NAME = "rknpu_device_plugin"


def get_logger(name: str = "") -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}" if name else LOGGER_NAME)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            text += " " + " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        return text.replace("\n", " | ")


def _text_value(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    text = str(value)
    return json.dumps(text) if " " in text else text


def setup_logging(log_format: str, level: str, stream: TextIO | None = None) -> Callable[[], None]:
    """Configure the plugin's logger (not the root logger: grpc's own logging stays as it is).

    Records go through a queue to a writer thread, so an Allocate never waits on stderr (a slow
    log pipe would otherwise show up in kubelet's admission latency). Returns ``stop()``, which
    writes out what is queued.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter() if log_format == "json" else _TextFormatter())
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(records, handler)
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers[:] = [logging.handlers.QueueHandler(records)]
    logger.setLevel(level.upper())
    logger.propagate = False
    listener.start()

    def stop() -> None:
        listener.stop()
        logger.handlers[:] = [handler]

    return stop
