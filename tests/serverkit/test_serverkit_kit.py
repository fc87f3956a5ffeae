"""The server kit's settings flags, stop signals and bounded one-line logs (`rknpu_serverkit`)."""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import signal
import threading
from pathlib import Path

import pytest
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rknnlaunch import SettingsError
from rknpu_serverkit import (
    MAX_LOG_LINE_CHARS,
    LogLevel,
    StopEvent,
    UsageParser,
    add_setting_flags,
    check_soc_name,
    settings_from_flags,
    setup_logging,
    stop_on_signals,
)


class _Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KIT_TEST_", extra="forbid")
    interval: float = Field(1.0, gt=0, description="seconds")
    level: LogLevel = Field("info", description="log level")
    soc: str | None = Field(None, description="SoC")
    quiet: bool = Field(False, description="say less")

    _check_soc = field_validator("soc")(check_soc_name)


def _parse(argv: list[str]) -> _Settings:
    parser = UsageParser(prog="kit", argument_default=argparse.SUPPRESS)
    add_setting_flags(parser, _Settings, "KIT_TEST_", {"interval": float})
    return settings_from_flags(_Settings, parser.parse_args(argv), "KIT_TEST_", "kit")


def test_settings_errors_name_the_flag_and_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _parse(["--interval", "2", "--no-quiet"]).interval == 2.0
    monkeypatch.setenv("KIT_TEST_LEVEL", "WARNING")
    assert _parse([]).level == "warning"  # upper case from the environment is accepted
    monkeypatch.setenv("KIT_TEST_INTERVAL", "-1")
    with pytest.raises(SettingsError) as caught:
        _parse([])
    assert "--interval (env KIT_TEST_INTERVAL): Input should be greater than 0" in caught.value.problem
    assert caught.value.exit_code == 2


class _Bounded(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KIT_TEST_", extra="forbid")
    copies: int = Field(1, ge=1, le=8, description="copies (at most 8 because the ring has 8 slots)")
    delay: float = Field(1.0, gt=0, description="seconds")
    soc: str | None = Field(None, description="SoC")

    _check_soc = field_validator("soc")(check_soc_name)


def _parse_bounded(argv: list[str]) -> _Bounded:
    parser = UsageParser(prog="kit", argument_default=argparse.SUPPRESS)
    add_setting_flags(parser, _Bounded, "KIT_TEST_", {"copies": int, "delay": float})
    return settings_from_flags(_Bounded, parser.parse_args(argv), "KIT_TEST_", "kit")


def test_a_bound_error_fix_names_the_valid_range_and_the_stated_reason() -> None:
    with pytest.raises(SettingsError) as caught:
        _parse_bounded(["--copies", "9"])
    assert caught.value.fix == "use --copies between 1 and 8 (at most 8 because the ring has 8 slots)"
    with pytest.raises(SettingsError) as caught:
        _parse_bounded(["--delay", "0"])
    assert caught.value.fix == "use --delay above 0"
    # Another kind of error beside it keeps the general fix too.
    with pytest.raises(SettingsError) as caught:
        _parse_bounded(["--delay", "0", "--soc", "rk9999"])
    assert caught.value.fix is not None
    assert caught.value.fix.startswith("use --delay above 0; fix the flag or its KIT_TEST_* environment")


def test_soc_validator_lists_the_known_names() -> None:
    assert check_soc_name("rk3588") == "rk3588"
    assert check_soc_name(None) is None
    with pytest.raises(ValueError, match="unknown SoC 'rk9999'; use rk3588"):
        check_soc_name("rk9999")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_signals_set_the_event_and_handlers_are_restored(signum: int) -> None:
    before = signal.getsignal(signum)
    seen: list[int] = []
    with stop_on_signals(StopEvent(), seen.append) as stop:
        os.kill(os.getpid(), signum)
        assert stop.wait(5)
    assert seen == [signum]
    assert signal.getsignal(signum) == before


def test_a_signal_landing_on_another_thread_still_wakes_the_main_thread() -> None:
    # The kernel hands a process signal to any thread; Python runs the handler in the main thread
    # only, which a plain Event.wait() does not wake (SIGTERM then waited for the next timeout).
    with stop_on_signals(StopEvent()) as stop:
        sender = threading.Timer(0.1, lambda: signal.pthread_kill(threading.get_ident(), signal.SIGTERM))
        sender.start()
        assert stop.wait(30)  # a plain Event would return False after 30 s
        sender.join()


def test_log_lines_stay_short_and_on_one_line() -> None:
    stream = io.StringIO()
    stop = setup_logging("rknnlaunch.test_entry", "json", "info", stream, queued=False)
    log = logging.getLogger("rknnlaunch.test_entry")
    try:
        log.error("refused " + "x" * 100_000, extra={"fields": {"ids": [f"id-{i}" for i in range(10_000)]}})
        log.error("many fields", extra={"fields": {f"f{i}": "y" * 900 for i in range(50)}})
        logging.getLogger("foreign.library").warning("from someone else")
    finally:
        stop()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert all(len(line) <= MAX_LOG_LINE_CHARS for line in lines)
    first, second, foreign = (json.loads(line) for line in lines)
    assert first["msg"].endswith("(100,008 characters)") and first["ids"][-1] == "... (10,000 items)"
    assert "left out" in second["truncated"]
    assert foreign == {**foreign, "logger": "foreign.library", "msg": "from someone else"}

    stream = io.StringIO()
    stop = setup_logging("rknnlaunch.test_entry", "text", "info", stream, queued=False)
    try:
        log.error("forged\r\x1b[2Kline\nnext", extra={"fields": {"id": "a\x00b"}})
    finally:
        stop()
    [line] = stream.getvalue().splitlines()
    assert "forged\\r\\x1b[2Kline | next" in line and "id=a\\x00b" in line


class _Said(logging.Handler):
    """Records as they come, awaitable (no sleep)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.changed:
            self.records.append(record)
            self.changed.notify_all()


def test_the_kubelet_wait_notice_is_said_once_with_the_folder(tmp_path: Path) -> None:
    from rknpu_serverkit import KUBELET_WAIT_NOTICE_S, KubeletWaitNotice

    assert KUBELET_WAIT_NOTICE_S == 30.0
    logger = logging.getLogger("kit-test.kubelet-wait")
    said = _Said()
    logger.addHandler(said)
    try:
        notice = KubeletWaitNotice(logger, tmp_path, "--device-plugin-dir", after=0.05)
        notice.start()
        notice.start()  # still the same wait: one timer
        with said.changed:
            assert said.changed.wait_for(lambda: said.records, 60)
        notice.stop()  # the kubelet came
        [record] = said.records
        assert record.levelno == logging.WARNING
        assert record.getMessage() == "still waiting for the kubelet after 0.05 s"
        fields = record.fields  # type: ignore[attr-defined]
        assert fields["folder"] == str(tmp_path) and "--device-plugin-dir" in fields["fix"]
        quiet = KubeletWaitNotice(logger, tmp_path, "--registration-dir", after=3600)
        quiet.start()
        quiet.stop()  # came in time: the timer is cancelled, nothing is said
        assert len(said.records) == 1
    finally:
        logger.removeHandler(said)
