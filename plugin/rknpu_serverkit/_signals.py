"""Stop signals and the end of a server's process: `StopEvent`, `stop_on_signals`, `end_server_process`.

SIGTERM (Kubernetes) and SIGINT (Ctrl-C) on a server are one thing: a clean stop, exit 0. Python
runs signal handlers in the main thread only, so the thread that waits for a stop must be woken by
the signal's C-level handler too: `StopEvent.wait` sleeps on a socket that the handler writes
(`signal.set_wakeup_fd`). `ActorGroup.add_signals` (in `._group`) is the usual way to use this.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopEvent(threading.Event):
    """A stop flag whose `wait` also wakes for a signal that the kernel delivered to another thread.

    Python runs signal handlers in the main thread only, and a main thread blocked in a plain
    `threading.Event.wait` is not woken when the signal lands on one of the process's other
    threads (gRPC's, a scrape's): SIGTERM would then wait for the next timeout. Within
    `stop_on_signals`, the signal's C-level handler writes to this event's socket
    (`signal.set_wakeup_fd`), which is what `wait` sleeps on.
    """

    def __init__(self) -> None:
        super().__init__()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # full (already woken) or closed
            self._wake_write.send(b"\0")

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with contextlib.suppress(OSError, ValueError):  # closed under us: look at the flag
                select.select([self._wake_read], [], [], left)
                self._wake_read.recv(4096)  # a call: pending signal handlers run here at the latest
        return True

    def wakeup_fd(self) -> int:
        return self._wake_write.fileno()

    def close(self) -> None:
        """Free the wake-up sockets; later `set` calls still set the flag."""
        self._wake_read.close()
        self._wake_write.close()


@contextlib.contextmanager
def stop_on_signals(
    stop: StopEvent, on_signal: Callable[[int], None] | None = None, wake: StopEvent | None = None
) -> Iterator[StopEvent]:
    """Within the block, SIGTERM and SIGINT set ``stop`` (a server's clean stop; ``on_signal`` is
    called for the first only); handlers are restored after. A signal the kernel hands to another
    thread wakes ``wake`` (default ``stop``), the event the main thread sleeps on. Off the main
    thread (tests) signals cannot be handled: nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        first = not stop.is_set()
        stop.set()
        if on_signal is not None and first:  # a second SIGTERM is the same stop: said once
            on_signal(signum)

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    previous_fd = signal.set_wakeup_fd((wake or stop).wakeup_fd(), warn_on_full_buffer=False)
    try:
        yield stop
    finally:
        signal.set_wakeup_fd(previous_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def end_server_process(code: int) -> NoReturn:
    """End a server's process now: flush the logs and the standard streams, then `os._exit`.

    A server that stopped cleanly has nothing left to do, yet interpreter teardown (gRPC's C core,
    module clean-up) took 0.3-1.3 s on a loaded 2-core machine after the last atexit handler, and
    a SIGTERM'd plugin must be gone within 1 s. Only for a `main()` run as the program.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
