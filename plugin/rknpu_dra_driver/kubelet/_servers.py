"""Both of the driver's sockets for the kubelet: the DRA services' socket, served first (the kit's
`PluginServer`), and the registration socket (the kit's `Supervisor`, which serves it again
whenever it is removed). Both are grpc.aio servers, the device plugin's style."""

from __future__ import annotations

import threading
from pathlib import Path

from rknpu_serverkit import (
    KUBELET_WAIT_NOTICE_S,
    Endpoint,
    EventLoopThread,
    KubeletWaitNotice,
    PluginServer,
    Supervisor,
)

from .._log import get_logger
from ..claims import ClaimStore
from ._dra_service import DraServicer
from ._health import HealthBoard
from ._instance import dra_socket_name, registration_socket_name, remove_dead_sockets
from ._registration import RegistrationService, ServedForDiscovery

_log = get_logger("kubelet")

PREPARE_WORKERS = 4
"""Threads for prepare and unprepare calls (they queue on the serialize lock; the health streams
are coroutines and take none)."""
REGISTRATION_STOP_S = 1.5
"""Stop: how long the registration socket's supervisor gets to stop serving and remove it."""
DRA_STOP_GRACE_S = 0.5
"""Stop: how long a prepare in flight gets to finish (the health streams end first, with OK)."""


class KubeletServers:
    """Both servers: the DRA socket is served before the registration socket appears, so the
    kubelet, which dials the endpoint as soon as it sees the registration socket, finds it ready.
    The registration socket is the kit's `Supervisor`'s, on a thread of its own: it
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
        self._loop: EventLoopThread | None = None
        self._dra_servicer = DraServicer(store, board)
        self._dra: PluginServer | None = None
        endpoint = Endpoint(registration_dir, self.registration_socket.name, driver_name)
        self._supervisor = Supervisor(
            registration_dir,
            lambda: endpoint,
            self.registration,
            ServedForDiscovery(),
            # Armed before each serving (the kubelet may call as soon as the socket appears), and
            # disarmed by its NotifyRegistrationStatus: one line if it has not come in time.
            before_serve=self._kubelet_wait.start,
            use_inotify=use_inotify,
        )
        self._stopping = threading.Event()
        self._supervising: threading.Thread | None = None

    def start(self) -> None:
        """Serve both sockets (mode 0600: only the kubelet, as root, may call us)."""
        remove_dead_sockets(self.driver_name, self.dra_socket, self.registration_socket)
        # the folder is the kubelet's: checked at start (check_kubelet_folder), never created here
        self._loop = EventLoopThread()
        self._dra = PluginServer(self.dra_socket, self._dra_servicer, self._loop, PREPARE_WORKERS)
        self._dra.start()
        _log.info("serving", extra={"fields": {"socket": str(self.dra_socket)}})
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
        if self._dra is not None:  # ends the health streams with OK, then stops and unlinks
            self._dra.stop(DRA_STOP_GRACE_S)
            self._dra = None
        self._board.close()  # also when start never ran
        if self._loop is not None:
            self._loop.close()
            self._loop = None
