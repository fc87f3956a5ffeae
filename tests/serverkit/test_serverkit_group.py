"""The actor group (`rknpu_serverkit.ActorGroup`): the first actor to end stops all, its result or
error is the group's, every interrupt runs once, and no thread is left behind."""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import dataclass, field

import pytest

from rknnlaunch import RknnLaunchError
from rknpu_serverkit import ActorDied, ActorGroup, closing_actor


class Boom(Exception):
    pass


@dataclass
class Actor:
    """An actor that returns, raises, or blocks until interrupted (then returns ``name``)."""

    name: str
    does: str  # "return" | "raise" | "block"
    interrupts: int = 0
    released: threading.Event = field(default_factory=threading.Event)

    def execute(self) -> str:
        if self.does == "raise":
            raise Boom(self.name)
        if self.does == "block":
            self.released.wait()
        return self.name

    def interrupt(self) -> None:
        self.interrupts += 1
        self.released.set()


def _actor_threads(names: list[str]) -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name in names]


@pytest.mark.parametrize(
    ("plan", "outcome"),
    [
        (["return"], "a0"),
        (["block", "return", "block"], "a1"),
        (["block", "block", "return"], "a2"),
        (["raise"], Boom("a0")),
        (["block", "raise", "block"], Boom("a1")),
        (["return", "block"], "a0"),
    ],
    ids=["alone", "middle-returns", "last-returns", "raises-alone", "middle-raises", "first-returns"],
)
def test_the_first_actor_to_end_decides_and_every_actor_is_interrupted_once(
    plan: list[str], outcome: str | Exception
) -> None:
    actors = [Actor(f"a{index}", does) for index, does in enumerate(plan)]
    group = ActorGroup()
    for actor in actors:
        group.add(actor.execute, actor.interrupt, name=actor.name)
    if isinstance(outcome, Exception):
        # A bug in an actor ends the group as one error naming the thread, the exception kept.
        with pytest.raises(ActorDied, match=f"the {outcome} thread died: Boom: {outcome}") as caught:
            group.run()
        assert isinstance(caught.value.error, Boom)
        assert caught.value.fix is not None
    else:
        assert group.run() == outcome
    assert [actor.interrupts for actor in actors] == [1] * len(actors)
    assert _actor_threads([actor.name for actor in actors]) == []


def test_an_empty_group_returns_none_and_a_group_runs_once() -> None:
    group = ActorGroup()
    assert group.run() is None
    with pytest.raises(RuntimeError):
        group.run()
    with pytest.raises(RuntimeError):
        group.add(lambda: None, lambda: None)


def test_a_broken_interrupt_does_not_keep_the_others_running(caplog: pytest.LogCaptureFixture) -> None:
    blocked = Actor("blocked", "block")
    group = ActorGroup()

    def broken() -> None:
        raise OSError("socket already gone")

    group.add(lambda: "done", broken, name="quick")
    group.add(blocked.execute, blocked.interrupt, name="blocked")
    with caplog.at_level(logging.ERROR, logger="rknpu_serverkit"):
        assert group.run() == "done"
    assert blocked.interrupts == 1
    assert "interrupting quick failed" in caplog.text


def test_an_actor_deaf_to_its_interrupt_is_left_behind_after_the_stop_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deaf = threading.Event()
    group = ActorGroup(stop_timeout=0)
    group.add(lambda: "done", lambda: None, name="quick")
    group.add(deaf.wait, lambda: None, name="deaf")
    with caplog.at_level(logging.WARNING, logger="rknpu_serverkit"):
        assert group.run() == "done"
    assert "still running after the stop budget" in caplog.text
    assert caplog.records[-1].fields["actors"] == ["deaf"]  # type: ignore[attr-defined]
    deaf.set()  # end it here, so no thread outlives the test
    for thread in threading.enumerate():
        if thread.name == "deaf":
            thread.join()


def test_the_signal_actor_is_a_clean_stop_when_its_event_is_set() -> None:
    loop = Actor("loop", "block")
    group = ActorGroup()
    stop = group.add_signals()
    group.add(loop.execute, loop.interrupt, name="loop")
    threading.Thread(target=stop.set).start()
    assert group.run() is None
    assert loop.interrupts == 1
    assert _actor_threads(["signals", "loop"]) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_sent_from_another_thread_ends_the_group_and_handlers_come_back(signum: int) -> None:
    assert threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signum)
    seen: list[int] = []
    loop = Actor("loop", "block")
    group = ActorGroup()
    group.add_signals(seen.append)
    # The loop sends the signal once it runs: the handlers are installed before any actor starts.
    group.add(lambda: (os.kill(os.getpid(), signum), loop.execute())[1], loop.interrupt, name="loop")
    assert group.run() is None
    assert seen == [signum]
    assert loop.interrupts == 1
    assert signal.getsignal(signum) is before


def test_a_closing_actor_closes_on_its_own_thread_after_the_interrupt() -> None:
    closed_on: list[str] = []
    group = ActorGroup()
    group.add(*closing_actor(lambda: closed_on.append(threading.current_thread().name)), name="server")
    group.add(lambda: "done", lambda: None, name="quick")
    assert group.run() == "done"
    assert closed_on == ["server"]


def test_a_task_may_end_early_but_its_error_ends_the_group() -> None:
    blocker = Actor("b0", "block")
    group = ActorGroup(stop_timeout=2)
    group.add(blocker.execute, blocker.interrupt, name=blocker.name)
    done = threading.Event()
    group.add_task(done.set, name="t-ok")

    def fail_after_ok() -> None:
        done.wait()
        raise RknnLaunchError("no API client", "pass --kubeconfig")

    group.add_task(fail_after_ok, name="t-fail")
    with pytest.raises(RknnLaunchError, match="no API client"):  # its own line, not wrapped
        group.run()
    assert blocker.interrupts == 1


def test_any_thread_that_dies_while_the_group_runs_ends_it() -> None:
    blocker = Actor("b1", "block")
    group = ActorGroup(stop_timeout=2)
    group.add(blocker.execute, blocker.interrupt, name=blocker.name)

    def start_a_doomed_helper() -> None:
        def doomed() -> None:
            raise KeyError("cluster")

        threading.Thread(target=doomed, name="api-loader", daemon=True).start()

    group.add_task(start_a_doomed_helper, name="starter")
    hook = threading.excepthook
    with pytest.raises(ActorDied, match="the api-loader thread died: KeyError: 'cluster'"):
        group.run()
    assert blocker.interrupts == 1
    assert threading.excepthook is hook  # the process's hook is back
