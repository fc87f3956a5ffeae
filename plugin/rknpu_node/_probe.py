"""The functional probe: one inference per free NPU core, each in a child process with a timeout.

Device nodes and a loaded driver do not prove a core works: on some boards and kernels cores 1
and 2 fail every job ("failed to submit!") while core 0 works. The probe runs a tiny model of our
own on each core (`_probe_child`), at start and every ``--probe-interval``; a core that fails,
crashes its child or does not answer within ``--probe-timeout`` is reported to the resource
manager, which turns its devices Unhealthy until a later probe passes.

A core a pod holds (kubelet's pod-resources API) is never probed: its last verdict stands. When
pod-resources cannot be asked, the round is skipped rather than risk a busy core. The cost on a
core that is allocated while its probe runs is bounded by the timeout: one tiny inference.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rknnlaunch.npu import NpuInfo

from ._events import PluginEvents
from ._log import get_logger
from ._manager import ResourceManager

_log = get_logger("probe")

CHILD_MODULE = "rknpu_node._probe_child"
# A child killed at its timeout normally dies at once; one stuck in the driver (uninterruptible
# sleep) may not. Wait this long for it, then leave it: the plugin must go on.
_KILL_WAIT_SECONDS = 2.0
_REASON_MAX = 600
_STDERR_TAIL_LINES = 3
# When no NPU is known yet, look again this often (not every --probe-interval).
_NO_NPU_RETRY_SECONDS = 5.0


@dataclass(frozen=True)
class ProbeResult:
    """One core's verdict: passed, or why not; ``seconds`` is how long the probe took."""

    core: int
    ok: bool
    seconds: float
    reason: str | None = None
    unusable: bool = False
    """The probe could not judge the core (its settings, the NPU's discovery or the model failed):
    no verdict, and probing pauses with the reason in the log."""


class HoldersUnknownError(Exception):
    """Which cores pods hold cannot be told now (pod-resources off or not answering)."""


def _bounded(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 3] + "..."


