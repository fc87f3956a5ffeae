"""The one line a server says when its kubelet has not come after a while (`KubeletWaitNotice`)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

KUBELET_WAIT_NOTICE_S = 30.0
"""How long a server waits for its kubelet before saying so (once per wait), by default."""


class KubeletWaitNotice:
    """``start()`` when the server begins waiting for its kubelet (for kubelet.sock to appear, or
    for the kubelet to call the registration socket), ``stop()`` when it came. If ``after``
    seconds pass in between, one warning names the folder the server watches and ``flag``: a
    kubelet that never comes is a wrong folder or no kubelet on the node. A timer, not a poll: the
    line comes on time whatever the server's loop is doing."""

    def __init__(
        self, logger: logging.Logger, folder: Path, flag: str, after: float = KUBELET_WAIT_NOTICE_S
    ) -> None:
        self._logger = logger
        self._folder = folder
        self._flag = flag
        self._after = after
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        """Arm the notice (a no-op while armed: the wait goes on)."""
        with self._lock:
            if self._timer is None:
                self._timer = threading.Timer(self._after, self._say)
                self._timer.name = "kubelet-wait-notice"
                self._timer.daemon = True
                self._timer.start()

    def stop(self) -> None:
        """The kubelet came (or the server stops): no notice for this wait."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _say(self) -> None:
        with self._lock:
            if self._timer is None or self._timer is not threading.current_thread():
                return  # stopped meanwhile
        self._logger.warning(
            "still waiting for the kubelet after %g s",
            self._after,
            extra={
                "fields": {
                    "folder": str(self._folder),
                    "fix": f"check that the kubelet runs on this node and that {self._flag} is the "
                    "folder it watches (its --root-dir)",
                }
            },
        )
