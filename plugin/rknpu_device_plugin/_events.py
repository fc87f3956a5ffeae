"""The plugin's event sink interface (metrics and tests listen to it) and a do-nothing default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class PluginEvents(Protocol):
    """What the plugin reports as it runs. Called from plugin threads: be thread-safe and fast."""

    def registered(self) -> None:
        """Each successful Register with the kubelet."""

    def restarted(self) -> None:
        """Each re-serve + re-register after a kubelet restart or the loss of our socket."""

    def allocated(self, device_ids: Sequence[str], mask: int) -> None:
        """One container's Allocate succeeded: its device IDs and the core mask handed in."""

    def allocation_failed(self, reason: str) -> None:
        """An Allocate was refused (unknown, duplicate or unhealthy IDs); ``reason`` is the message."""

    def health_changed(self, health: Mapping[str, bool]) -> None:
        """The full device-id -> healthy map, once at start and after every change."""


class NullEvents:
    """Discards every event (the default when metrics are off)."""

    def registered(self) -> None:
        pass

    def restarted(self) -> None:
        pass

    def allocated(self, device_ids: Sequence[str], mask: int) -> None:
        pass

    def allocation_failed(self, reason: str) -> None:
        pass

    def health_changed(self, health: Mapping[str, bool]) -> None:
        pass