def _stderr_tail(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return " | ".join(lines[-_STDERR_TAIL_LINES:])


def result_from_child(
    core: int, returncode: int | None, stdout: str, stderr: str, seconds: float
) -> ProbeResult:
    """A finished child's verdict from its report (stdout) and exit; pure."""
    report: dict[str, object] = {}
    for line in reversed(stdout.splitlines()):
        with contextlib.suppress(ValueError):
            parsed = json.loads(line)
            if isinstance(parsed, dict):
                report = parsed
                break
    if report.get("ok") is True:
        reported = report.get("seconds")
        took = float(reported) if isinstance(reported, (int, float)) else seconds
        return ProbeResult(core, True, took)
    if report.get("unusable") is True:
        return ProbeResult(core, False, seconds, _bounded(str(report.get("reason"))), unusable=True)
    if "ok" in report:
        reason = str(report.get("reason") or "the probe failed")
    elif returncode is not None and returncode < 0:
        reason = f"the probe child died with {signal.Signals(-returncode).name}"
    else:
        reason = f"the probe child exited with status {returncode} without a verdict"
    tail = _stderr_tail(stderr)
    if tail and tail not in reason:
        reason = f"{reason}; log: {tail}"
    return ProbeResult(core, False, seconds, _bounded(reason))


class ProbeRunner:
    """Starts the probe child for one core at a time and kills it at the timeout.

    Children run in their own session so the kill reaches everything they started. `kill()` may be
    called from another thread (shutdown): the probe in flight then ends at once.
    """

    def __init__(
        self,
        timeout: float,
        host_root: Path,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.timeout = timeout
        self.host_root = host_root
        self._python = python
        base = dict(os.environ if env is None else env)
        # The child builds its rknnlaunch settings from its arguments only: nothing the plugin's
        # own environment says about an allocation may leak into the probe.
        self._env = {k: v for k, v in base.items() if not k.startswith("RKNN_NPU_")}
        self._lock = threading.Lock()
        self._current: subprocess.Popen[str] | None = None
        self._killed = False
        self._abandoned: list[subprocess.Popen[str]] = []

    def check(self, model: Path) -> str | None:
        """None when probing can work here, else why not (no rknn-toolkit-lite2 or librknnrt, or a
        runtime older than the model)."""
        code, stdout, stderr, _seconds = self._run(["--check", "--model", str(model)])
        for line in reversed(stdout.splitlines()):
            with contextlib.suppress(ValueError):
                report = json.loads(line)
                if isinstance(report, dict) and "available" in report:
                    return None if report["available"] is True else str(report.get("reason"))
        return _bounded(f"the probe check failed (status {code}): {_stderr_tail(stderr) or 'no output'}")

    def probe(self, core: int, model: Path, info: NpuInfo) -> ProbeResult:
        args = [
            "--model",
            str(model),
            "--core",
            str(core),
            "--root",
            str(self.host_root),
            "--soc",
            info.soc.name,
        ]
        if info.compatible_path:
            args += ["--compatible-file", info.compatible_path]
        code, stdout, stderr, seconds = self._run(args)
        if code is None:
            tail = _stderr_tail(stderr)
            return ProbeResult(
                core,
                False,
                seconds,
                _bounded(
                    f"no answer within {self.timeout:g} s (hung; the probe child was killed)"
                    + (f"; log: {tail}" if tail else "")
                ),
            )
        return result_from_child(core, code, stdout, stderr, seconds)

    def _run(self, args: Sequence[str]) -> tuple[int | None, str, str, float]:
        """Run the child; (exit status or None on timeout, stdout, stderr, seconds)."""
        # Reap children left stuck in the driver earlier, once they have finally died.
        self._abandoned = [process for process in self._abandoned if process.poll() is None]
        started = time.monotonic()
        process = subprocess.Popen(
            [self._python, "-m", CHILD_MODULE, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=self._env,
            start_new_session=True,
        )
        with self._lock:
            self._current = process
            killed_already = self._killed
        if killed_already:
            self._kill(process)
        try:
            stdout, stderr = process.communicate(timeout=self.timeout)
            return process.returncode, stdout, stderr, time.monotonic() - started
        except subprocess.TimeoutExpired:
            self._kill(process)
            try:
                stdout, stderr = process.communicate(timeout=_KILL_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                _log.error(
                    "a probe child did not die after SIGKILL (stuck in the driver?); leaving it",
                    extra={"fields": {"pid": process.pid}},
                )
                self._abandoned.append(process)
                stdout, stderr = "", ""
            return None, stdout or "", stderr or "", time.monotonic() - started
        finally:
            with self._lock:
                self._current = None

    @staticmethod
    def _kill(process: subprocess.Popen[str]) -> None:
        # Its own session (start_new_session): the group id is the child's pid, ours to end.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)

    def kill(self) -> None:
        """End the probe in flight and refuse new ones (shutdown)."""
        with self._lock:
            self._killed = True
            process = self._current
        if process is not None:
            self._kill(process)


class ProbeLoop:
    """Probes every free core at start and every ``interval``; tells the resource manager and events."""

    def __init__(
        self,
        resources: ResourceManager,
        events: PluginEvents,
        runner: ProbeRunner,
        model_for: Callable[[str], Path | None],
        held_cores: Callable[[], Collection[int]],
        interval: float,
    ) -> None:
        self._resources = resources
        self._events = events
        self._runner = runner
        self._model_for = model_for
        self._held_cores = held_cores
        self._interval = interval
        self._verdicts: dict[int, ProbeResult] = {}
        self._pending: set[int] | None = None
        """Cores not yet judged since start (not offered meanwhile); None until the NPU is known."""
        self._said: str | None = None
        self._available: Path | None = None
        """The model the availability check passed for."""
        self.rounds = 0

    @property
    def verdicts(self) -> dict[int, ProbeResult]:
        return dict(self._verdicts)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                wait = self.run_round(stop)
            except Exception as exc:  # a bug must not end probing silently
                _log.error("probe round failed; retrying", extra={"fields": {"error": repr(exc)}})
                wait = self._interval
            stop.wait(wait)

    def close(self) -> None:
        self._runner.kill()

    def begin(self) -> None:
        """Hold every core back until its first verdict (called once the NPU is known, before the
        plugin registers): a pod must not get a broken core in the seconds before its probe."""
        info = self._resources.info
        if info is not None and self._pending is None:
            self._pending = set(range(info.core_count))
            self._publish()

    def _publish(self) -> None:
        failures = {core: r.reason or "failed" for core, r in self._verdicts.items() if not r.ok}
        self._resources.set_probe_failures(failures, self._pending or ())

    def _release_pending(self) -> None:
        """The probe cannot run now: cores it has not judged are offered on device health alone."""
        if self._pending:
            self._pending = set()
            self._publish()

    def run_round(self, stop: threading.Event) -> float:
        """One round over every free core; returns how long to wait before the next."""
        info = self._resources.info
        if info is None:
            return min(self._interval, _NO_NPU_RETRY_SECONDS)
        self.begin()
        model = self._model_for(info.soc.name)
        if model is None or not model.is_file():
            self._say_off(f"no probe model for {info.soc.name} at {model}")
            return self._interval
        if self._available != model:
            why_not = self._runner.check(model)
            if why_not is not None:
                self._say_off(why_not)
                return self._interval
            self._available = model
        for core in range(info.core_count):
            if stop.is_set():
                return 0.0
            try:
                # Asked again before each core: a pod allocated mid-round is not probed.
                held = set(self._held_cores())
            except HoldersUnknownError as exc:
                self._say_off(f"cannot tell which cores pods hold ({exc}); not probing until it can")
                return self._interval
            if core in held:
                _log.debug("core held by a pod; not probed", extra={"fields": {"core": core}})
                if self._pending and core in self._pending:
                    self._pending.discard(core)  # a pod runs on it: its health is the pod's to tell
                    self._publish()
                continue
            result = self._runner.probe(core, model, info)
            if stop.is_set():
                return 0.0  # killed by shutdown: not a verdict
            if result.unusable:
                self._available = None  # check again next round
                self._say_off(f"the probe cannot judge the cores: {result.reason}")
                return self._interval
            self._record(result)
            if self._pending:
                self._pending.discard(core)
            # Published per core, not per round: a broken core goes Unhealthy at once.
            self._publish()
        self._said = None
        self.rounds += 1
        return self._interval

    def _record(self, result: ProbeResult) -> None:
        before = self._verdicts.get(result.core)
        self._verdicts[result.core] = result
        self._events.probed(result.core, result.ok, result.seconds)
        fields = {"core": result.core, "seconds": round(result.seconds, 3)}
        if not result.ok:
            if before is None or before.ok or before.reason != result.reason:
                _log.warning("core failed its probe", extra={"fields": {**fields, "reason": result.reason}})
        elif before is None:
            _log.info("core passed its probe", extra={"fields": fields})
        elif not before.ok:
            _log.info("core passed its probe again", extra={"fields": fields})

    def _say_off(self, why: str) -> None:
        self._release_pending()
        if why != self._said:
            _log.warning("functional probe off", extra={"fields": {"reason": why}})
            self._said = why
