"""The plugin's loggers: one line per event, as text or JSON (`rknpu_serverkit` formats them);
structured fields ride in ``extra={"fields": ...}``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TextIO

from rknpu_node import LAYER_LOGGERS
from rknpu_serverkit import setup_logging as _setup_logging

LOGGER_NAME = "rknpu_device_plugin"


def get_logger(name: str = "") -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}" if name else LOGGER_NAME)


def setup_logging(log_format: str, level: str, stream: TextIO | None = None) -> Callable[[], None]:
    """Configure the plugin's and the exporter's logger (records go through a queue, so a request
    never waits on stderr), and its layers' (the node's health and probe, the kit's serving);
    returns ``stop()``, which writes out what is queued."""
    return _setup_logging(LOGGER_NAME, log_format, level, stream, shared=LAYER_LOGGERS)
