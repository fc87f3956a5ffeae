"""The exit-code table the three commands share (`rknnlaunch._entry`): usage errors, error lines,
and the commands saying them the same way. (The servers' kit: tests/serverkit/.)"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
from rknpu_serverkit import setup_logging


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
        (
            ModuleNotFoundError("No module named 'numpy'", name="numpy"),
            1,
            "prog: error: missing Python package: numpy\n  fix: pip install rknnlaunch"
            " (or, if it is installed, let this user read its site-packages folder)",
        ),
        (
            ModuleNotFoundError("No module named 'cv2'", name="cv2"),
            1,
            "prog: error: missing Python package: cv2\n  fix: pip install 'rknnlaunch[vision]'"
            " (or, if it is installed, let this user read its site-packages folder)",
        ),
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


def test_one_of_our_own_modules_missing_is_a_bug_not_an_install_hint() -> None:
    exc = ModuleNotFoundError("No module named 'rknnlaunch.nothing'", name="rknnlaunch.nothing")

    def body() -> int:
        raise exc

    assert exit_code_for(exc) is None
    with pytest.raises(ModuleNotFoundError):
        run_main("prog", body)


def test_a_command_whose_dependency_is_gone_says_which_and_how_to_install_it(tmp_path: Path) -> None:
    # A real interpreter with numpy hidden (a meta-path finder that refuses it), as on an install
    # that lost it or a user who cannot read the venv: one line, the package, the pip command.
    hide = tmp_path / "sitecustomize.py"
    hide.write_text(
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'numpy':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Refuse())\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(root), str(root / "plugin")]))
    done = subprocess.run(
        [sys.executable, "-m", "rknnlaunch", "bench", "-n", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(
        "rknnlaunch: error: missing Python package: numpy\n  fix: pip install rknnlaunch"
    )


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
        ("rknpu_device_plugin.exporter._exporter", ["--interval", "-1", "--once", "--nfd-dir", "/tmp"]),
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
        "rknpu_device_plugin.exporter._exporter",
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
    # Refused at start, before any discovery (a bad setting: exit 2, as the settings' errors, in
    # plain text since logging has not started).
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    problem, fix = result.stderr.splitlines()
    where = f"--nfd-dir {blocker / 'features.d'} (its parent {blocker})"
    assert problem == f"rknpu-exporter: error: {where} is a file, not a folder"
    assert fix.strip().startswith("fix: point --nfd-dir at a folder")


def test_rknnlaunch_errors_are_still_rknnlaunch_errors() -> None:
    assert issubclass(SettingsError, UsageError) and issubclass(UsageError, RknnLaunchError)
