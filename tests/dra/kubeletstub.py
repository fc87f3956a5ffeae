"""A kubelet stub for the DRA driver's tests: the plugin watcher's registration handshake and the
DRA v1 / v1beta1 calls, over the driver's real unix sockets (stubs generated from the upstream
protos in proto/, the messages the kubelet's pluginwatcher and DRA manager send)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc

from rknpu_dra_driver._kubeapi.dra.v1 import api_pb2 as v1
from rknpu_dra_driver._kubeapi.dra.v1 import api_pb2_grpc as v1_grpc
from rknpu_dra_driver._kubeapi.dra.v1beta1 import api_pb2 as v1beta1
from rknpu_dra_driver._kubeapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from rknpu_dra_driver._kubeapi.pluginregistration.v1 import api_pb2 as reg
from rknpu_dra_driver._kubeapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc

KUBELET_DEADLINE_S = 10.0


def wait_for_socket(path: Path, timeout: float = 10.0) -> None:
    """The pluginwatcher's job (it uses inotify): wait until a socket file appears and answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            channel = grpc.insecure_channel(f"unix://{path}")
            try:
                grpc.channel_ready_future(channel).result(timeout=max(deadline - time.monotonic(), 0.01))
                return
            except grpc.FutureTimeoutError:
                pass
            finally:
                channel.close()
        time.sleep(0.01)  # polling the folder as the kubelet's fallback does (no inotify in a test)
    raise TimeoutError(f"{path} never appeared")


class KubeletStub:
    def __init__(self, registration_socket: Path) -> None:
        self.registration_socket = registration_socket
        self.info: reg.PluginInfo | None = None
        self._channels: list[grpc.Channel] = []

    def register(self, timeout: float = 10.0) -> reg.PluginInfo:
        """GetInfo, then NotifyRegistrationStatus(registered), as kubelet's pluginwatcher does."""
        wait_for_socket(self.registration_socket, timeout)
        with grpc.insecure_channel(f"unix://{self.registration_socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info: reg.PluginInfo = stub.GetInfo(reg.InfoRequest(), timeout=KUBELET_DEADLINE_S)
            stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True), timeout=KUBELET_DEADLINE_S
            )
        self.info = info
        return info

    def _stub(self, version: str) -> tuple[Any, Any]:
        if self.info is None:
            raise RuntimeError("register first")
        if not self._channels:  # one connection, as the kubelet keeps per plugin
            self._channels.append(grpc.insecure_channel(f"unix://{self.info.endpoint}"))
        channel = self._channels[0]
        if version == "v1":
            return v1, v1_grpc.DRAPluginStub(channel)
        return v1beta1, v1beta1_grpc.DRAPluginStub(channel)

    def prepare(self, claims: list[tuple[str, str, str]], version: str = "v1") -> Any:
        """``claims`` as (namespace, name, uid); the response message."""
        pb, stub = self._stub(version)
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
        )
        return stub.NodePrepareResources(request, timeout=KUBELET_DEADLINE_S)

    def unprepare(self, claims: list[tuple[str, str, str]], version: str = "v1") -> Any:
        pb, stub = self._stub(version)
        request = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
        )
        return stub.NodeUnprepareResources(request, timeout=KUBELET_DEADLINE_S)

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        self._channels.clear()
