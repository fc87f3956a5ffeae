"""The registration socket's service (pluginregistration v1, served for the kubelet's plugin
watcher in plugins_registry) and its strategy for the kit's `Supervisor`."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import grpc.aio

from rknpu_serverkit import Endpoint, KubeletWaitNotice

from .._kubeapi.pluginregistration.v1 import api_pb2 as reg
from .._kubeapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from .._log import get_logger

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


class RegistrationService(reg_grpc.RegistrationServicer):
    def __init__(
        self, driver_name: str, endpoint: Path, kubelet_wait: KubeletWaitNotice | None = None
    ) -> None:
        self._driver_name = driver_name
        self._endpoint = endpoint
        self._kubelet_wait = kubelet_wait
        self.registered = threading.Event()

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
        return reg.RegistrationStatusResponse()

    def add_to(self, server: grpc.aio.Server) -> None:
        """For the `Supervisor`: the handlers are plain functions, run on its server's thread pool."""
        reg_grpc.add_RegistrationServicer_to_server(self, server)

    async def end_streams(self, timeout: float) -> None:
        """No streams to end."""


class ServedForDiscovery:
    """The registration socket's strategy for the `Supervisor`: nothing to call (the kubelet finds
    the socket in plugins_registry and calls GetInfo), nothing ends a generation but the socket's
    removal or replacement (the supervisor compares its inode and ctime)."""

    def register(self, endpoint: Endpoint, wake: threading.Event, stop: threading.Event) -> bool:
        return True

    def registered(self, endpoint: Endpoint, generation: int, seconds: float) -> None:
        _log.info("serving", extra={"fields": {"socket": str(endpoint.socket_path)}})

    def restart_reason(self, endpoint: Endpoint) -> str | None:
        return None
