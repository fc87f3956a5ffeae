"""A fake kubelet for device plugin tests and the benchmark: a real gRPC Registration server on
kubelet.sock in a temporary device plugin folder, a client for the plugin's socket, and a handle
on the real plugin process.

It behaves as the kubelet does where the plugin can tell: on (re)start it deletes every socket
in the folder before creating kubelet.sock.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from awaiting import PATIENCE, Child

from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb
from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

KUBELET_SOCKET = "kubelet.sock"
RPC_TIMEOUT = 30.0
"""A call's deadline: a hang, not a loaded machine (the benchmark measures call times)."""


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        kubelet = self._kubelet
        kubelet.requests.put((time.monotonic(), request))
        if kubelet.connect_back:
            # As the real kubelet does: dial the plugin's endpoint and watch its devices at once,
            # so a plugin that registers before it serves is caught.
            kubelet.streams.put(DeviceStream(kubelet.plugin_stub(request.endpoint)))
        kubelet.answer_register.wait(30)  # a hung kubelet, when a test clears it
        return pb.Empty()


class FakeKubelet:
    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.requests: queue.Queue[tuple[float, pb.RegisterRequest]] = queue.Queue()
        self._server: grpc.Server | None = None
        self.connect_back = False
        """When True, each Register opens a ListAndWatch stream to the plugin (put on ``streams``)."""
        self.streams: queue.Queue[DeviceStream] = queue.Queue()
        self.answer_register = threading.Event()
        """Clear it to make Register hang (until set again or 30 s)."""
        self.answer_register.set()

    @property
    def socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    def start(self) -> None:
        """Start serving; like the real kubelet, first delete every socket in the folder."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.delete_all_sockets()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        assert server.add_insecure_port(f"unix://{self.socket}") != 0
        server.start()
        self._server = server

    def stop(self) -> None:
        self.answer_register.set()
        if self._server is not None:
            self._server.stop(0).wait(2)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()

    def restart(self) -> float:
        """Stop, delete every socket, serve a new kubelet.sock; returns the restart time (monotonic)."""
        self.stop()
        self.start()
        return time.monotonic()

    def delete_all_sockets(self) -> None:
        for path in self.plugin_dir.iterdir():
            if path.is_socket():
                path.unlink()

    def wait_registration(self, timeout: float = PATIENCE) -> tuple[float, pb.RegisterRequest]:
        try:
            return self.requests.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no Register call within {timeout} s") from None

    def no_registration(self, timeout: float) -> bool:
        try:
            self.requests.get(timeout=timeout)
        except queue.Empty:
            return True
        return False

    def plugin_channel(self, endpoint: str) -> grpc.Channel:
        return grpc.insecure_channel(f"unix://{self.plugin_dir / endpoint}")

    def plugin_stub(self, endpoint: str) -> pb_grpc.DevicePluginStub:
        return pb_grpc.DevicePluginStub(self.plugin_channel(endpoint))


class DeviceStream:
    """A ListAndWatch stream read on its own thread, so tests can wait on messages with timeouts."""

    def __init__(self, stub: pb_grpc.DevicePluginStub) -> None:
        self._call = stub.ListAndWatch(pb.Empty())
        self.messages: queue.Queue[list[tuple[str, str]] | None] = queue.Queue()
        self.error: grpc.RpcError | None = None
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for response in self._call:
                self.messages.put([(d.ID, d.health) for d in response.devices])
        except grpc.RpcError as exc:
            self.error = exc
        finally:
            self.messages.put(None)
            self.ended.set()

    def next(self, timeout: float = PATIENCE) -> list[tuple[str, str]] | None:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no ListAndWatch message within {timeout} s") from None

    def wait_for(
        self, predicate: Callable[[list[tuple[str, str]]], bool], timeout: float = PATIENCE
    ) -> tuple[list[tuple[str, str]], float]:
        """The first message matching ``predicate`` and when it arrived (monotonic)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching ListAndWatch message within {timeout} s")
            message = self.next(left)
            if message is None:
                raise AssertionError(f"stream ended while waiting (error: {self.error})")
            if predicate(message):
                return message, time.monotonic()

    def cancel(self) -> None:
        self._call.cancel()


def all_health(health: str) -> Callable[[list[tuple[str, str]]], bool]:
    return lambda devices: bool(devices) and all(h == health for _, h in devices)


def _json_line(raw: str) -> dict[str, Any]:
    try:
        line: dict[str, Any] = json.loads(raw)
    except json.JSONDecodeError:
        return {"msg": raw, "level": "raw"}
    return line


class PluginProcess:
    """The real plugin (`python -m rknpu_device_plugin`), its JSON log lines collected as they come
    (tests/awaiting.py's Child: ``wait`` returns once it has exited and every line is read)."""

    def __init__(
        self, host_root: Path, plugin_dir: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        command = [
            sys.executable,
            "-m",
            "rknpu_device_plugin",
            "--host-root",
            str(host_root),
            "--device-plugin-dir",
            str(plugin_dir),
            "--log-format",
            "json",
            *args,
        ]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("RKNPU_PLUGIN_")}
        full_env.update(env or {})
        self.child = Child(command, parse=_json_line, env=full_env)
        self.process = self.child.process

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def lines(self) -> list[dict[str, Any]]:
        """The lines read so far; every line once :meth:`wait` or :meth:`stop` has returned."""
        return self.child.snapshot()

    def wait_log(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = PATIENCE
    ) -> dict[str, Any]:
        return self.child.wait_line(predicate, timeout)

    def logs(self, message: str) -> list[dict[str, Any]]:
        return [line for line in self.child.snapshot() if line.get("msg") == message]

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.child.signal(signum)

    def wait(self, timeout: float = PATIENCE) -> int:
        """The exit status, once the plugin has exited and its output is drained."""
        return self.child.wait(timeout)

    def stop(self) -> int:
        return self.child.stop()

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")


def allocate(stub: pb_grpc.DevicePluginStub, *containers: Sequence[str]) -> pb.AllocateResponse:
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids)) for ids in containers]
    )
    response: pb.AllocateResponse = stub.Allocate(request, timeout=RPC_TIMEOUT)
    return response


def preferred(
    stub: pb_grpc.DevicePluginStub, available: Sequence[str], must: Sequence[str], size: int
) -> list[str]:
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=list(available), must_include_deviceIDs=list(must), allocation_size=size
            )
        ]
    )
    response = stub.GetPreferredAllocation(request, timeout=RPC_TIMEOUT)
    return list(response.container_responses[0].deviceIDs)


def ids_of(devices: Iterator[tuple[str, str]] | list[tuple[str, str]]) -> list[str]:
    return [device_id for device_id, _ in devices]


@dataclass
class Rig:
    """One fixture host + fake kubelet + plugin process. ``registration`` is the first Register."""

    root: Path
    host_root: Path
    kubelet: FakeKubelet
    plugin: PluginProcess
    registration: pb.RegisterRequest | None = None
    _stubs: list[pb_grpc.DevicePluginStub] = field(default_factory=list)

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet.plugin_dir

    def stub(self) -> pb_grpc.DevicePluginStub:
        assert self.registration is not None
        return self.kubelet.plugin_stub(self.registration.endpoint)


RigFactory = Callable[..., Rig]
