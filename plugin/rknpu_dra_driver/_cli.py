"""The `rknpu-dra-driver` entry point: settings, wiring, signals, and the one place errors become
exit codes (as the device plugin's: 0 clean stop, 1 failure, 2 bad settings)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from rknnlaunch import __version__
from rknnlaunch.npu import HostRoot, soc_by_name
from rknpu_serverkit import ActorGroup, closing_actor, server_main

from ._log import LOGGER_NAME, get_logger, setup_logging
from ._settings import PROG, DraSettings, build_parser, settings_from
from ._slices import NodeFacts

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from rknpu_device_plugin.devices import ResourceManager

    from ._kube import KubeApi
    from ._store import ClaimStore

SHUTDOWN_JOIN_SECONDS = 1.5
_log = get_logger()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the driver until SIGTERM/SIGINT (`rknpu_serverkit.server_main`: exit codes, and the
    process ends there when run as the program)."""
    return server_main(
        argv,
        prog=PROG,
        logger_name=LOGGER_NAME,
        build_parser=build_parser,
        settings_from=settings_from,
        setup_logging=setup_logging,
        run=run,
        preflight=_preflight,
    )


def _preflight(settings: DraSettings) -> None:
    """Every input checked before the lock is taken or a socket bound (exit 2 on a bad one)."""
    from ._preflight import preflight

    preflight(settings, os.environ)


def node_facts(host: HostRoot, host_librknnrt: str | None) -> NodeFacts:
    """The board model (device tree) and the host runtime's version, when the node has them."""
    from rknnlaunch.npu import LIBRKNNRT_PATH, find_librknnrt

    model = None
    for path in ("/sys/firmware/devicetree/base/model", "/proc/device-tree/model"):
        try:
            model = host.read_text(path).strip("\0\n ") or None
            break
        except OSError:
            continue
    version = None
    try:
        found = find_librknnrt(host, host_librknnrt or LIBRKNNRT_PATH)
        version = found.version if found is not None else None
    except OSError:
        pass
    return NodeFacts(board_model=model, librknnrt_version=version)


def _external_stop(stop: threading.Event | None) -> tuple[Callable[[], None], Callable[[], None]]:
    """An actor that returns when a caller's ``stop`` is set (tests, the benchmark); its interrupt
    ends it without setting ``stop`` (the caller's flag stays theirs)."""
    done = threading.Event()

    def execute() -> None:
        if stop is None:
            done.wait()
            return
        # Two flags to wait on: a short poll of the caller's, only when a caller passed one.
        while not done.is_set() and not stop.wait(0.05):
            pass

    return execute, done.set


def start_api_client(api: KubeApi) -> Future[None]:
    """Build the API client on a thread of its own; its outcome is the future's. Served as a task of
    the serving group (``add_task(future.result)``), a client that cannot be built (a kubeconfig
    that passed the start-up checks, yet is refused by the client) stops the driver with its one
    line, instead of a driver that serves with no API."""
    built: Future[None] = Future()

    def connect() -> None:
        try:
            api.connect()
        except BaseException as exc:  # every way it fails is the future's, and so the group's
            built.set_exception(exc)
        else:
            built.set_result(None)

    threading.Thread(target=connect, name="api-client", daemon=True).start()
    return built


STALE_RETRY_S = 30.0
STALE_RECHECK_S = 60.0
"""How often claims of an earlier boot that the API server still had are asked about again."""


def _metrics_registry(address: str | None) -> CollectorRegistry | None:
    if not address:
        return None
    from prometheus_client import CollectorRegistry, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    return registry


