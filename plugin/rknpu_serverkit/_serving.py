"""Serving a unix socket and supervising a registration: a gRPC (asyncio) server per generation
on one event-loop thread, and a `Supervisor` that serves, registers, watches the socket's folder and
serves again (a fresh server, a fresh registration) when its socket is removed or replaced, or when
its `Registration` strategy says the generation ended. The strategies are the programs': the device
plugin Registers over kubelet.sock (`rknpu_device_plugin.kubelet`), the DRA driver serves its
registration socket for the kubelet's plugin watcher (`rknpu_dra_driver.kubelet`).

Each generation's server is a `grpc.aio` server on one event loop thread for the process: a stream
is a coroutine there and holds no thread, so open streams can never starve the unary calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio

from ._watch import FolderWatcher

BACKOFF_FIRST = 0.05
BACKOFF_MAX = 2.0
# Supervisor re-check period: a safety net under inotify, the detection itself when polling.
CHECK_INTERVAL_INOTIFY = 1.0
CHECK_INTERVAL_POLLING = 0.1
# Threads for handlers written as plain functions (gRPC aio runs those on a pool): the device
# plugin's are all coroutines; the DRA driver's prepare and unprepare write files and take more.
# Streams are coroutines on the event loop everywhere, so an open stream never holds a thread.
UNARY_WORKERS = 2
STREAMS_END_SECONDS = 0.3
"""Stopping a generation: how long its streams get to send their final OK before it is cut."""

_log = logging.getLogger("rknpu_serverkit.serving")

FileId = tuple[int, int]


def file_id(path: Path) -> FileId | None:
    """(inode, ctime) of a path, None if absent: tells a re-created socket from the old one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns)


@dataclass(frozen=True)
class Endpoint:
    """Where we serve (a socket in a folder) and the name we register under: the device plugin's
    resource name (rockchip.com/npu), the DRA driver's driver name (npu.rockchip.com)."""

    folder: Path
    socket_name: str
    registered_name: str

    @property
    def socket_path(self) -> Path:
        return self.folder / self.socket_name


class SocketBusyError(OSError):
    """Our socket's path is served by a live process."""


def socket_answers(path: Path) -> bool:
    """Whether something accepts connections on the unix socket at ``path`` (a dead process's
    socket refuses)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


class Servicer(Protocol):
    """What a generation's server serves: services to add, streams to end before a stop."""

    def add_to(self, server: grpc.aio.Server) -> None:
        """Add the services to ``server``."""

    async def end_streams(self, timeout: float) -> None:
        """End every open stream with status OK; return once each status is sent (or at timeout)."""


_T = TypeVar("_T")


