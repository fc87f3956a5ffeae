"""The node's NPU as a server runs it: the resource manager built from a server's settings, and its
health loop and functional probe loop as actors (execute, interrupt) of the server's group. Both
servers wire them here, once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Protocol

from rknnlaunch.npu import HostRoot, soc_by_name

from ._events import PluginEvents
from ._manager import ResourceManager
from ._policy import Mode
from ._probe import ProbeLoop, ProbeRunner

Actor = tuple[Callable[[], None], Callable[[], None]]
"""(execute, interrupt), as `rknpu_serverkit.ActorGroup.add` takes them."""


class NodeSettings(Protocol):
    """What both servers' settings say about the node's NPU."""

    @property
    def host_root(self) -> Path: ...
    @property
    def soc(self) -> str | None: ...
    @property
    def health_interval(self) -> float: ...
    @property
    def inotify(self) -> bool: ...
    @property
    def extra_device(self) -> tuple[str, ...]: ...
    @property
    def host_librknnrt(self) -> str | None: ...
    @property
    def probe_timeout(self) -> float: ...
    @property
    def probe_interval(self) -> float: ...
    def resolved_probe_model(self, soc_name: str) -> Path | None: ...


def node_resources(
    settings: NodeSettings, events: PluginEvents, mode: Mode = "core", replicas: int = 1
) -> ResourceManager:
    """The resource manager of the node's NPU (not scanned yet: `ResourceManager.scan`)."""
    return ResourceManager(
        HostRoot(settings.host_root),
        events,
        mode=mode,
        replicas=replicas,
        soc_hint=soc_by_name(settings.soc) if settings.soc else None,
        health_interval=settings.health_interval,
        use_inotify=settings.inotify,
        extra_devices=settings.extra_device,
        host_librknnrt=settings.host_librknnrt,
    )


def health_actor(resources: ResourceManager) -> Actor:
    """The health loop (driver re-checks, device node events) until interrupted."""
    stop = threading.Event()

    def interrupt() -> None:
        stop.set()
        resources.close()

    return lambda: resources.run(stop), interrupt


def probe_actor(
    resources: ResourceManager,
    events: PluginEvents,
    settings: NodeSettings,
    held_cores: Callable[[], Collection[int]],
) -> Actor:
    """The per-core functional probe on the free cores (``held_cores`` are a pod's, never probed).
    No core is offered until its first verdict: the probe begins now, and again when the NPU is
    found late (before ``resources.on_ready``'s earlier listener hears of it)."""
    probe = ProbeLoop(
        resources,
        events,
        ProbeRunner(settings.probe_timeout, settings.host_root),
        settings.resolved_probe_model,
        held_cores,
        settings.probe_interval,
    )
    probe.begin()
    announce = resources.on_ready

    def on_ready() -> None:
        probe.begin()
        announce()

    resources.on_ready = on_ready
    stop = threading.Event()

    def interrupt() -> None:
        stop.set()
        probe.close()

    return lambda: probe.run(stop), interrupt
