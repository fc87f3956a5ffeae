"""The actor group: every long-lived piece of a server as an (execute, interrupt) pair, run together
and stopped one way (`ActorGroup`, after oklog/run's ``run.Group``).

- ``execute()`` does the piece's work and blocks until it is done: a loop until its stop event is
  set, a server until it is closed. It returns a result or raises.
- ``interrupt()`` makes ``execute`` return soon: set its stop event, close its socket. It is
  called exactly once per actor, from the thread that called `ActorGroup.run`, whether or not
  that actor's ``execute`` has already returned.

`ActorGroup.run` starts every ``execute`` on a thread of its own; the first to return (or raise)
ends the group: every actor's ``interrupt`` is called, in the order they were added, then `run`
waits for all of them (at most ``stop_timeout`` seconds in all, when given) and returns the first
actor's result, or raises its exception. Stop signals are one actor (`ActorGroup.add_signals`):
SIGTERM/SIGINT make it return None, so a signal ends the group cleanly. A piece that runs on
threads of its own and only needs closing (a metrics HTTP server) is `closing_actor(close)`.

Whatever ends, the whole group ends, never a half-running (zombie) server: an actor that raises
ends the group with its error (a bug, anything but an `RknnLaunchError`, as `ActorDied`: one line
naming the actor, its traceback at debug level), and so does any other thread of the process that
dies of an uncaught exception while the group runs (a client's loader, a helper thread). A one-shot
start step that may finish early (building an API client while the sockets come up) is a task
(`ActorGroup.add_task`): its return does not end the group, its error does.

A clean shutdown in one line each: a health loop, ``group.add(lambda: loop.run(stop), stop.set)``;
a server, ``group.add(*closing_actor(server.stop))``; signals, ``group.add_signals()``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rknnlaunch import RknnLaunchError

from ._signals import StopEvent, stop_on_signals

_log = logging.getLogger("rknpu_serverkit")

Execute = Callable[[], Any]
Interrupt = Callable[[], None]


class ActorDied(RknnLaunchError):
    """An actor (or another thread of the server) died of an unexpected exception, ``error``."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(
            f"the {name} thread died: {type(error).__name__}: {_short(error)}; the server stops",
            "this is a bug: report it with this line (--log-level debug logs the traceback)",
        )
        self.name = name
        self.error = error


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split()) or "(no message)"
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass
class _Actor:
    name: str
    execute: Execute
    interrupt: Interrupt
    task: bool = False  # a one-shot step: returning does not end the group, raising does


@dataclass
class _Outcome:
    actor: _Actor
    result: Any = None
    error: BaseException | None = None


