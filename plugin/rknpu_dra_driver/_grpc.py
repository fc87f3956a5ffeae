"""The kubelet side: the Registration server (plugins_registry), served by the device plugin's
`Supervisor` (which serves it again when its socket is removed or replaced), and on the driver's
own socket the DRAPlugin v1 + v1beta1 services (gRPC messages into `ClaimStore` calls and back)
and DRAResourceHealth v1alpha1 + v1 (the `HealthBoard`'s records)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from rknpu_device_plugin.kubelet import Endpoint, Supervisor
from rknpu_serverkit import KUBELET_WAIT_NOTICE_S, KubeletWaitNotice

from ._claims import ClaimRef, PreparedClaim
from ._health import CHECK_TIMEOUT_S, HealthBoard
from ._instance import dra_socket_name, registration_socket_name
from ._kubeapi.dra.v1 import api_pb2 as v1
from ._kubeapi.dra.v1 import api_pb2_grpc as v1_grpc
from ._kubeapi.dra.v1beta1 import api_pb2 as v1beta1
from ._kubeapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from ._kubeapi.dra_health.v1 import api_pb2 as health_v1
from ._kubeapi.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from ._kubeapi.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from ._kubeapi.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from ._kubeapi.pluginregistration.v1 import api_pb2 as reg
from ._kubeapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from ._log import get_logger
from ._store import ClaimStore

_log = get_logger("kubelet")

PLUGIN_TYPE = "DRAPlugin"
"""kubelet's pluginwatcher type for DRA drivers (k8s.io/kubelet pluginregistration/v1 DRAPlugin)."""
SUPPORTED_SERVICES = (
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
)
"""kubelet's names for the services (DRAPluginService in k8s.io/kubelet pkg/apis/dra/*/types.go,
DRAResourceHealthService in pkg/apis/dra-health/v1/types.go; the library lists v1alpha1 by its
service name too). A kubelet ignores the names it does not know."""
WORKERS = 8
"""Prepare/unprepare calls and the kubelet's health streams (one per plugin connection)."""
REGISTRATION_STOP_S = 1.5
"""Stop: how long the registration socket's supervisor gets to stop serving and remove it."""


def _prepare_answer(pb: Any, store: ClaimStore, claims: Any) -> Any:
    response = pb.NodePrepareResourcesResponse()
    for claim in claims:
        result = store.prepare(ClaimRef(claim.namespace, claim.name, claim.uid))
        entry = response.claims[claim.uid]
        if result.claim is None:
            entry.error = result.error
        else:
            entry.devices.extend(_devices(pb, result.claim))
    return response


def _devices(pb: Any, prepared: PreparedClaim) -> list[Any]:
    return [
        pb.Device(
            # The base request: the kubelet matches containers by it, never by "req/subrequest".
            request_names=[device.base_request] if device.request else [],
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=[prepared.request_cdi_id(device.request)],
        )
        for device in prepared.devices
    ]


def _unprepare_answer(pb: Any, store: ClaimStore, claims: Any) -> Any:
    response = pb.NodeUnprepareResourcesResponse()
    for claim in claims:
        error = store.unprepare(ClaimRef(claim.namespace, claim.name, claim.uid))
        response.claims[claim.uid].error = error
    return response


class DraV1Service(v1_grpc.DRAPluginServicer):
    def __init__(self, store: ClaimStore) -> None:
        self._store = store

    def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodePrepareResourcesResponse:
        answer: v1.NodePrepareResourcesResponse = _prepare_answer(v1, self._store, request.claims)
        return answer

    def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodeUnprepareResourcesResponse:
        answer: v1.NodeUnprepareResourcesResponse = _unprepare_answer(v1, self._store, request.claims)
        return answer


