"""Driver instances on one node (rknpu_dra_driver.kubelet._instance, claims._serialize): the
socket names a rolling update's instances serve side by side, the removal of a dead instance's
sockets, the instance lock (exclusive without an instance id, shared with one) and the
serialize lock around each prepare and unprepare."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from rknpu_dra_driver.claims._serialize import SerializeLock
from rknpu_dra_driver.kubelet._instance import (
    UNIX_PATH_MAX,
    acquire,
    dra_socket_name,
    registration_socket_name,
    release,
    remove_dead_sockets,
)

DRIVER = "npu.rockchip.com"


@pytest.mark.parametrize(
    ("instance", "folder_chars", "expected"),
    [
        ("", 20, "npu.rockchip.com-reg.sock"),
        ("pod-1", 20, "npu.rockchip.com-pod-1-reg.sock"),
        # The id does not fit a unix socket address: its hash does.
        ("u" * 80, 20, "npu.rockchip.com-{hash8}-reg.sock"),
        # Not even the driver's name fits: a hash of both.
        ("u" * 80, 70, "dra-{hash16}-reg.sock"),
    ],
)
def test_registration_socket_names_fit_a_unix_socket_address(
    instance: str, folder_chars: int, expected: str
) -> None:
    folder = Path("/" + "f" * (folder_chars - 1))
    name = registration_socket_name(folder, DRIVER, instance)
    assert len(str(folder / name)) <= UNIX_PATH_MAX
    if "{hash8}" in expected:
        prefix, suffix = expected.split("{hash8}")
        assert name.startswith(prefix) and name.endswith(suffix) and len(name) == len(prefix + suffix) + 11
    elif "{hash16}" in expected:
        prefix, suffix = expected.split("{hash16}")
        assert name.startswith(prefix) and name.endswith(suffix) and len(name) == len(prefix + suffix) + 22
    else:
        assert name == expected
    assert registration_socket_name(folder, DRIVER, instance) == name  # the same every time


@pytest.mark.parametrize(("instance", "expected"), [("", "dra.sock"), ("pod-1", "dra-pod-1.sock")])
def test_the_dra_socket_name_is_the_instances(instance: str, expected: str) -> None:
    assert dra_socket_name(instance) == expected


def _listening(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    return server


def _dead(path: Path) -> None:
    """A socket file nobody serves (its process was killed)."""
    _listening(path).close()


def test_a_dead_instances_sockets_are_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    registry, plugin = tmp_path / "registry", tmp_path / "plugin"
    registry.mkdir()
    plugin.mkdir()
    ours_reg, ours_dra = registry / f"{DRIVER}-new-reg.sock", plugin / "dra-new.sock"
    _dead(ours_reg)  # our own paths go whatever they are: we are about to serve them
    _dead(registry / f"{DRIVER}-dead-reg.sock")
    _dead(plugin / "dra-dead.sock")
    live = _listening(plugin / "dra-live.sock")
    other = _listening(registry / "other.example.com-reg.sock")  # another driver's: never ours
    try:
        remove_dead_sockets(DRIVER, ours_dra, ours_reg)
        assert sorted(p.name for p in registry.iterdir()) == ["other.example.com-reg.sock"]
        assert sorted(p.name for p in plugin.iterdir()) == ["dra-live.sock"]
    finally:
        live.close()
        other.close()


def _acquired_in_thread(
    plugin_dir: Path, shared: bool
) -> tuple[threading.Thread, threading.Event, list[int | None]]:
    stop, got = threading.Event(), []
    thread = threading.Thread(target=lambda: got.append(acquire(plugin_dir, stop, shared=shared)))
    thread.start()
    return thread, stop, got


@pytest.mark.parametrize(
    ("first_shared", "second_shared", "side_by_side"),
    [
        (True, True, True),  # instances with ids serve side by side
        (False, False, False),  # one without an id at a time
        (False, True, False),  # one with an id waits for one without
        (True, False, False),  # and one without waits for those with ids
    ],
)
def test_the_instance_lock(
    tmp_path: Path, first_shared: bool, second_shared: bool, side_by_side: bool
) -> None:
    first = acquire(tmp_path, threading.Event(), shared=first_shared)
    assert first is not None
    thread, stop, got = _acquired_in_thread(tmp_path, second_shared)
    try:
        thread.join(0.5 if not side_by_side else 10)
        if side_by_side:
            assert got and got[0] is not None
        else:
            assert thread.is_alive()  # waiting for the first to stop
            release(first)
            thread.join(10)
            assert got and got[0] is not None  # the first stopped: it took over
    finally:
        stop.set()
        thread.join(10)
        release(first)
        for fd in got:
            if fd is not None:
                release(fd)


def test_a_stop_while_waiting_for_the_instance_lock_returns_none(tmp_path: Path) -> None:
    first = acquire(tmp_path, threading.Event())
    assert first is not None
    thread, stop, got = _acquired_in_thread(tmp_path, False)
    stop.set()
    thread.join(10)
    assert got == [None]
    release(first)


def test_the_serialize_lock_admits_one_prepare_at_a_time_across_instances(tmp_path: Path) -> None:
    one, other = SerializeLock(tmp_path), SerializeLock(tmp_path)  # two instances' locks
    entered = threading.Event()
    inside: list[str] = []
    with one.held():
        thread = threading.Thread(
            target=lambda: (other.held().__enter__(), inside.append("other"), entered.set())
        )
        thread.start()
        assert not entered.wait(0.3)  # the other instance waits while this one prepares
        inside.append("one")
    assert entered.wait(10)
    assert inside == ["one", "other"]
    thread.join(10)
    one.close()
    other.close()
