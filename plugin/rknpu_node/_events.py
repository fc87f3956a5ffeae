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

    def probed(self, core: int, ok: bool, seconds: float) -> None:
        """One core's functional probe ended: passed or not, and how long it took."""


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

    def probed(self, core: int, ok: bool, seconds: float) -> None:
        pass


class TeeEvents:
    """Hands every event to each of several sinks (metrics and the NFD labels, say)."""

    def __init__(self, *sinks: PluginEvents) -> None:
        self.sinks = sinks

    def registered(self) -> None:
        for sink in self.sinks:
            sink.registered()

    def restarted(self) -> None:
        for sink in self.sinks:
            sink.restarted()

    def allocated(self, device_ids: Sequence[str], mask: int) -> None:
        for sink in self.sinks:
            sink.allocated(device_ids, mask)

    def allocation_failed(self, reason: str) -> None:
        for sink in self.sinks:
            sink.allocation_failed(reason)

    def health_changed(self, health: Mapping[str, bool]) -> None:
        for sink in self.sinks:
            sink.health_changed(health)

    def probed(self, core: int, ok: bool, seconds: float) -> None:
        for sink in self.sinks:
            sink.probed(core, ok, seconds)