class DraV1beta1Service(v1beta1_grpc.DRAPluginServicer):
    def __init__(self, store: ClaimStore) -> None:
        self._store = store

    def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodePrepareResourcesResponse:
        answer: v1beta1.NodePrepareResourcesResponse = _prepare_answer(v1beta1, self._store, request.claims)
        return answer

    def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        answer: v1beta1.NodeUnprepareResourcesResponse = _unprepare_answer(
            v1beta1, self._store, request.claims
        )
        return answer


def _health_answer(pb: Any, board: HealthBoard, context: grpc.ServicerContext) -> Iterator[Any]:
    ended = threading.Event()
    context.add_callback(ended.set)  # the kubelet hung up
    for records in board.follow(ended):
        yield pb.NodeWatchResourcesResponse(
            devices=[
                pb.DeviceHealth(
                    device=pb.DeviceIdentifier(pool_name=r.pool, device_name=r.device),
                    health=pb.HEALTHY if r.healthy else pb.UNHEALTHY,
                    last_updated_time=r.updated,
                    health_check_timeout_seconds=CHECK_TIMEOUT_S,
                    message=r.message,
                )
                for r in records
            ]
        )


class HealthV1Service(health_v1_grpc.DRAResourceHealthServicer):
    def __init__(self, board: HealthBoard) -> None:
        self._board = board

    def NodeWatchResources(
        self, request: health_v1.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_v1.NodeWatchResourcesResponse]:
        return _health_answer(health_v1, self._board, context)


class HealthV1alpha1Service(health_v1alpha1_grpc.DRAResourceHealthServicer):
    def __init__(self, board: HealthBoard) -> None:
        self._board = board

    def NodeWatchResources(
        self, request: health_v1alpha1.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_v1alpha1.NodeWatchResourcesResponse]:
        return _health_answer(health_v1alpha1, self._board, context)


class RegistrationService(reg_grpc.RegistrationServicer):
    def __init__(
        self, driver_name: str, endpoint: Path, kubelet_wait: KubeletWaitNotice | None = None
    ) -> None:
        self._driver_name = driver_name
        self._endpoint = endpoint
        self._kubelet_wait = kubelet_wait
        self.registered = threading.Event()
        self.on_status: Callable[[bool, str], None] = lambda ok, error: None

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=self._driver_name,
            endpoint=str(self._endpoint),
            supported_versions=list(SUPPORTED_SERVICES),
        )

    def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        if request.plugin_registered:
            _log.info("registered with the kubelet", extra={"fields": {"driver": self._driver_name}})
            if self._kubelet_wait is not None:
                self._kubelet_wait.stop()
            self.registered.set()
        else:
            _log.error("the kubelet refused the registration", extra={"fields": {"error": request.error}})
        self.on_status(request.plugin_registered, request.error)
        return reg.RegistrationStatusResponse()

    def add_to(self, server: grpc.aio.Server) -> None:
        """For the `Supervisor`: the handlers are plain functions, run on its server's thread pool."""
        reg_grpc.add_RegistrationServicer_to_server(self, server)

    async def end_streams(self, timeout: float) -> None:
        """No streams to end."""


class _ServedForDiscovery:
    """The registration socket's strategy for the `Supervisor`: nothing to call (the kubelet finds
    the socket in plugins_registry and calls GetInfo), nothing ends a generation but the socket's
    removal or replacement (the supervisor compares its inode and ctime)."""

    def register(self, endpoint: Endpoint, wake: threading.Event, stop: threading.Event) -> bool:
        return True

    def registered(self, endpoint: Endpoint, generation: int, seconds: float) -> None:
        _log.info("serving", extra={"fields": {"socket": str(endpoint.socket_path)}})

    def restart_reason(self, endpoint: Endpoint) -> str | None:
        return None


