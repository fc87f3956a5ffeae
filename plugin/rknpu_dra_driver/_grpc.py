"""The kubelet side: the Registration server (plugins_registry) and the DRAPlugin v1 + v1beta1
servers on the driver's own socket, turning gRPC messages into `ClaimStore` calls and back."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from ._claims import ClaimRef, PreparedClaim
from ._kubeapi.dra.v1 import api_pb2 as v1
from ._kubeapi.dra.v1 import api_pb2_grpc as v1_grpc
from ._kubeapi.dra.v1beta1 import api_pb2 as v1beta1
from ._kubeapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from ._kubeapi.pluginregistration.v1 import api_pb2 as reg
from ._kubeapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from ._log import get_logger
from ._store import ClaimStore

_log = get_logger("kubelet")

PLUGIN_TYPE = "DRAPlugin"
"""kubelet's pluginwatcher type for DRA drivers (k8s.io/kubelet pluginregistration/v1 DRAPlugin)."""
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""kubelet's names for the services (DRAPluginService in k8s.io/kubelet pkg/apis/dra/*/types.go)."""
DRA_SOCKET_NAME = "dra.sock"
WORKERS = 8


def registration_socket_name(driver_name: str) -> str:
    return f"{driver_name}-reg.sock"


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


class RegistrationService(reg_grpc.RegistrationServicer):
    def __init__(self, driver_name: str, endpoint: Path) -> None:
        self._driver_name = driver_name
        self._endpoint = endpoint
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
            self.registered.set()
        else:
            _log.error("the kubelet refused the registration", extra={"fields": {"error": request.error}})
        self.on_status(request.plugin_registered, request.error)
        return reg.RegistrationStatusResponse()


class KubeletServers:
    """Both servers: the DRA socket is served before the registration socket appears, so the
    kubelet, which dials the endpoint as soon as it sees the registration socket, finds it ready."""

    def __init__(self, store: ClaimStore, driver_name: str, plugin_dir: Path, registration_dir: Path) -> None:
        self.dra_socket = plugin_dir / DRA_SOCKET_NAME
        self.registration_socket = registration_dir / registration_socket_name(driver_name)
        self.registration = RegistrationService(driver_name, self.dra_socket)
        self._dra = grpc.server(ThreadPoolExecutor(WORKERS, thread_name_prefix="dra"))
        v1_grpc.add_DRAPluginServicer_to_server(DraV1Service(store), self._dra)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1Service(store), self._dra)
        self._reg = grpc.server(ThreadPoolExecutor(2, thread_name_prefix="registration"))
        reg_grpc.add_RegistrationServicer_to_server(self.registration, self._reg)

    def start(self) -> None:
        """Serve both sockets (mode 0600: only the kubelet, as root, may call us). The caller holds
        the node's instance lock, so any socket of these names is a dead instance's: replaced."""
        for server, path in ((self._dra, self.dra_socket), (self._reg, self.registration_socket)):
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            server.add_insecure_port(f"unix://{path}")
            server.start()
            os.chmod(path, 0o600)
            _log.info("serving", extra={"fields": {"socket": str(path)}})

    def stop(self) -> None:
        """Registration first (the kubelet deregisters on its removal), then the DRA socket."""
        for server, path in ((self._reg, self.registration_socket), (self._dra, self.dra_socket)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            server.stop(grace=0.5).wait(1.0)
