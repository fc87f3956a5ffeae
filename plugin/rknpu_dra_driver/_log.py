"""The driver's loggers (one line per event, text or JSON, formatted by `rknpu_serverkit`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TextIO

from rknpu_node import LAYER_LOGGERS
from rknpu_serverkit import setup_logging as _setup_logging

LOGGER_NAME = "rknpu_dra_driver"


def get_logger(name: str = "") -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}" if name else LOGGER_NAME)


def setup_logging(log_format: str, level: str, stream: TextIO | None = None) -> Callable[[], None]:
    """Configure the driver's logger and its layers' (the node's health, the kit's serving);
    returns ``stop()``, which writes out what is queued."""
    return _setup_logging(LOGGER_NAME, log_format, level, stream, shared=LAYER_LOGGERS)
