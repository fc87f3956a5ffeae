"""The DRA driver: its rooms composed. The node's NPU (`rknpu_node`), the API server
(`apiserver/`), the claims (`claims/`), the slices (`slices/`) and the kubelet's sockets
(`kubelet/`) are built here once the instance lock is ours, run as the actors of one group, and
stopped one way: the sockets first (the kubelet stops calling, or turns to another instance),
then the loops. The slices stay (a restart or an upgrade never shows the node without devices)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from rknnlaunch import __version__
from rknnlaunch.npu import HostRoot
from rknpu_serverkit import ActorGroup, closing_actor

from . import kubelet
from ._log import get_logger
from ._settings import DraSettings
from .apiserver import KubeApi

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from rknpu_node import ResourceManager
    from rknpu_serverkit import MetricsServer

    from ._metrics import DraMetrics
    from .claims import ClaimStore
    from .kubelet import KubeletServers
    from .slices import NodeFacts, SlicePublisher

# The rooms load in `_serve`, once the API client's own import (most of a start) is under way on
# its thread: the sockets and prepared claims need no API.

STOP_BUDGET_S = 1.5
"""How long a stop may take, for all the actors together."""
_log = get_logger()
Actor = tuple[Callable[[], None], Callable[[], None]]


class Driver:
    """One instance of the driver on one node. Without an instance id it waits for the node's
    instance lock first; with one it serves beside others with ids (and waits only for one
    without)."""

    def __init__(self, settings: DraSettings) -> None:
        self.settings = settings
        self.host = HostRoot(settings.host_root)
        # The API client's import is most of a start: it loads on a thread while the rest comes
        # up (discovery, the checkpoint, the sockets: prepared claims need no API).
        self.api = KubeApi(settings.kubeconfig, settings.api_timeout, settings.api_client)
        self.api.check_config()
        self.api_built = _start_api_client(self.api)

    def run(self, stop: threading.Event | None = None) -> int:
        """Serve until SIGTERM/SIGINT (or ``stop``); 0 on a clean stop."""
        settings = self.settings
        fields = {"version": __version__, "driver": settings.driver_name, "node": settings.node_name}
        fields["plugin_dir"] = str(settings.resolved_plugin_dir)
        if settings.instance_id:
            fields["instance"] = settings.instance_id
        _log.info("starting", extra={"fields": fields})
        lock = self._take_over(stop)
        if lock is None:
            self.api.close()
            _log.info("stopped before taking over")
            return 0
        try:
            self._serve(stop)
        finally:
            self.api.close()
            kubelet.release(lock)
        _log.info("stopped")
        return 0

    def _take_over(self, stop: threading.Event | None) -> int | None:
        """The instance lock's fd, once ours (None when stopped first)."""
        waiting = ActorGroup(stop_timeout=STOP_BUDGET_S)
        waiting.add_signals()
        waiting.add(*_external_stop(stop), name="stop")
        lock_stop = threading.Event()
        plugin_dir, shared = self.settings.resolved_plugin_dir, bool(self.settings.instance_id)
        waiting.add(
            lambda: kubelet.acquire(plugin_dir, lock_stop, shared=shared), lock_stop.set, name="instance-lock"
        )
        lock: int | None = waiting.run()
        return lock

    def _serve(self, stop: threading.Event | None) -> None:
        from ._metrics import DraMetrics

        settings = self.settings
        metrics = DraMetrics(_metrics_registry(settings.metrics_address))
        resources, store, publisher = self._claims_and_slices(metrics)
        from .kubelet import HealthBoard, KubeletServers

        board = HealthBoard(resources, settings.node_name)
        # The board hands the gauges the health it has: a callback reading resources.state under
        # the ResourceManager's lock would deadlock the health loop and every prepare.
        board.notify(metrics.collect_health)
        servers = KubeletServers(
            store, board, settings.driver_name, settings.resolved_plugin_dir, settings.registration_dir,
            settings.instance_id, settings.inotify, settings.kubelet_wait_notice,
        )  # fmt: skip
        servers.start()
        metrics_server = self._metrics_server(metrics, servers, publisher)
        try:
            self._run_actors(stop, store, publisher, servers, resources)
        finally:
            _log.info("stopping")
            built = self.api_built.done() and self.api_built.exception() is None
            if settings.delete_slices_on_stop and built:
                publisher.delete_all()
            store.close()
            if metrics_server is not None:
                metrics_server.stop()

    def _claims_and_slices(self, metrics: DraMetrics) -> tuple[ResourceManager, ClaimStore, SlicePublisher]:
        """The node's NPU scanned, the claim store loaded from its checkpoint, the slice publisher
        (woken once the API client is ready)."""
        from rknpu_node import NullEvents, node_resources

        from .claims import ClaimStore, boot_id
        from .slices import SlicePublisher, node_facts

        settings, api = self.settings, self.api
        resources = node_resources(settings, NullEvents())
        resources.when_missing = "publishing no devices and re-scanning for a late driver load"
        resources.scan()
        facts = node_facts(self.host, settings.host_librknnrt, vpu=settings.vpu)
        if settings.vpu:
            _log_video(facts, settings.host_root)
        store = ClaimStore(
            api, resources, settings.driver_name, settings.node_name, settings.resolved_plugin_dir,
            settings.cdi_dir, boot_id=boot_id(self.host), metrics=metrics, facts=facts,
            max_shares=settings.max_shares,
        )  # fmt: skip
        store.load()
        metrics.watch(store.count)
        publisher = SlicePublisher(
            api, resources, settings.node_name, settings.driver_name, facts,
            layout=settings.slice_layout, metrics=metrics, max_shares=settings.max_shares,
        )  # fmt: skip
        api.on_ready = publisher.wake
        if api.ready:
            publisher.wake()
        return resources, store, publisher

    def _metrics_server(
        self, metrics: DraMetrics, servers: KubeletServers, publisher: SlicePublisher
    ) -> MetricsServer | None:
        if metrics.registry is None or not self.settings.metrics_address:
            return None
        from rknpu_serverkit import MetricsServer

        def ready() -> bool:
            """/readyz: the kubelet registered us and the first slice is up; a rolling update
            stops the old pod only then (minReadySeconds in deploy/dra/daemonset.yaml)."""
            return servers.registration.registered.is_set() and publisher.in_sync.is_set()

        return MetricsServer(self.settings.metrics_address, metrics.registry, ready=ready)

    def _run_actors(
        self,
        stop: threading.Event | None,
        store: ClaimStore,
        publisher: SlicePublisher,
        servers: KubeletServers,
        resources: ResourceManager,
    ) -> None:
        from rknpu_node import NullEvents, health_actor, probe_actor

        # Interrupts run in the order added: the sockets go first (the kubelet stops calling, or
        # turns to the other instance), then the health and publishing loops. The slices stay.
        serving = ActorGroup(stop_timeout=STOP_BUDGET_S)
        serving.add_signals()
        serving.add(*_external_stop(stop), name="stop")
        serving.add_task(self.api_built.result, name="api-client")  # no client: the driver stops
        serving.add(*closing_actor(servers.stop), name="kubelet-servers")
        serving.add(*health_actor(resources), name="health")
        if self.settings.probe_model is not None:

            def held() -> set[int]:  # a prepared claim's cores are its pod's: never probed
                return {core for claim in store.claims.values() for core in claim.cores}

            serving.add(*probe_actor(resources, NullEvents(), self.settings, held), name="probe")
        serving.add(*self._publishing(publisher), name="slices")
        serving.add(*self._cleaning_stale(store), name="stale-claims")
        serving.run()

    def _publishing(self, publisher: SlicePublisher) -> Actor:
        stop = threading.Event()

        def interrupt() -> None:
            stop.set()
            publisher.wake()
            publisher.stop_calls()  # a slow API call must not hold the loop past the stop budget
            self.api.close()

        return lambda: publisher.run(stop), interrupt

    def _cleaning_stale(self, store: ClaimStore) -> Actor:
        stop = threading.Event()
        threads: list[threading.Thread] = []

        def execute() -> None:
            from .claims import clean_stale_loop

            threads.append(threading.current_thread())
            clean_stale_loop(store, self.api, stop)

        def interrupt() -> None:
            stop.set()
            self.api.stop_calls_of(*threads)

        return execute, interrupt


def _external_stop(stop: threading.Event | None) -> Actor:
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


def _start_api_client(api: KubeApi) -> Future[None]:
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


def _metrics_registry(address: str | None) -> CollectorRegistry | None:
    if not address:
        return None
    from prometheus_client import CollectorRegistry, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    return registry


def _log_video(facts: NodeFacts, host_root: object) -> None:
    """--vpu: one line saying what the slice offers as the `vpu` device, or why nothing."""
    if facts.video is None:
        _log.warning(
            "--vpu: no /dev/mpp_service on this node; publishing no vpu device (load the vendor MPP "
            "driver, or mount the host's /dev under --host-root)",
            extra={"fields": {"host_root": str(host_root)}},
        )
        return
    _log.info(
        "publishing the video blocks as device vpu",
        extra={"fields": {"devices": list(facts.video.device_paths)}},
    )
