"""A kubelet stub for the DRA driver's tests: the plugin watcher's registration handshake, the
DRA v1 / v1beta1 calls and the DRAResourceHealth stream, over the driver's real unix sockets (stubs
generated from the upstream protos in proto/, the messages the kubelet's pluginwatcher and DRA
manager send).

As the upstream kubelet (1.33+): several registrations of one driver are kept (a rolling update's
old and new pod), calls go to the most recently registered one whose socket is still there, and a
removed registration socket drops that plugin. `kubelet_starts` does what a starting kubelet does
to the API server: it deletes every ResourceSlice of its node.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
from awaiting import PATIENCE

from rknpu_dra_driver._kubeapi.dra.v1 import api_pb2 as v1
from rknpu_dra_driver._kubeapi.dra.v1 import api_pb2_grpc as v1_grpc
from rknpu_dra_driver._kubeapi.dra.v1beta1 import api_pb2 as v1beta1
from rknpu_dra_driver._kubeapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from rknpu_dra_driver._kubeapi.dra_health.v1 import api_pb2 as health_v1
from rknpu_dra_driver._kubeapi.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from rknpu_dra_driver._kubeapi.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from rknpu_dra_driver._kubeapi.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from rknpu_dra_driver._kubeapi.pluginregistration.v1 import api_pb2 as reg
from rknpu_dra_driver._kubeapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc

KUBELET_DEADLINE_S = 10.0


def wait_for_socket(path: Path, timeout: float = PATIENCE) -> None:
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


def kubelet_starts(api: Any, node_name: str) -> list[str]:
    """The kubelet's start: every ResourceSlice of the node is deleted (drivers republish)."""
    gone: list[str] = api.delete_slices(node_name)
    return gone


class KubeletStub:
    def __init__(
        self, registry_dir: Path, driver_name: str = "npu.rockchip.com", api: Any = None, node_name: str = ""
    ) -> None:
        """With ``api`` (a FakeApiServer) and ``node_name``: a kubelet starting, which first deletes
        every slice of its node, as the upstream one does."""
        if api is not None:
            kubelet_starts(api, node_name)
        self.registry_dir = registry_dir
        self.driver_name = driver_name
        self.plugins: list[tuple[Path, reg.PluginInfo]] = []
        """(registration socket, info) in registration order."""
        self._channels: dict[str, grpc.Channel] = {}

    @property
    def info(self) -> reg.PluginInfo | None:
        current = self._current()
        return current[1] if current is not None else None

    def register(self, timeout: float = PATIENCE) -> reg.PluginInfo:
        """Wait for a registration socket not registered yet, then GetInfo and
        NotifyRegistrationStatus(registered), as kubelet's pluginwatcher does."""
        deadline = time.monotonic() + timeout
        while True:
            known = {path for path, _info in self.plugins}
            fresh = [p for p in sorted(self.registry_dir.glob("*-reg.sock")) if p not in known]
            if fresh:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no new registration socket in {self.registry_dir}")
            time.sleep(0.01)  # the kubelet's polling fallback (no inotify in a test)
        socket_path = fresh[0]
        wait_for_socket(socket_path, max(deadline - time.monotonic(), 0.5))
        with grpc.insecure_channel(f"unix://{socket_path}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info: reg.PluginInfo = stub.GetInfo(reg.InfoRequest(), timeout=KUBELET_DEADLINE_S)
            stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True), timeout=KUBELET_DEADLINE_S
            )
        self.plugins.append((socket_path, info))
        return info

    def _current(self) -> tuple[Path, reg.PluginInfo] | None:
        # The pluginwatcher drops a plugin whose registration socket went away.
        self.plugins = [(path, info) for path, info in self.plugins if path.exists()]
        return self.plugins[-1] if self.plugins else None

    def _channel(self) -> grpc.Channel:
        current = self._current()
        if current is None:
            raise RuntimeError("no registered plugin (register first)")
        endpoint = current[1].endpoint
        if endpoint not in self._channels:  # one connection per plugin, as the kubelet keeps
            self._channels[endpoint] = grpc.insecure_channel(f"unix://{endpoint}")
        return self._channels[endpoint]

    def _stub(self, version: str) -> tuple[Any, Any]:
        channel = self._channel()
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

    def watch_health(self, version: str = "v1alpha1") -> Any:
        """The NodeWatchResources stream (an iterator of responses; ``.cancel()`` ends it)."""
        channel = self._channel()
        if version == "v1":
            return health_v1_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                health_v1.NodeWatchResourcesRequest()
            )
        return health_v1alpha1_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            health_v1alpha1.NodeWatchResourcesRequest()
        )

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
