"""The node package's loggers and environment prefix (both programs' logging setups adopt them)."""

from __future__ import annotations

import logging

LOGGER_NAME = "rknpu_node"
LAYER_LOGGERS = (LOGGER_NAME, "rknpu_serverkit")
"""The loggers of the layers under both programs, which each program's logging setup adopts."""
ENV_PREFIX = "RKNPU_PLUGIN_"
"""Discovery's environment overrides (``RKNPU_PLUGIN_*``), as the device plugin's settings name them."""


def get_logger(name: str = "") -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}" if name else LOGGER_NAME)
