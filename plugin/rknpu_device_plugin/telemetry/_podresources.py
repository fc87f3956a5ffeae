"""Which pod holds which NPU core: a client of kubelet's pod-resources API (v1 ``List``), for cores
from the device plugin (``devices``) and from DRA claims (``dynamic_resources``)."""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from rknpu_node import DEFAULT_RESOURCE_NAME, HoldersUnknownError, cores_of

DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_DRA_DRIVER = "npu.rockchip.com"
"""The DRA driver whose claimed devices are ours (``rknpu-dra-driver --driver-name``'s default)."""
# Kubelet answers List from memory; a slow answer means it is wedged, and a scrape must not wait.
DEFAULT_TIMEOUT_SECONDS = 1.0
# A node running hundreds of pods sends a large List answer; gRPC's default cap is 4 MiB.
_MAX_MESSAGE_BYTES = 32 * 1024 * 1024

log = logging.getLogger(__name__)


class PodResourcesError(Exception):
    """The pod-resources API could not be asked (no socket, kubelet down, timeout, bad answer)."""


@dataclass(frozen=True, order=True)
class CoreHolder:
    """One container holding one NPU core (through one or more of the plugin's device IDs)."""

    core: int
    namespace: str
    pod: str
    container: str


def resource_matcher(resource_name: str) -> re.Pattern[str]:
    """The resource names to attribute: ``rockchip.com/npu``, or with the plugin's ``{soc}``
    template (``rockchip.com/npu-{soc}``) any SoC's (``rockchip.com/npu-rk3588``)."""
    parts = [re.escape(part) for part in resource_name.split("{soc}")]
    return re.compile("[a-z0-9]+".join(parts))


def holders_from_response(
    response: Any, resource_name: str, dra_driver: str | None = DEFAULT_DRA_DRIVER
) -> tuple[CoreHolder, ...]:
    """A ``ListPodResourcesResponse`` -> sorted, de-duplicated core holders for ``resource_name``
    (device plugin) and for devices of DRA driver ``dra_driver`` in the containers' claims
    (``dynamic_resources``: ``npu-core-2``, or ``npu-cores-0-1`` of the partitionable layout).

    Devices of other resources or drivers are skipped, and so are IDs that are not ours (a stale
    kubelet checkpoint from another version): attribution is best effort, never an error. A
    claim with adminAccess (a monitoring pod) is attributed too: the API does not tell it apart.
    """
    ours = resource_matcher(resource_name)
    holders: set[CoreHolder] = set()
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not ours.fullmatch(devices.resource_name):
                    continue
                for core in cores_of(devices.device_ids):
                    holders.add(CoreHolder(core, pod.namespace, pod.name, container.name))
            if dra_driver is None:
                continue
            for dynamic in container.dynamic_resources:
                names = [r.device_name for r in dynamic.claim_resources if r.driver_name == dra_driver]
                for core in cores_of(names):
                    holders.add(CoreHolder(core, pod.namespace, pod.name, container.name))
    return tuple(sorted(holders))


class PodResourcesClient:
    """Asks kubelet's pod-resources socket which containers hold our devices.

    One gRPC channel is kept while calls succeed; after a failure it is dropped and the next call
    dials again, so a kubelet restart (which re-creates the socket) is picked up at the next
    scrape instead of after gRPC's reconnect back-off. Thread-safe.
    """

    def __init__(
        self,
        socket_path: str = DEFAULT_POD_RESOURCES_SOCKET,
        resource_name: str = DEFAULT_RESOURCE_NAME,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        dra_driver: str | None = DEFAULT_DRA_DRIVER,
    ) -> None:
        self.socket_path = socket_path
        self.resource_name = resource_name
        self.dra_driver = dra_driver
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channel: Any = None
        self._stub: Any = None

    def __repr__(self) -> str:
        return f"PodResourcesClient({self.socket_path!r}, {self.resource_name!r})"

    def list_holders(self) -> tuple[CoreHolder, ...]:
        """Every (core, pod, container) holding one of our devices now.

        Raises `PodResourcesError` saying why when kubelet cannot be asked.
        """
        import grpc

        from .._kubeapi.podresources.v1 import api_pb2

        with self._lock:
            # Checking first answers "no socket" at once instead of through a gRPC dial.
            try:
                is_socket = stat.S_ISSOCK(os.stat(self.socket_path).st_mode)
            except OSError as exc:
                self._drop_channel()
                raise PodResourcesError(
                    f"kubelet's pod-resources socket {self.socket_path} is not there ({exc.strerror}); "
                    f"mount /var/lib/kubelet/pod-resources into this container, or set "
                    f"--pod-resources-socket '' to turn pod attribution off"
                ) from exc
            if not is_socket:
                raise PodResourcesError(
                    f"{self.socket_path} is not a unix socket; point --pod-resources-socket at kubelet's "
                    f"(default {DEFAULT_POD_RESOURCES_SOCKET})"
                )
            stub = self._connect()
            try:
                response = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
            except grpc.RpcError as exc:
                self._drop_channel()
                code = exc.code() if isinstance(exc, grpc.Call) else None
                details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
                raise PodResourcesError(
                    f"pod-resources List on {self.socket_path} failed: "
                    f"{code.name if code is not None else 'error'}: {details}"
                ) from exc
        return holders_from_response(response, self.resource_name, self.dra_driver)

    def close(self) -> None:
        with self._lock:
            self._drop_channel()

    def _connect(self) -> Any:
        if self._stub is None:
            import grpc

            from .._kubeapi.podresources.v1 import api_pb2_grpc

            self._channel = grpc.insecure_channel(
                f"unix://{self.socket_path}",
                options=[
                    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                    ("grpc.initial_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 2000),
                ],
            )
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def _drop_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None


def held_cores_asker(socket_path: str, resource_name: str) -> Callable[[], Collection[int]]:
    """Which cores pods hold, from kubelet's pod-resources API; raises HoldersUnknownError when
    that cannot be told (``socket_path`` empty = pod-resources off)."""
    if not socket_path:

        def unknown() -> Collection[int]:
            raise HoldersUnknownError("--pod-resources-socket is off")

        return unknown
    client = PodResourcesClient(socket_path, resource_name)

    def held() -> Collection[int]:
        try:
            return {holder.core for holder in client.list_holders()}
        except PodResourcesError as exc:
            raise HoldersUnknownError(str(exc)) from None

    return held
