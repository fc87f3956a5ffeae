"""The device plugin's registration with the kubelet: Register over kubelet.sock (the kit's
`Supervisor` serves, watches and serves again; this is its strategy), and the base of our
DevicePlugin service, which ends its open streams cleanly before a stop."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import grpc.aio

from rknpu_node import PluginEvents
from rknpu_serverkit import KUBELET_WAIT_NOTICE_S, Endpoint, FileId, KubeletWaitNotice, file_id

from .._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb
from .._kubeapi.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from .._log import get_logger

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
REGISTER_TIMEOUT = 3.0

_log = get_logger("lifecycle")


def kubelet_socket(endpoint: Endpoint) -> Path:
    """The kubelet's registration socket, beside ours in the device-plugins folder."""
    return endpoint.folder / KUBELET_SOCKET


class StreamingServicer(pb_grpc.DevicePluginServicer):
    """The device plugin service, which can end its open streams cleanly before a stop."""

    def add_to(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_DevicePluginServicer_to_server(self, server)

    async def end_streams(self, timeout: float) -> None:
        """End every open stream with status OK; return once each status is sent (or at timeout)."""


def register(endpoint: Endpoint, wake: threading.Event, stop: threading.Event) -> bool:
    """Call the kubelet's Registration.Register once; False if stopped first, grpc.RpcError on failure.

    The call runs as a future so a SIGTERM during a slow Register still exits within 2 s: the
    supervisor's ``wake`` event fires on stop and on the call's completion alike.
    """
    request = pb.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint.socket_name,
        resource_name=endpoint.registered_name,
        options=pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True),
    )
    with grpc.insecure_channel(f"unix://{kubelet_socket(endpoint)}") as channel:
        call = pb_grpc.RegistrationStub(channel).Register.future(request, timeout=REGISTER_TIMEOUT)
        call.add_done_callback(lambda _call: wake.set())
        while not call.done():
            wake.wait()
            wake.clear()
            if stop.is_set():
                call.cancel()  # type: ignore[no-untyped-call]
                return False
        call.result()  # raises the RpcError of a failed call
        return True


class KubeletRegistration:
    """The device plugin's strategy: Register over kubelet.sock (waiting for it, retrying a failed
    call); a re-created kubelet.sock (the kubelet restarted) ends the generation."""

    def __init__(self, events: PluginEvents, wait_notice: float = KUBELET_WAIT_NOTICE_S) -> None:
        self._events = events
        self._kubelet_id: FileId | None = None
        self._last_error = ""
        self._wait_notice = wait_notice
        self._kubelet_wait: KubeletWaitNotice | None = None

    def register(self, endpoint: Endpoint, wake: threading.Event, stop: threading.Event) -> bool:
        if self._kubelet_wait is None:
            folder = kubelet_socket(endpoint).parent
            self._kubelet_wait = KubeletWaitNotice(_log, folder, "--device-plugin-dir", self._wait_notice)
        self._kubelet_wait.start()  # until registered: one line if the kubelet is long in coming
        kubelet_id = file_id(kubelet_socket(endpoint))
        if kubelet_id is None:
            if self._last_error != "absent":
                _log.info(
                    "waiting for kubelet.sock", extra={"fields": {"path": str(kubelet_socket(endpoint))}}
                )
                self._last_error = "absent"
            return False
        try:
            if not register(endpoint, wake, stop):
                return False
        except grpc.RpcError as exc:
            error = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.Call) else str(exc)
            if error != self._last_error:
                _log.warning("Register failed; retrying", extra={"fields": {"error": error}})
                self._last_error = error
            return False
        self._kubelet_wait.stop()
        self._kubelet_id = kubelet_id
        self._last_error = ""  # the next generation's first problem is logged again
        return True

    def registered(self, endpoint: Endpoint, generation: int, seconds: float) -> None:
        _log.info(
            "registered with kubelet",
            extra={
                "fields": {
                    "resource": endpoint.registered_name,
                    "endpoint": endpoint.socket_name,
                    "generation": generation,
                    "seconds": round(seconds, 3),
                }
            },
        )
        self._events.registered()
        if generation > 1:
            self._events.restarted()

    def restart_reason(self, endpoint: Endpoint) -> str | None:
        current = file_id(kubelet_socket(endpoint))
        if current is not None and current != self._kubelet_id:
            return "kubelet.sock was re-created (kubelet restarted)"
        return None