def run(settings: DraSettings, stop: threading.Event | None = None) -> int:
    """Serve until SIGTERM/SIGINT (or ``stop``); 0 on a clean stop. Without an instance id a
    driver waits for the node's instance lock first; with one it serves beside others with ids
    (and waits only for one without)."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from . import _instance
    from ._kube import KubeApi

    # The API client's import is most of a start: it loads on a thread while the rest comes up
    # (discovery, the checkpoint, the sockets: prepared claims need no API).
    api = KubeApi(settings.kubeconfig, settings.api_timeout, settings.api_client)
    api.check_config()
    api_built = start_api_client(api)  # a client that cannot be built stops the driver (its task below)

    from rknpu_device_plugin import NullEvents
    from rknpu_device_plugin.devices import ResourceManager

    from ._checkpoint import boot_id
    from ._grpc import KubeletServers
    from ._health import HealthBoard
    from ._metrics import DraMetrics
    from ._publisher import SlicePublisher
    from ._store import ClaimStore

    host = HostRoot(settings.host_root)
    plugin_dir = settings.resolved_plugin_dir
    _log.info(
        "starting",
        extra={
            "fields": {
                "version": __version__,
                "driver": settings.driver_name,
                "node": settings.node_name,
                "plugin_dir": str(plugin_dir),
                **({"instance": settings.instance_id} if settings.instance_id else {}),
            }
        },
    )
    waiting = ActorGroup(stop_timeout=SHUTDOWN_JOIN_SECONDS)
    waiting.add_signals()
    waiting.add(*_external_stop(stop), name="stop")
    lock_stop = threading.Event()
    shared = bool(settings.instance_id)
    waiting.add(
        lambda: _instance.acquire(plugin_dir, lock_stop, shared=shared), lock_stop.set, name="instance-lock"
    )
    lock: int | None = waiting.run()
    if lock is None:
        api.close()
        _log.info("stopped before taking over")
        return 0
    metrics_server = None
    try:
        metrics = DraMetrics(_metrics_registry(settings.metrics_address))
        resources = ResourceManager(
            host,
            NullEvents(),
            mode="core",
            soc_hint=soc_by_name(settings.soc) if settings.soc else None,
            health_interval=settings.health_interval,
            use_inotify=settings.inotify,
            extra_devices=settings.extra_device,
            host_librknnrt=settings.host_librknnrt,
        )
        resources.when_missing = "publishing no devices and re-scanning for a late driver load"
        resources.scan()
        store = ClaimStore(
            api,
            resources,
            settings.driver_name,
            settings.node_name,
            plugin_dir,
            settings.cdi_dir,
            boot_id=boot_id(host),
            metrics=metrics,
        )
        store.load()
        publisher = SlicePublisher(
            api,
            resources,
            settings.node_name,
            settings.driver_name,
            node_facts(host, settings.host_librknnrt),
            layout=settings.slice_layout,
            metrics=metrics,
        )
        api.on_ready = publisher.wake
        if api.ready:
            publisher.wake()
        board = HealthBoard(resources, settings.node_name)
        metrics.watch(store.count)
        # The board hands the gauges the health it has: a callback reading resources.state under
        # the ResourceManager's lock would deadlock the health loop and every prepare.
        board.notify(metrics.collect_health)
        servers = KubeletServers(
            store,
            board,
            settings.driver_name,
            plugin_dir,
            settings.registration_dir,
            settings.instance_id,
            settings.inotify,
            settings.kubelet_wait_notice,
        )
        servers.start()
        if metrics.registry is not None and settings.metrics_address:
            from rknpu_device_plugin.telemetry import MetricsServer

            def ready() -> bool:
                """/readyz: the kubelet registered us and the first slice is up; a rolling update
                stops the old pod only then (minReadySeconds in deploy/dra/daemonset.yaml)."""
                return servers.registration.registered.is_set() and publisher.in_sync.is_set()

            metrics_server = MetricsServer(settings.metrics_address, metrics.registry, ready=ready)
        # Interrupts run in the order added: the sockets go first (the kubelet stops calling, or
        # turns to the other instance), then the health and publishing loops. The slices stay.
        serving = ActorGroup(stop_timeout=SHUTDOWN_JOIN_SECONDS)
        serving.add_signals()
        serving.add(*_external_stop(stop), name="stop")
        serving.add_task(api_built.result, name="api-client")  # no client: the driver stops
        serving.add(*closing_actor(servers.stop), name="kubelet-servers")
        health_stop = threading.Event()

        def stop_health() -> None:
            health_stop.set()
            resources.close()

        serving.add(lambda: resources.run(health_stop), stop_health, name="health")
        if settings.probe_model is not None:
            serving.add(*_probe_actor(settings, resources, store), name="probe")
        publish_stop = threading.Event()

        def stop_publisher() -> None:
            publish_stop.set()
            publisher.wake()
            api.close()

        serving.add(lambda: publisher.run(publish_stop), stop_publisher, name="slices")
        stale_stop = threading.Event()
        serving.add(lambda: _clean_stale(store, api, stale_stop), stale_stop.set, name="stale-claims")
        try:
            serving.run()
        finally:
            _log.info("stopping")
            if settings.delete_slices_on_stop and api_built.done() and api_built.exception() is None:
                publisher.delete_all()
            store.close()
    finally:
        if metrics_server is not None:
            metrics_server.stop()
        api.close()
        _instance.release(lock)
    _log.info("stopped")
    return 0


def _probe_actor(
    settings: DraSettings, resources: ResourceManager, store: ClaimStore
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The device plugin's per-core probe on the free cores (a prepared claim's cores are its
    pod's): its verdicts feed the ResourceManager, so the slice and the health stream follow."""
    from rknpu_device_plugin import NullEvents
    from rknpu_device_plugin.devices import ProbeLoop, ProbeRunner

    def held() -> set[int]:
        return {core for claim in store.claims.values() for core in claim.cores}

    probe = ProbeLoop(
        resources,
        NullEvents(),
        ProbeRunner(settings.probe_timeout, settings.host_root),
        settings.resolved_probe_model,
        held,
        settings.probe_interval,
    )
    probe.begin()  # no core is offered until its first verdict
    stop = threading.Event()

    def interrupt() -> None:
        stop.set()
        probe.close()

    return lambda: probe.run(stop), interrupt


def _clean_stale(
    store: ClaimStore, api: KubeApi, stop: threading.Event, recheck: float = STALE_RECHECK_S
) -> None:
    """Once the API answers: drop the claims of an earlier boot that no longer hold their cores,
    again every ``recheck`` seconds while any remain (a claim the API still had at start may be
    deleted or deallocated later, and the kubelet never unprepares an earlier boot's claim); then
    wait for ``stop`` (an actor that returns would end the group)."""
    from ._kube import ApiError

    while not stop.is_set() and not api.wait_ready(1.0):
        pass
    while not stop.is_set():
        try:
            remaining = store.clean_stale()
        except ApiError as exc:
            _log.debug("stale claims not checked yet", extra={"fields": {"error": str(exc)}})
            stop.wait(STALE_RETRY_S)
            continue
        if remaining == 0:  # no claim of an earlier boot can appear in this one
            break
        stop.wait(recheck)
    stop.wait()
