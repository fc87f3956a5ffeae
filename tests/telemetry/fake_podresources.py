"""A fake kubelet pod-resources API: a real gRPC server on a unix socket serving PodResourcesLister.List.

Behaves like kubelet's: answers List with every pod's containers and their devices per resource;
tests can make it fail with a gRPC status (kubelet going away) or hold the answer until released
(a wedged kubelet) to exercise the client's timeouts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from rknpu_device_plugin._kubeapi.podresources.v1 import api_pb2, api_pb2_grpc

NPU = "rockchip.com/npu"


@dataclass(frozen=True)
class Assignment:
    """One container's devices of one resource, as kubelet's checkpoint records it."""

    namespace: str
    pod: str
    container: str
    device_ids: Sequence[str]
    resource: str = NPU


class FakePodResources(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.assignments: list[Assignment] = []
        self.fail_with: grpc.StatusCode | None = None
        self.hold: threading.Event | None = None
        self.calls = 0
        self._lock = threading.Lock()

    def set(self, assignments: Iterable[Assignment]) -> None:
        with self._lock:
            self.assignments = list(assignments)

    def List(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.calls += 1
            assignments = list(self.assignments)
            fail_with, hold = self.fail_with, self.hold
        if hold is not None:
            hold.wait(10)
        if fail_with is not None:
            context.abort(fail_with, "fake kubelet says no")
        pods: dict[tuple[str, str], dict[str, list[Assignment]]] = {}
        for item in assignments:
            pods.setdefault((item.namespace, item.pod), {}).setdefault(item.container, []).append(item)
        response = api_pb2.ListPodResourcesResponse()
        for (namespace, pod), containers in pods.items():
            pod_msg = response.pod_resources.add(name=pod, namespace=namespace)
            for container, items in containers.items():
                container_msg = pod_msg.containers.add(name=container)
                # Kubelet also reports CPU sets and other resources' devices; the client must skip them.
                container_msg.cpu_ids.extend([2, 3])
                for item in items:
                    container_msg.devices.add(resource_name=item.resource, device_ids=list(item.device_ids))
        return response


class PodResourcesServer:
    """Serves a FakePodResources on ``<short temp dir>/kubelet.sock`` (unix paths max 107 bytes)."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or tempfile.mkdtemp(prefix="prs-", dir="/tmp")
        self.socket_path = os.path.join(self.directory, "kubelet.sock")
        self.fake = FakePodResources()
        self._server: grpc.Server | None = None

    def start(self) -> PodResourcesServer:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self.fake, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket, as a kubelet restart does."""
        if self._server is not None:
            if self.fake.hold is not None:
                self.fake.hold.set()
            self._server.stop(None).wait(5)
            self._server = None
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
