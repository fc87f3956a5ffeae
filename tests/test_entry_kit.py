"""The exit-code table the three commands share (`rknnlaunch._entry`) and the servers' kit
(`rknpu_serverkit`): usage errors, settings errors, stop signals and bounded one-line logs."""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fakehost import make_host
from rknnlaunch import (
    DiscoveryError,
    MaskError,
    ModelError,
    RknnLaunchError,
    SettingsError,
    UsageError,
)
from rknnlaunch._entry import UsageParser, exit_code_for, run_main
from rknpu_serverkit import (
    MAX_LOG_LINE_CHARS,
    LogLevel,
    StopEvent,
    add_setting_flags,
    check_soc_name,
    settings_from_flags,
    setup_logging,
    stop_on_signals,
)


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (UsageError("bad flag", "fix it"), 2, "prog: error: bad flag\n  fix: fix it"),
        (SettingsError("RKNN_NPU_SOC='x': unknown"), 2, "prog: error: RKNN_NPU_SOC='x': unknown"),
        (MaskError("mask 0"), 2, "prog: error: mask 0"),
        (DiscoveryError("no NPU", "load rknpu"), 1, "prog: error: no NPU\n  fix: load rknpu"),
        (ModelError("truncated"), 1, "prog: error: truncated"),
        (PermissionError(13, "Permission denied", "/etc/x"), 1, "prog: error: Permission denied: /etc/x"),
        (FileNotFoundError(2, "No such file or directory"), 1, "prog: error: No such file or directory"),
        (OSError("socket gone"), 1, "prog: error: socket gone"),
        (BrokenPipeError(32, "Broken pipe"), 141, None),
        (KeyboardInterrupt(), 130, "prog: interrupted"),
        (SystemExit(0), 0, None),
        (SystemExit(2), 2, None),
    ],
)
def test_how_main_ended_gives_one_exit_code_and_one_line(
    exc: BaseException,
    code: int,
    line: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("rknnlaunch._entry._silence_stdout", lambda: None)

    def body() -> int:
        raise exc

    assert exit_code_for(exc) == code
    assert run_main("prog", body) == code
    err = capsys.readouterr().err
    assert err == ("" if line is None else line + "\n")
    assert "Traceback" not in err


def test_a_bug_still_raises_with_its_traceback() -> None:
    def body() -> int:
        raise ValueError("a bug")

    assert exit_code_for(ValueError()) is None
    with pytest.raises(ValueError, match="a bug"):
        run_main("prog", body)


def test_the_error_line_goes_to_the_configured_logger_as_json() -> None:
    stream = io.StringIO()
    stop = setup_logging("rknnlaunch.test_entry", "json", "info", stream, queued=False)
    try:

        def body() -> int:
            raise DiscoveryError("no NPU", "load the driver")

        assert run_main("prog", body, "rknnlaunch.test_entry") == 1
    finally:
        stop()
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["level"] == "error"
    assert line["msg"] == "no NPU\n  fix: load the driver"


def test_the_parser_raises_usage_errors_instead_of_exiting() -> None:
    parser = UsageParser(prog="prog")
    parser.add_argument("--count", type=int)
    with pytest.raises(UsageError, match="invalid int value") as caught:
        parser.parse_args(["--count", "many"])
    assert caught.value.fix == "see `prog --help`"
    assert run_main("prog", lambda: len(parser.parse_args(["--help"]).__dict__)) == 0


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


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RKNPU_", "RKNN_"))}
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60, env=env
    )


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("rknnlaunch", ["doctor", "--no-such-flag"]),
        ("rknpu_device_plugin", ["--mode", "sideways"]),
        ("rknpu_device_plugin.telemetry._exporter", ["--interval", "-1", "--once", "--nfd-dir", "/tmp"]),
    ],
)
def test_the_three_commands_say_usage_errors_the_same_way(module: str, args: list[str]) -> None:
    result = _run(module, *args)
    assert result.returncode == 2, result.stderr
    first, fix = result.stderr.splitlines()
    assert first.startswith(
        ("rknnlaunch: error: ", "rknpu-device-plugin: error: ", "rknpu-exporter: error: ")
    )
    assert fix.startswith("  fix: ")


def test_exporter_once_with_an_unwritable_nfd_dir_says_why(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the folder should be")  # unwritable even for root
    host = tmp_path / "host"
    make_host("rk3588-drm", host)
    result = _run(
        "rknpu_device_plugin.telemetry._exporter",
        *(
            "--once",
            "--host-root",
            str(host),
            "--nfd-dir",
            str(blocker / "features.d"),
            "--log-format",
            "json",
        ),
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    [error] = [line for line in lines if line["level"] == "error"]
    assert error["msg"].startswith(f"cannot write the NFD feature file in {blocker / 'features.d'}: ")
    assert "fix: make --nfd-dir a folder the exporter may write" in error["msg"]


def test_rknnlaunch_errors_are_still_rknnlaunch_errors() -> None:
    assert issubclass(SettingsError, UsageError) and issubclass(UsageError, RknnLaunchError)
