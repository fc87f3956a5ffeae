"""Device health for the kubelet (KEP-4680 DRAResourceHealth): the ResourceManager's per-core
health, the functional probe's verdict included, as (pool, device, health, time, message) records,
fanned out to every NodeWatchResources stream the moment it changes and re-sent periodically."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from rknpu_device_plugin.devices import DeviceState, ResourceManager, device_cores

RESEND_S = 10.0
"""Every stream gets the whole list again this often: the kubelet treats a device whose last
update is older than its health-check timeout as UNKNOWN."""
CHECK_TIMEOUT_S = 30
"""The health_check_timeout_seconds we send (the kubelet's default is 30 s too)."""


@dataclass(frozen=True)
class DeviceHealth:
    pool: str
    device: str
    healthy: bool
    updated: int
    """Unix seconds of the last determination."""
    message: str


def _message(device: str, healthy: bool) -> str:
    cores = ", ".join(str(core) for core in sorted(device_cores(device)))
    if healthy:
        return f"NPU core {cores} is healthy (device nodes present, probe passed when enabled)"
    return (
        f"NPU core {cores} is not usable: a device node is missing, the driver is not loaded or the "
        "functional probe failed (the rknpu-dra-driver log says which)"
    )


class HealthBoard:
    """The current health of every device and the streams that follow it."""

    def __init__(self, resources: ResourceManager, pool: str) -> None:
        self._resources = resources
        self._pool = pool
        self._lock = threading.Lock()
        self._devices: dict[str, DeviceHealth] = {}
        self._streams: set[queue.SimpleQueue[list[DeviceHealth] | None]] = set()
        self._closed = False
        self.on_change: Callable[[Mapping[str, bool]], None] = lambda health: None
        self._sink = resources.subscribe(self)

    def put(self, item: DeviceState | None) -> None:
        """The ResourceManager's sink (called under its lock; never blocks)."""
        if item is None:
            return
        now = int(time.time())
        with self._lock:
            changed = False
            for device, healthy in item.health.items():
                old = self._devices.get(device)
                if old is None or old.healthy != healthy:
                    self._devices[device] = DeviceHealth(
                        self._pool, device, healthy, now, _message(device, healthy)
                    )
                    changed = True
            for gone in set(self._devices) - set(item.health):
                del self._devices[gone]
                changed = True
            records = list(self._devices.values())
            streams = list(self._streams) if changed else []
        for stream in streams:
            stream.put(records)
        if changed:
            self.on_change(dict(item.health))

    def current(self) -> list[DeviceHealth]:
        with self._lock:
            return list(self._devices.values())

    def follow(self, stop: threading.Event) -> Iterator[list[DeviceHealth]]:
        """The full list now, again on every change and every RESEND_S (fresh timestamps), until
        ``stop`` or `close`."""
        stream: queue.SimpleQueue[list[DeviceHealth] | None] = queue.SimpleQueue()
        with self._lock:
            if self._closed:
                return
            self._streams.add(stream)
            stream.put(list(self._devices.values()))
        try:
            while not stop.is_set():
                try:
                    records = stream.get(timeout=RESEND_S)
                except queue.Empty:
                    now = int(time.time())
                    records = [
                        DeviceHealth(r.pool, r.device, r.healthy, now, r.message) for r in self.current()
                    ]
                if records is None:
                    return
                yield records
        finally:
            with self._lock:
                self._streams.discard(stream)

    def close(self) -> None:
        """End every stream (the server is stopping)."""
        with self._lock:
            self._closed = True
            streams, self._streams = list(self._streams), set()
        for stream in streams:
            stream.put(None)
        self._resources.unsubscribe(self._sink)
