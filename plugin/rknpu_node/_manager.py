"""The resource manager: owns the NPU's discovery state and device health, and feeds ListAndWatch.

Health is event driven (inotify on the device nodes' folders) with a periodic re-check of the
driver (re-discovery), AND the functional probe's verdict per core (`set_probe_failures`, fed by
`_probe.ProbeLoop`). Every ListAndWatch stream subscribes a sink of its own; each health change
pushes the whole device list to every sink; `close()` ends every stream (None).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rknnlaunch import DiscoveryError
from rknnlaunch.npu import HostRoot, NpuInfo, SocSpec
from rknpu_serverkit import FolderWatcher

from ._discovery import discover_on_node
from ._events import PluginEvents
from ._log import ENV_PREFIX, get_logger
from ._policy import Mode, NodeExtras, device_health, device_ids

_log = get_logger("health")

# How often the node folders are polled when inotify is unavailable (health within 1 s).
POLL_FALLBACK_INTERVAL = 0.25

PresenceLine = tuple[int, str, str]
"""A presence change to log once the scan has stored it: (logging level, message, host path)."""


@dataclass(frozen=True)
class DeviceState:
    """One published view: the device IDs in order and each one's health."""

    ids: tuple[str, ...]
    health: Mapping[str, bool]
    reasons: Mapping[int, str] = field(default_factory=dict, compare=False)
    """Core -> why it is not usable (a missing node, a failed or pending probe), for messages;
    not compared: a new reason alone publishes nothing."""

    def devices(self) -> list[tuple[str, bool]]:
        return [(device_id, self.health[device_id]) for device_id in self.ids]


class StateSink(Protocol):
    """Where a ListAndWatch stream receives states (None: end of stream). ``put`` must not block:
    it is called under the manager's lock (a `queue.Queue`, or a hand-over to an event loop)."""

    def put(self, item: DeviceState | None) -> None: ...


