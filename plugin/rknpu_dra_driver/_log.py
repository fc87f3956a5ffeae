"""The driver's loggers (one line per event, text or JSON, formatted by `rknpu_serverkit`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TextIO

from rknpu_serverkit import setup_logging as _setup_logging

LOGGER_NAME = "rknpu_dra_driver"
# The device plugin's health logger (its ResourceManager watches the NPU for us) writes the same way.
_SHARED_LOGGERS = ("rknpu_device_plugin",)


def get_logger(name: str = "") -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}" if name else LOGGER_NAME)


def setup_logging(log_format: str, level: str, stream: TextIO | None = None) -> Callable[[], None]:
    """Configure the driver's logger and the shared device-plugin loggers; returns ``stop()``."""
    stop = _setup_logging(LOGGER_NAME, log_format, level, stream)
    ours = logging.getLogger(LOGGER_NAME)
    for name in _SHARED_LOGGERS:
        shared = logging.getLogger(name)
        shared.setLevel(ours.level)
        shared.propagate = False
        shared.handlers[:] = ours.handlers

    def stop_all() -> None:
        stop()
        for name in _SHARED_LOGGERS:
            logging.getLogger(name).handlers[:] = ours.handlers

    return stop_all
