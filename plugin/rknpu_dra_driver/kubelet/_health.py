"""Device health for the kubelet (KEP-4680 DRAResourceHealth): the ResourceManager's per-core
health, the functional probe's verdict included, as (pool, device, health, time, message) records
(the message names the scan's or the probe's reason) for every device name a slice layout may
offer (a core set is healthy when all its cores are), fanned out to every NodeWatchResources
stream the moment it changes and re-sent periodically. A new reason for a core that stays
unhealthy keeps the first message (records change with health only)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from rknpu_node import DeviceState, ResourceManager, device_cores

from ..slices import SliceLayout, layout_core_sets, set_device_id

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


def _message(cores: frozenset[int], healthy: bool, bad: frozenset[int], reasons: Mapping[int, str]) -> str:
    named = ", ".join(str(core) for core in sorted(cores))
    what = f"NPU core{'s' if len(cores) > 1 else ''} {named}"
    if healthy:
        return f"{what}: healthy (device nodes present, probe passed when enabled)"
    failing = sorted(cores & bad)
    # The ResourceManager's reason per core (the scan's or the probe's), so `kubectl describe pod`
    # says what broke; one line per distinct reason, the cores it covers named.
    by_reason: dict[str, list[int]] = {}
    for core in failing:
        by_reason.setdefault(reasons.get(core, ""), []).append(core)
    parts = [
        f"core {', '.join(str(c) for c in named_cores)} "
        + (f"not usable: {why}" if why else "not usable (the rknpu-dra-driver log says why)")
        for why, named_cores in by_reason.items()
    ]
    return f"{what}: {'; '.join(parts)}"


class _Inbox(Protocol):
    def put(self, records: list[DeviceHealth] | None) -> None: ...


class _LoopInbox:
    """A stream's inbox on the server's event loop; `put` may be called from any thread (the
    ResourceManager's sink runs on the health thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.queue: asyncio.Queue[list[DeviceHealth] | None] = asyncio.Queue()

    def put(self, records: list[DeviceHealth] | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the stream is gone
            self._loop.call_soon_threadsafe(self.queue.put_nowait, records)


class HealthBoard:
    """The current health of every device and the streams that follow it."""

    def __init__(self, resources: ResourceManager, pool: str) -> None:
        self._resources = resources
        self._pool = pool
        self._lock = threading.Lock()
        self._devices: dict[str, DeviceHealth] = {}
        self._streams: set[_Inbox] = set()
        self._closed = False
        self._health: dict[str, bool] = {}
        self._reasons: Mapping[int, str] = {}
        self._sets: tuple[frozenset[int], ...] | None = None
        self._learn_sets()
        self._on_change: Callable[[Mapping[str, bool]], None] = lambda health: None
        self._sink = resources.subscribe(self)

    def _learn_sets(self) -> None:
        """Every core set either layout offers (not under the ResourceManager's lock: it asks)."""
        if self._sets is not None:
            return
        info = self._resources.info
        if info is not None:
            everything = {device: True for device in self._health} or {
                set_device_id(frozenset({c})): True for c in range(info.core_count)
            }
            self._sets = layout_core_sets(info, everything, SliceLayout.PARTITIONABLE)

    def _records_locked(self, now: int) -> bool:
        """Recompute the records from ``_health``; True if any device's health changed."""
        bad = frozenset(
            core for device, ok in self._health.items() if not ok for core in device_cores(device)
        )
        sets = self._sets or tuple(device_cores(device) for device in self._health)
        known = frozenset(core for device in self._health for core in device_cores(device))
        wanted: dict[str, DeviceHealth] = {}
        for cores in sets:
            if not cores <= known:
                continue
            name = set_device_id(cores)
            healthy = not (cores & bad)
            old = self._devices.get(name)
            if old is not None and old.healthy == healthy:
                wanted[name] = old
            else:
                wanted[name] = DeviceHealth(
                    self._pool, name, healthy, now, _message(cores, healthy, bad, self._reasons)
                )
        changed = wanted != self._devices
        self._devices = wanted
        return changed

    def put(self, item: DeviceState | None) -> None:
        """The ResourceManager's sink (called under its lock; never blocks)."""
        if item is None:
            return
        now = int(time.time())
        with self._lock:
            self._health = dict(item.health)
            self._reasons = dict(item.reasons)
            changed = self._records_locked(now)
            records = list(self._devices.values())
            streams = list(self._streams) if changed else []
            if changed:  # under our lock: `notify` hands over the state before or after, in order
                self._on_change(dict(item.health))
        for stream in streams:
            stream.put(records)

    def notify(self, callback: Callable[[Mapping[str, bool]], None]) -> None:
        """Call ``callback`` with the per-core health now and on every change. It runs under the
        ResourceManager's lock (`put` is its sink, the lock is not re-entrant): it must not
        block, nor call the ResourceManager (it gets the health it needs)."""
        with self._lock:
            self._on_change = callback
            callback(dict(self._health))

    def current(self) -> list[DeviceHealth]:
        with self._lock:
            return list(self._devices.values())

    async def watch(self) -> AsyncIterator[list[DeviceHealth]]:
        """The full list now, again on every change and every RESEND_S (fresh timestamps), until
        `close` or the caller stops iterating (the kubelet hung up). A coroutine on the server's
        event loop: an open stream holds no thread."""
        inbox = _LoopInbox(asyncio.get_running_loop())
        if self._sets is None:  # the NPU appeared after start: its core sets are known now
            self._learn_sets()
            with self._lock:
                self._records_locked(int(time.time()))
        with self._lock:
            if self._closed:
                return
            self._streams.add(inbox)
            inbox.queue.put_nowait(list(self._devices.values()))
        try:
            while True:
                try:
                    records = await asyncio.wait_for(inbox.queue.get(), RESEND_S)
                except asyncio.TimeoutError:
                    now = int(time.time())
                    records = [
                        DeviceHealth(r.pool, r.device, r.healthy, now, r.message) for r in self.current()
                    ]
                if records is None:
                    return
                yield records
        finally:
            with self._lock:
                self._streams.discard(inbox)

    def close(self) -> None:
        """End every stream (the server is stopping); again: nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            streams, self._streams = list(self._streams), set()
        for stream in streams:
            stream.put(None)
        self._resources.unsubscribe(self._sink)