class ResourceManager:
    """Owns what kubelet is told about the NPU: the discovered NpuInfo, device IDs and health."""

    def __init__(
        self,
        host: HostRoot,
        events: PluginEvents,
        mode: Mode = "core",
        replicas: int = 1,
        soc_hint: SocSpec | None = None,
        health_interval: float = 0.5,
        use_inotify: bool = True,
        extra_devices: Sequence[str] = (),
        host_librknnrt: str | None = None,
    ) -> None:
        self.host = host
        self._events = events
        self._mode: Mode = mode
        self._replicas = replicas
        self._soc_hint = soc_hint
        self._health_interval = health_interval
        self._use_inotify = use_inotify
        self._lock = threading.Lock()
        self._info: NpuInfo | None = None
        self._state = DeviceState((), {})
        self._compatible: str | None = None
        self._extra_devices = tuple(extra_devices)
        self._host_librknnrt = host_librknnrt
        self._extras = NodeExtras()
        self._device_error: str | None = None
        self._probe_failures: dict[int, str] = {}
        self._probe_pending: frozenset[int] = frozenset()
        self._absent: set[str] = set()
        self._last_error: str | None = None
        self._subscribers: set[StateSink] = set()
        self._closed = False
        self._watcher: FolderWatcher | None = None
        self.when_missing = "registering nothing and re-scanning for a late driver load"
        """What the plugin does when no NPU is found (the log line says it)."""
        self.on_ready: Callable[[], None] = lambda: None
        """Called (from the health thread) when the NPU is first discovered."""

    # --- state, read from gRPC threads ------------------------------------------------------------

    @property
    def info(self) -> NpuInfo | None:
        with self._lock:
            return self._info

    def snapshot(self) -> tuple[NpuInfo | None, DeviceState, str | None]:
        """NPU info, device state and compatible file path, all from the same scan (for Allocate)."""
        with self._lock:
            return self._info, self._state, self._compatible

    @property
    def extras(self) -> NodeExtras:
        """The --extra-device nodes and --host-librknnrt file present at the last scan."""
        with self._lock:
            return self._extras

    @property
    def state(self) -> DeviceState:
        with self._lock:
            return self._state

    def subscribe(self, sink: StateSink | None = None) -> StateSink:
        """Subscribe ``sink`` (default: a new queue.Queue); it first gets the current full list."""
        subscription: StateSink = sink if sink is not None else queue.Queue()
        with self._lock:
            subscription.put(None if self._closed else self._state)
            if not self._closed:
                self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: StateSink) -> None:
        with self._lock:
            self._subscribers.discard(subscription)
        subscription.put(None)

    def close(self) -> None:
        """End every ListAndWatch stream and stop the watch loop."""
        with self._lock:
            self._closed = True
            subscribers, self._subscribers = self._subscribers, set()
        for subscription in subscribers:
            subscription.put(None)
        if self._watcher is not None:
            self._watcher.wake()

    # --- scanning ------------------------------------------------------------------------------

    def scan(self) -> bool:
        """Discover the NPU and check its nodes once; publish when anything changed. True if changed."""
        info: NpuInfo | None
        compatible: str | None = None
        try:
            info = discover_on_node(self.host, self._soc_hint, ENV_PREFIX)
            missing = [path for path in info.device_paths if not os.path.exists(self.host.local(path))]
            error = f"device node(s) missing: {', '.join(missing)}" if missing else None
            # The DaemonSet mounts only the host's /sys: discovery then reads the file where the
            # /proc/device-tree link points, and reports that resolved host path.
            compatible = info.compatible_path
        except DiscoveryError as exc:
            info, error = None, str(exc)
        extras, presence_lines = self._find_extras()
        with self._lock:
            if self._closed:
                return False
            first_info = info is not None and self._info is None
            if info is not None:
                self._info = info
                self._compatible = compatible
            self._extras = extras
            current = self._info
            self._device_error = error
            error_changed = error != self._last_error
            self._last_error = error
            changed, state = self._publish_locked()
        # Said once the extras are stored: "Allocate hands it in" is true by the time it is read.
        for level, message, path in presence_lines:
            _log.log(level, message, extra={"fields": {"path": path}})
        ids = state.ids
        if first_info and info is not None:
            _log.info(
                "NPU found",
                extra={
                    "fields": {
                        "soc": info.soc.name,
                        "cores": info.core_count,
                        "core_source": info.core_count_source,
                        "driver": info.driver_kind,
                        "driver_version": info.driver_version,
                        "nodes": list(info.device_paths),
                    }
                },
            )
            self.on_ready()
        if current is None and error_changed and error is not None:
            # The one actionable line for a node without a usable NPU; later scans stay quiet.
            _log.error(f"no usable NPU; {self.when_missing}", extra={"fields": {"error": error}})
        if changed and ids:
            self._say_health(state)
        return changed

    def set_probe_failures(self, failures: Mapping[int, str], pending: Collection[int] = ()) -> bool:
        """The functional probe's verdict: core -> why it failed (cores not named passed, or were
        not probed); ``pending`` cores wait for their first probe and are not offered meanwhile.
        Publishes when health changed; True if it did."""
        with self._lock:
            if self._closed:
                return False
            self._probe_failures = dict(failures)
            self._probe_pending = frozenset(pending)
            changed, state = self._publish_locked()
        if changed and state.ids:
            self._say_health(state)
        return changed

    def _publish_locked(self) -> tuple[bool, DeviceState]:
        """Recompute the device state from discovery + probe; push it to every stream if it changed.

        Called with the lock held: every stream sees the states in order, and a stream that
        subscribes now starts from this state, never from an older one.
        """
        current = self._info
        ids = device_ids(current.core_count, self._mode, self._replicas) if current is not None else ()
        unproven = self._probe_failures.keys() | self._probe_pending
        health = device_health(ids, self._device_error is None, unproven)
        reasons: dict[int, str] = {}
        for core in range(current.core_count if current is not None else 0):
            if self._device_error is not None:
                reasons[core] = self._device_error
            elif core in self._probe_failures:
                reasons[core] = f"failed its probe: {self._probe_failures[core]}"
            elif core in self._probe_pending:
                reasons[core] = "waits for its first probe"
        state = DeviceState(ids, health, reasons)
        if state == self._state:
            return False, state
        self._state = state
        for subscription in self._subscribers:
            subscription.put(state)
        return True, state

    def _say_health(self, state: DeviceState) -> None:
        with self._lock:
            device_error = self._device_error
            failures = dict(self._probe_failures)
            pending = sorted(self._probe_pending)
        reasons = [device_error] if device_error else []
        reasons += [f"core {core} failed its probe: {why}" for core, why in sorted(failures.items())]
        reasons += [f"core {core} waits for its first probe" for core in pending]
        _log.info(
            "health changed",
            extra={
                "fields": {
                    "healthy": [i for i in state.ids if state.health[i]],
                    "unhealthy": [i for i in state.ids if not state.health[i]],
                    **({"reason": "; ".join(reasons)} if reasons else {}),
                }
            },
        )
        self._events.health_changed(dict(state.health))

    def _find_extras(self) -> tuple[NodeExtras, list[PresenceLine]]:
        """The configured extra device nodes and host librknnrt that exist on the host now, and the
        lines that say what changed, for the caller to log once it has stored them.

        Absent ones are left out of Allocate (a missing hostPath would fail every pod's start);
        each absence is said once, and its return too.
        """
        lines: list[PresenceLine] = []
        present = tuple(
            path for path in self._extra_devices if self._note_presence(path, "extra device", lines)
        )
        librknnrt = self._host_librknnrt
        if librknnrt is not None and not self._note_presence(librknnrt, "host librknnrt", lines):
            librknnrt = None
        return NodeExtras(present, librknnrt), lines

    def _note_presence(self, host_path: str, what: str, lines: list[PresenceLine]) -> bool:
        there = os.path.exists(self.host.local(host_path))
        if not there and host_path not in self._absent:
            self._absent.add(host_path)
            message = f"{what} not on this node; Allocate leaves it out until it appears"
            lines.append((logging.WARNING, message, host_path))
        elif there and host_path in self._absent:
            self._absent.discard(host_path)
            lines.append((logging.INFO, f"{what} appeared; Allocate hands it in", host_path))
        return there

    def run(self, stop: threading.Event) -> None:
        """Scan now, then on every change in the device folders and every health interval."""
        folders = [self.host.local(p) for p in ("/dev", "/dev/dri", "/dev/dma_heap")]
        self._watcher = watcher = FolderWatcher(folders, use_inotify=self._use_inotify)
        interval = (
            self._health_interval
            if watcher.uses_inotify
            else min(self._health_interval, POLL_FALLBACK_INTERVAL)
        )
        try:
            self._guarded_scan()
            while not stop.is_set() and not self._closed:
                watcher.wait(interval)
                if stop.is_set() or self._closed:
                    break
                self._guarded_scan()
        finally:
            self._watcher = None
            watcher.close()

    def _guarded_scan(self) -> None:
        # A bug or an odd host must not end health checking: kubelet would keep stale health.
        try:
            self.scan()
        except Exception as exc:
            _log.error("health check failed; retrying", extra={"fields": {"error": repr(exc)}})