class EventLoopThread:
    """One asyncio loop on a thread of its own, where every generation's gRPC server runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_loop_error)
        self._thread = threading.Thread(target=self._run, name="grpc-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coroutine: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        """Run ``coroutine`` on the loop and return its result (or raise its exception)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self, timeout: float = 1.0) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's uncaught errors as one log line each (asyncio's default prints a traceback)."""
    error = context.get("exception")
    if isinstance(error, OSError) and error.errno == errno.EBADF:
        # gRPC's poller closes its wake-up socket when the last aio server of a generation is
        # gone; an already scheduled read of it then fails. Harmless: the next server makes a new one.
        _log.debug("gRPC poller closed", extra={"fields": {"error": str(error)}})
        return
    _log.error(
        "gRPC event loop error",
        extra={"fields": {"message": str(context.get("message")), "error": repr(error)}},
    )


class PluginServer:
    """One generation of our gRPC server on our socket (an asyncio server on ``loop``)."""

    def __init__(
        self, socket_path: Path, service: Servicer, loop: EventLoopThread, unary_workers: int = UNARY_WORKERS
    ) -> None:
        self.socket_path = socket_path
        self._service = service
        self._loop = loop
        self._unary_workers = unary_workers
        self._server: grpc.aio.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._socket_id: FileId | None = None

    def start(self) -> None:
        # A stale socket of ours (a crash) blocks bind: remove it. Only our own file name is ever
        # removed, never another plugin's socket, and never one a live process still serves (a
        # second instance during a rollout would otherwise take turns with the first forever).
        if os.path.lexists(self.socket_path):
            if socket_answers(self.socket_path):
                raise SocketBusyError(
                    f"another process serves {self.socket_path} (a second instance on this node?); "
                    "waiting for it to stop"
                )
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        # gRPC never shuts down the executor it is given: stop() does, so no generation's
        # worker threads outlive it.
        self._executor = futures.ThreadPoolExecutor(self._unary_workers, thread_name_prefix="grpc")
        self._server = self._loop.call(self._start(self._executor))
        self._socket_id = file_id(self.socket_path)

    async def _start(self, executor: futures.ThreadPoolExecutor) -> grpc.aio.Server:
        server = grpc.aio.server(migration_thread_pool=executor)
        self._service.add_to(server)
        if server.add_insecure_port(f"unix://{self.socket_path}") == 0:
            raise OSError(
                f"cannot listen on {self.socket_path}: the folder must exist and be writable here "
                "(DaemonSet: mount kubelet's device-plugins folder read-write; systemd: ReadWritePaths)"
            )
        # Only root (kubelet) may talk to us, whatever the umask: any local user could otherwise
        # allocate cores or hold streams open. The socket exists once the port is added.
        os.chmod(self.socket_path, stat.S_IRUSR | stat.S_IWUSR)
        await server.start()
        return server

    def socket_intact(self) -> bool:
        return self._socket_id is not None and file_id(self.socket_path) == self._socket_id

    def stop(self, grace: float = STREAMS_END_SECONDS) -> None:
        """End the streams (status OK), stop serving, then remove our socket if it is still ours."""
        if self._server is not None:
            with contextlib.suppress(futures.TimeoutError, RuntimeError):
                self._loop.call(self._stop(self._server, grace), timeout=2 * grace + 0.5)
            self._server = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
        if self.socket_intact():
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        self._socket_id = None

    async def _stop(self, server: grpc.aio.Server, grace: float) -> None:
        # Streams first, then the server: a stream's final status must be on the wire before
        # the server's GOAWAY, or a client answering GOAWAY's ping on a closed connection ends
        # the stream with "UNAVAILABLE: Broken pipe" instead of OK.
        await self._service.end_streams(grace)
        await server.stop(grace)


class Registration(Protocol):
    """The `Supervisor`'s strategy: how a served generation registers, and what besides its own
    socket's removal ends it. Serving, watching and serving again are the supervisor's."""

    def register(self, endpoint: Endpoint, wake: threading.Event, stop: threading.Event) -> bool:
        """One attempt, our socket served: True once registered, False to retry after a backoff
        (or when ``stop`` is set). ``wake`` fires on stop: a blocking attempt waits on it."""

    def registered(self, endpoint: Endpoint, generation: int, seconds: float) -> None:
        """Generation number ``generation`` is registered, ``seconds`` after its serving began."""

    def restart_reason(self, endpoint: Endpoint) -> str | None:
        """Why the registered generation must end (None while it holds)."""


class Supervisor:
    """Serve + register; on socket loss (or when ``registration`` says so: a kubelet restart), do
    both again until stopped."""

    def __init__(
        self,
        plugin_dir: Path,
        endpoint_for: Callable[[], Endpoint | None],
        service: Servicer,
        registration: Registration,
        before_serve: Callable[[], None] = lambda: None,
        use_inotify: bool = True,
    ) -> None:
        self._plugin_dir = plugin_dir
        self._endpoint_for = endpoint_for
        self._service = service
        self._registration = registration
        self._before_serve = before_serve
        self._use_inotify = use_inotify
        self._watcher: FolderWatcher | None = None
        self._loop: EventLoopThread | None = None
        self._wake = threading.Event()
        self.generations = 0
        self._last_serve_error = ""

    def wake(self) -> None:
        """Re-check now (called on stop, and when discovery first finds the NPU)."""
        self._wake.set()
        if self._watcher is not None:
            self._watcher.wake()

    def actor(self) -> tuple[Callable[[], None], Callable[[], None]]:
        """(execute, interrupt) for an `ActorGroup`: supervise until interrupted."""
        stop = threading.Event()

        def interrupt() -> None:
            stop.set()
            self.wake()

        return lambda: self.run(stop), interrupt

    def _wait(self, watcher: FolderWatcher, timeout: float) -> None:
        if self._wake.is_set():
            self._wake.clear()
            return
        watcher.wait(timeout)
        self._wake.clear()

    def run(self, stop: threading.Event) -> None:
        # The folder is the kubelet's: checked at start (check_kubelet_folder), never created here.
        watcher = FolderWatcher([self._plugin_dir], use_inotify=self._use_inotify)
        self._watcher = watcher
        check = CHECK_INTERVAL_INOTIFY if watcher.uses_inotify else CHECK_INTERVAL_POLLING
        self._loop = EventLoopThread()
        try:
            while not stop.is_set():
                endpoint = self._endpoint_for()
                if endpoint is None:  # no NPU yet: the resource manager wakes us when it finds one
                    self._wait(watcher, check)
                    continue
                try:
                    self._serve_generation(endpoint, watcher, check, stop)
                except Exception as exc:  # keep supervising: a dead supervisor means a dead resource
                    _log.error("serving failed; retrying", extra={"fields": {"error": repr(exc)}})
                    self._wait(watcher, BACKOFF_MAX)
        finally:
            self._watcher = None
            watcher.close()
            self._loop.close()

    def _serve_generation(
        self, endpoint: Endpoint, watcher: FolderWatcher, check: float, stop: threading.Event
    ) -> None:
        started = time.monotonic()
        assert self._loop is not None
        server = PluginServer(endpoint.socket_path, self._service, self._loop)
        try:
            self._before_serve()
            server.start()
        except Exception as exc:
            if str(exc) != self._last_serve_error:  # one line per distinct problem, not per retry
                _log.error(
                    "cannot serve; retrying",
                    extra={"fields": {"socket": str(endpoint.socket_path), "error": str(exc)}},
                )
                self._last_serve_error = str(exc)
            server.stop(0)
            self._wait(watcher, BACKOFF_MAX)
            return
        self._last_serve_error = ""
        try:
            if not self._register_until_done(endpoint, server, watcher, stop):
                return
            self.generations += 1
            self._registration.registered(endpoint, self.generations, time.monotonic() - started)
            reason = self._watch_until_restart(endpoint, server, watcher, check, stop)
            if reason is not None:
                _log.warning("serving and registering again", extra={"fields": {"reason": reason}})
        finally:
            server.stop()

    def _register_until_done(
        self, endpoint: Endpoint, server: PluginServer, watcher: FolderWatcher, stop: threading.Event
    ) -> bool:
        delay = BACKOFF_FIRST
        while not stop.is_set():
            if not server.socket_intact():  # the kubelet's cleanup removed it while we waited
                server.stop(0)
                server.start()
            if self._registration.register(endpoint, self._wake, stop):
                return True
            if stop.is_set():
                break
            self._wait(watcher, delay)
            delay = min(delay * 2, BACKOFF_MAX)
        return False

    def _watch_until_restart(
        self,
        endpoint: Endpoint,
        server: PluginServer,
        watcher: FolderWatcher,
        check: float,
        stop: threading.Event,
    ) -> str | None:
        while not stop.is_set():
            if not server.socket_intact():
                return "our socket was removed (kubelet restart?)"
            reason = self._registration.restart_reason(endpoint)
            if reason is not None:
                return reason
            if self._endpoint_for() != endpoint:
                return "the NPU changed (resource name)"
            self._wait(watcher, check)
        return None