def _answers(path: Path) -> bool:
    """Whether something accepts connections on the unix socket (a dead instance's refuse)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


class KubeletServers:
    """Both servers: the DRA socket is served before the registration socket appears, so the
    kubelet, which dials the endpoint as soon as it sees the registration socket, finds it ready.
    The registration socket is the device plugin's `Supervisor`'s, on a thread of its own: it
    serves the socket and serves it again whenever it is removed or replaced (someone cleaned the
    folder), and the kubelet then registers us again.

    With an instance id (a rolling update) the socket names are the instance's own, so an old and
    a new instance serve side by side; the kubelet (1.33+) calls the newest registered one."""

    def __init__(
        self,
        store: ClaimStore,
        board: HealthBoard,
        driver_name: str,
        plugin_dir: Path,
        registration_dir: Path,
        instance_id: str = "",
        use_inotify: bool = True,
        kubelet_wait_notice: float = KUBELET_WAIT_NOTICE_S,
    ) -> None:
        self.driver_name = driver_name
        self.instance_id = instance_id
        self.dra_socket = plugin_dir / dra_socket_name(instance_id)
        self.registration_socket = registration_dir / registration_socket_name(
            registration_dir, driver_name, instance_id
        )
        self._kubelet_wait = KubeletWaitNotice(
            _log, registration_dir, "--registration-dir", kubelet_wait_notice
        )
        self.registration = RegistrationService(driver_name, self.dra_socket, self._kubelet_wait)
        self._board = board
        self._dra = grpc.server(ThreadPoolExecutor(WORKERS, thread_name_prefix="dra"))
        v1_grpc.add_DRAPluginServicer_to_server(DraV1Service(store), self._dra)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1Service(store), self._dra)
        health_v1_grpc.add_DRAResourceHealthServicer_to_server(HealthV1Service(board), self._dra)
        health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(HealthV1alpha1Service(board), self._dra)
        endpoint = Endpoint(registration_dir, self.registration_socket.name, driver_name)
        self._supervisor = Supervisor(
            registration_dir,
            lambda: endpoint,
            self.registration,
            _ServedForDiscovery(),
            # Armed before each serving (the kubelet may call as soon as the socket appears), and
            # disarmed by its NotifyRegistrationStatus: one line if it has not come in time.
            before_serve=self._kubelet_wait.start,
            use_inotify=use_inotify,
        )
        self._stopping = threading.Event()
        self._supervising: threading.Thread | None = None

    def _remove_dead_sockets(self) -> None:
        """Sockets of instances that died without cleaning up (kill -9): nobody answers on them,
        and the kubelet would keep trying them."""
        folders = (
            (
                self.registration_socket.parent,
                (f"{self.driver_name}-reg.sock", f"{self.driver_name}-*-reg.sock"),
            ),
            (self.dra_socket.parent, ("dra.sock", "dra-*.sock")),
        )
        for folder, patterns in folders:
            for pattern in patterns:
                for path in folder.glob(pattern) if folder.is_dir() else ():
                    if path in (self.dra_socket, self.registration_socket) or not _answers(path):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(path)
                            _log.info(
                                "removed a dead instance's socket", extra={"fields": {"socket": str(path)}}
                            )

    def _serve(self, server: grpc.Server, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        os.chmod(path, 0o600)
        _log.info("serving", extra={"fields": {"socket": str(path)}})

    def start(self) -> None:
        """Serve both sockets (mode 0600: only the kubelet, as root, may call us)."""
        self._remove_dead_sockets()
        self._serve(self._dra, self.dra_socket)
        self._supervising = threading.Thread(
            target=self._supervisor.run, args=(self._stopping,), name="registration", daemon=True
        )
        self._supervising.start()

    def stop(self) -> None:
        """Registration first (the kubelet deregisters on its removal and turns to another
        instance), then the health streams end, then the DRA socket with a short grace."""
        self._stopping.set()
        self._kubelet_wait.stop()
        self._supervisor.wake()
        if self._supervising is not None:
            self._supervising.join(REGISTRATION_STOP_S)  # it stops serving and removes the socket
        self._board.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.dra_socket)
        self._dra.stop(grace=0.5).wait(1.0)
