"""Stopping: every loop of the driver ends within its stop budget, a slow API server or not, so a
SIGTERM'd instance exits at once and no actor is left behind (issue 31: the slices loop, waiting
on a slow API call, was left behind after the 1.5 s budget). The time SIGTERM-to-exit takes is
measured by benchmarks/stop_bench.py; these tests assert on what the group reports."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from drarig import DRIVER, NODE, DriverRig, driver_argv
from fakeapi import RESOURCE
from kubeletstub import KubeletStub

LEFT_BEHIND = "still running after the stop budget; leaving them behind"
SLOW_S = 10.0
"""The API server's answer time while the driver stops: far over the stop budget (1.5 s)."""
_PATHS = os.pathsep.join(sys.path)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _slow_publish(rig: DriverRig) -> None:
    """The publisher waits on a slow API call: the slice is deleted (its watch wakes the
    publisher) while the server takes SLOW_S to answer."""
    since = len(rig.api.requests)
    rig.api.delay = SLOW_S
    rig.api.delete_slices(NODE)
    rig.api.wait_request("GET", f"{RESOURCE}/resourceslices", since)


def test_a_stop_during_a_slow_api_call_leaves_no_loop_behind(rig: DriverRig) -> None:
    group_log = logging.getLogger("rknpu_serverkit")
    records = _Records()
    group_log.addHandler(records)
    try:
        kubelet = rig.start()
        rig.api.wait_slices(lambda slices: len(slices) == 1)
        _slow_publish(rig)
        began = time.monotonic()
        rig.end()
        stopped_in = time.monotonic() - began
        kubelet.close()
    finally:
        group_log.removeHandler(records)
        rig.api.delay = 0.0
    assert [m for m in records.messages if LEFT_BEHIND in m] == []
    assert stopped_in < SLOW_S  # the slow call was cut, not waited for
    assert rig.result == [0]


@pytest.mark.parametrize("slow", [False, True], ids=["idle", "slow-api"])
def test_a_sigterm_ends_the_process_with_no_actor_left_behind(rig: DriverRig, slow: bool) -> None:
    settings = rig.settings
    process = subprocess.Popen(
        driver_argv(settings), stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": _PATHS}
    )
    try:
        kubelet = KubeletStub(settings.registration_dir, DRIVER)
        kubelet.register(timeout=60)
        health = kubelet.watch_health("v1")  # as the kubelet does: a health stream is open
        next(health)
        rig.api.wait_slices(lambda slices: len(slices) == 1)
        if slow:
            _slow_publish(rig)
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
        stopped_in = time.monotonic() - began
        kubelet.close()
    finally:
        rig.api.delay = 0.0
        if process.poll() is None:
            process.kill()
            process.wait(10)
    lines: list[dict[str, Any]] = [
        json.loads(line) for line in (process.stderr.read() if process.stderr else "").splitlines()
    ]
    assert code == 0
    assert [line for line in lines if LEFT_BEHIND in str(line.get("msg"))] == []
    assert stopped_in < SLOW_S
