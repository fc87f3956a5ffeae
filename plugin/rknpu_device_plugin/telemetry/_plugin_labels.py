"""The device plugin's NFD feature file (``features.d/rknpu-plugin``), kept current from its events."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rknpu_node import NullEvents
from rknpu_serverkit import write_atomic

from ._nfd import PLUGIN_FEATURE_FILE_NAME, feature_text, plugin_labels

log = logging.getLogger(__name__)


class PluginLabels(NullEvents):
    """Rewrites the plugin's feature file when health or a probe verdict changes (a `PluginEvents`).

    No expiry: the file changes only on events, and `close()` removes it, so labels never outlive
    the plugin that vouches for them by more than a crash. Write failures are logged once per
    distinct error and never reach the caller.
    """

    def __init__(self, features_dir: Path, mode: str) -> None:
        self.path = Path(features_dir) / PLUGIN_FEATURE_FILE_NAME
        self._mode = mode
        self._lock = threading.Lock()
        self._health: dict[str, bool] = {}
        self._probes: dict[int, bool] = {}
        self._written: str | None = None
        self._last_error: str | None = None

    def health_changed(self, health: Mapping[str, bool]) -> None:
        with self._lock:
            self._health = dict(health)
            self._write_locked()

    def probed(self, core: int, ok: bool, seconds: float) -> None:
        with self._lock:
            self._probes[core] = ok
            self._write_locked()

    def labels(self) -> dict[str, str]:
        with self._lock:
            return plugin_labels(self._mode, self._health, self._probes)

    def _write_locked(self) -> None:
        text = feature_text(plugin_labels(self._mode, self._health, self._probes))
        if text == self._written:
            return
        try:
            write_atomic(self.path, text)
        except OSError as exc:
            if str(exc) != self._last_error:
                log.error("cannot write the NFD feature file %s: %s", self.path, exc)
                self._last_error = str(exc)
            return
        self._written = text
        self._last_error = None

    def close(self) -> None:
        """Remove the file: a stopped plugin vouches for nothing."""
        with self._lock:
            self.path.unlink(missing_ok=True)
            self._written = None


if TYPE_CHECKING:
    from rknpu_node import PluginEvents

    _IS_PLUGIN_EVENTS: PluginEvents = PluginLabels(Path("."), "core")
