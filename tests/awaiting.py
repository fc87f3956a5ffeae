"""Waiting in tests: for a child process (its exit AND its output drained), for a line it logs,
and for state another process writes (the one poll, with a deadline load cannot pass).

Why one module: a cold CI run failed because a rig's ``wait()`` returned when the process exited,
before its reader thread had read the last lines from the pipe (issue 32). Every rig that runs a
child and reads its output goes through :class:`Child`, whose ``wait`` returns only once both have
happened; every poll goes through :func:`eventually`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

PATIENCE = 120.0
"""How long a test waits for something that should happen. Generous: a passing test never waits
this long, and a 2-core CI machine shared with image builds can be many times slower than a
desk. Tests that pin a speed measure it themselves and assert on the figure."""

POLL_INTERVAL = 0.05


def eventually(read: Callable[[], T], good: Callable[[T], bool], timeout: float = PATIENCE) -> T:
    """``read()`` until ``good`` holds or ``timeout`` passes; the last value read (the caller asserts).

    Only for state another process writes where there is no event to await (a file, a page)."""
    deadline = time.monotonic() + timeout
    value = read()
    while not good(value) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL)
        value = read()
    return value


class Child(Generic[T]):
    """A child process whose stderr is read line by line on a thread as it comes (so the pipe never
    fills), each line kept as ``parse`` makes it.

    :meth:`wait` is the one way to wait for the child: it returns the exit status only once the
    process has exited AND its stderr is read to the end, so ``lines`` is then complete."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        parse: Callable[[str], T],
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.command = list(command)
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=None if env is None else dict(env),
            cwd=cwd,
        )
        self._parse = parse
        self.lines: list[T] = []
        """Every stderr line so far, parsed; complete once :meth:`wait` has returned."""
        self._changed = threading.Condition()
        self._drained = False
        self._reader = threading.Thread(target=self._read, name=f"stderr of {self.process.pid}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stderr is not None
        try:
            for raw in self.process.stderr:
                line = self._parse(raw.rstrip("\n"))
                with self._changed:
                    self.lines.append(line)
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._drained = True
                self._changed.notify_all()

    def wait_line(self, predicate: Callable[[T], bool], timeout: float = PATIENCE) -> T:
        """The first line (from the start) matching ``predicate``, as soon as it is read."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if predicate(line):
                        return line
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self._drained:
                    raise AssertionError(
                        f"the child's output ended with no matching line; got: {self.lines[-20:]}"
                    )
                if left <= 0:
                    raise AssertionError(f"no matching line within {timeout} s; got: {self.lines[-20:]}")
                self._changed.wait(left)

    def snapshot(self) -> list[T]:
        with self._changed:
            return list(self.lines)

    def poll(self) -> int | None:
        return self.process.poll()

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = PATIENCE) -> int:
        """The exit status, once the child has exited and its output is drained (``lines`` complete).

        Raises ``subprocess.TimeoutExpired`` if it has not exited within ``timeout``."""
        deadline = time.monotonic() + timeout
        code = self.process.wait(timeout)
        self._reader.join(max(deadline - time.monotonic(), 5.0))
        if self._reader.is_alive():
            raise AssertionError(
                f"{self.command[:3]} exited but its stderr is still open (a child of its own holds it?)"
            )
        return code

    def stop(self, timeout: float = PATIENCE) -> int:
        """SIGTERM (if still running), then :meth:`wait`; SIGKILL if it does not exit in ``timeout``."""
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.wait()


def sigint_as_in_a_terminal() -> None:
    """``preexec_fn`` for a child a test stops with SIGINT, as Ctrl-C in a terminal would: the
    default disposition, whatever this test run inherited (a CI started in the background from a
    non-interactive shell ignores SIGINT, and so would the child, which then never stops)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