class ActorGroup:
    """Long-lived pieces that start together and stop together (see the module docstring).

    ``stop_timeout`` bounds the wait for the others once the first has returned (one budget for
    all, e.g. a SIGTERM'd plugin must be gone within 2 s); an actor still running after it is
    logged and left behind (its thread is a daemon). None waits for every actor.
    """

    def __init__(self, stop_timeout: float | None = None) -> None:
        self.stop_timeout = stop_timeout
        self._actors: list[_Actor] = []
        self._signals: tuple[StopEvent, Callable[[int], None] | None] | None = None
        self._ran = False

    def add(self, execute: Execute, interrupt: Interrupt, name: str | None = None) -> None:
        """Add one actor; ``name`` names its thread (and it in log lines)."""
        if self._ran:
            raise RuntimeError("ActorGroup.add after run(): a group runs once")
        self._actors.append(_Actor(name or f"actor-{len(self._actors)}", execute, interrupt))

    def add_task(self, execute: Execute, name: str | None = None, interrupt: Interrupt | None = None) -> None:
        """Add a one-shot start step: it runs beside the actors; when it returns, the group goes on;
        when it raises, the group ends with its error. It is not waited for on stop (its thread is
        a daemon: a step that loads a library cannot be cut short)."""
        self.add(execute, interrupt or (lambda: None), name)
        self._actors[-1].task = True

    def add_signals(self, on_signal: Callable[[int], None] | None = None) -> StopEvent:
        """Add the stop-signal actor: SIGTERM or SIGINT make it return None (the group stops
        cleanly); ``on_signal(signum)`` is called first. Returns its event: setting it is the same
        stop (a test's SIGTERM off the main thread, where handlers cannot be installed)."""
        if self._signals is not None:
            raise RuntimeError("ActorGroup.add_signals twice: one signal actor per group")
        stop = StopEvent()
        self._signals = (stop, on_signal)

        def wait_for_signal() -> None:
            stop.wait()

        self.add(wait_for_signal, stop.set, name="signals")
        return stop

    def run(self) -> Any:
        """Run every actor until the first returns; then interrupt all, wait, return its result or
        raise its exception. None for an empty group."""
        if self._ran:
            raise RuntimeError("ActorGroup.run twice: a group runs once")
        self._ran = True
        if not self._actors:
            return None
        # The calling thread sleeps on a StopEvent: within add_signals' handlers, a signal that the
        # kernel delivered to another thread still wakes it (its socket is the wakeup fd).
        settled = StopEvent()
        lock = threading.Lock()
        outcomes: list[_Outcome] = []

        def body(actor: _Actor) -> None:
            outcome = _Outcome(actor)
            try:
                outcome.result = actor.execute()
            except BaseException as exc:  # every way an actor ends is an outcome, a bug too
                outcome.error = exc
            if actor.task and outcome.error is None:
                return
            with lock:
                outcomes.append(outcome)
            settled.set()

        def thread_died(args: threading.ExceptHookArgs) -> None:
            # Any other thread's uncaught exception ends the group as an actor's would.
            thread_name = args.thread.name if args.thread is not None else "?"
            error = args.exc_value if args.exc_value is not None else args.exc_type()
            with lock:
                outcomes.append(_Outcome(_Actor(thread_name, lambda: None, lambda: None), error=error))
            settled.set()

        threads = [threading.Thread(target=body, args=(a,), name=a.name, daemon=True) for a in self._actors]
        signals = self._signals
        with (
            stop_on_signals(signals[0], signals[1], wake=settled)
            if signals is not None
            else contextlib.nullcontext(settled)
        ):
            previous_hook = threading.excepthook
            threading.excepthook = thread_died
            try:
                for thread in threads:
                    thread.start()
                settled.wait()
                with lock:
                    first = outcomes[0]
                _log.debug("actor %s ended the group", first.actor.name)
                self._interrupt_all()
                self._wait_for(threads, outcomes, lock)
            finally:
                threading.excepthook = previous_hook
        settled.close()
        error = first.error
        if error is None:
            return first.result
        if isinstance(error, (RknnLaunchError, KeyboardInterrupt, SystemExit)):
            raise error
        _log.debug("the %s thread died", first.actor.name, exc_info=(type(error), error, error.__traceback__))
        raise ActorDied(first.actor.name, error) from error

    def _interrupt_all(self) -> None:
        for actor in self._actors:
            try:
                actor.interrupt()
            except Exception:  # one broken interrupt must not keep the others running
                _log.exception("interrupting %s failed", actor.name)

    def _wait_for(
        self, threads: list[threading.Thread], outcomes: list[_Outcome], lock: threading.Lock
    ) -> None:
        deadline = None if self.stop_timeout is None else time.monotonic() + self.stop_timeout
        for actor, thread in zip(self._actors, threads, strict=True):
            if not actor.task:
                thread.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        with lock:
            ended = {id(outcome.actor) for outcome in outcomes}
        # An actor whose outcome is in has ended; its thread may still be on its way out (with a
        # budget of 0 it often is): only actors with no outcome are left behind (tasks are not waited for).
        left = [
            actor.name
            for actor, thread in zip(self._actors, threads, strict=True)
            if thread.is_alive() and id(actor) not in ended and not actor.task
        ]
        if left:
            _log.warning(
                "still running after the stop budget; leaving them behind",
                extra={"fields": {"actors": left, "stop_timeout_s": self.stop_timeout}},
            )


def closing_actor(close: Callable[[], None]) -> tuple[Execute, Interrupt]:
    """An actor for a piece that already runs on its own threads (an HTTP server): ``execute``
    waits for the interrupt, then calls ``close`` (on the actor's thread, within the stop budget)."""
    interrupted = threading.Event()

    def execute() -> None:
        interrupted.wait()
        close()

    return execute, interrupted.set
