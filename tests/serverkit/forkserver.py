"""A fork server for the servers' bad-input table: one interpreter loads what every install has
(pydantic, pydantic-settings, rknnlaunch, rknpu_serverkit), then forks one process per row, so
100 rows do not each pay the interpreter's and pydantic's start (about 0.2 s of CPU apiece).

Nothing optional (grpc, kubernetes, prometheus-client, PyYAML, inotify-simple) and none of the
programs' own modules are loaded before the fork: each child imports its program as
``python -m`` would, with the row's blocked modules set to None in ``sys.modules`` (what Python
does for a package that is not installed) and, for a permission row, without root's file-mode
override (tests/filemodes.py).

Protocol: run as a script; stdin is one JSON request per line ``{"id", "module", "args", "env",
"block", "modes_bind", "stderr", "timeout"}`` until EOF; stdout gets one JSON answer per request
``{"id", "code", "seconds", "cpu_seconds"}`` (``code`` null: killed at its timeout).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any

import pydantic  # noqa: F401  (loaded once, before the forks)
import pydantic_settings  # noqa: F401

import rknnlaunch
import rknnlaunch.npu  # noqa: F401
import rknpu_serverkit  # noqa: F401

MAX_CHILDREN = 8


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become the row's process, run the program, never return."""
    code = 1
    try:
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.environ.clear()
        os.environ.update(request["env"])
        for name in request["block"]:
            sys.modules[name] = None  # type: ignore[assignment]
        if request["modes_bind"] == "owner":
            from filemodes import drop_mode_override

            drop_mode_override()
        elif request["modes_bind"] == "other-user":
            from filemodes import become_other_user

            become_other_user()
        os.chdir("/")
        sys.argv = [request["module"], *request["args"]]
        import runpy

        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # the row's failure: its traceback is what the table looks for
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> None:
    requests = [json.loads(line) for line in sys.stdin if line.strip()]
    running: dict[int, tuple[dict[str, Any], int, float]] = {}  # pidfd -> request, pid, start
    pending = list(reversed(requests))
    while pending or running:
        while pending and len(running) < MAX_CHILDREN:
            request = pending.pop()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request)
            running[os.pidfd_open(pid)] = (request, pid, time.monotonic())
        now = time.monotonic()
        deadline = min(start + request["timeout"] for request, _pid, start in running.values())
        ready, _, _ = select.select(list(running), [], [], max(deadline - now, 0.0))
        now = time.monotonic()
        for fd in list(running):
            request, pid, start = running[fd]
            if fd not in ready and now - start < request["timeout"]:
                continue
            code: int | None
            if fd not in ready:
                os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            code = os.waitstatus_to_exitcode(status) if fd in ready else None
            os.close(fd)
            del running[fd]
            answer = {"id": request["id"], "code": code, "seconds": now - start}
            answer["cpu_seconds"] = usage.ru_utime + usage.ru_stime
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
