"""`rknnlaunch run` with real child processes: exec, exit codes, signals, env, the compatible shim."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_sdk_doctor import add_librknnrt, regular_file_nodes

from fakehost import write
from rknnlaunch.npu import HostRoot
from rknnlaunch.runtime._dtcompat import COMPATIBLE_PATHS, SHIM_DIR, readable

HostFactory = Callable[[str], HostRoot]
PLUGIN_VARS = (
    "RKNN_NPU_CORE_MASK",
    "RKNN_NPU_CORES",
    "RKNN_NPU_SOC",
    "RKNN_NPU_DEVICE",
    "RKNN_NPU_COMPATIBLE_FILE",
)


def base_env(root: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PLUGIN_VARS and not k.startswith("RKNNLAUNCH_")}
    if root is not None:
        env["RKNNLAUNCH_ROOT"] = str(root)
    env.update(extra)
    return env


def launch(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rknnlaunch", "run", *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def run(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    process = launch(args, env)
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


@pytest.fixture
def ready_host(host_factory: HostFactory, tmp_path: Path) -> tuple[HostRoot, Path]:
    """An RK3588 passing every check, plus a PYTHONPATH folder where rknn-toolkit-lite2 looks installed."""
    host = host_factory("rk3588-drm")
    add_librknnrt(host)
    regular_file_nodes(host)
    site = tmp_path / "site"
    write(
        site,
        "rknn_toolkit_lite2-2.3.2.dist-info/METADATA",
        "Metadata-Version: 2.1\nName: rknn-toolkit-lite2\nVersion: 2.3.2\n",
    )
    return host, site


def test_exit_code_passes_through() -> None:
    code, _, _ = run(["--no-check", "--", sys.executable, "-c", "import sys; sys.exit(3)"], base_env())
    assert code == 3


def test_signal_passes_through_and_the_process_is_replaced() -> None:
    process = launch(
        [
            "--no-check",
            "--",
            sys.executable,
            "-c",
            "import os, signal, sys; print(os.getpid(), flush=True); os.kill(os.getpid(), signal.SIGTERM)",
        ],
        base_env(),
    )
    out, _ = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM  # killed by the same signal, as the container would see it
    assert int(out.split()[0]) == process.pid  # exec'd: no wrapper process in between


def test_signal_sent_from_outside_reaches_the_command() -> None:
    script = (
        "import signal, sys\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
        "print('ready', flush=True)\n"
        "signal.pause()\n"
    )
    process = launch(["--no-check", "--", sys.executable, "-c", script], base_env())
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"  # handler installed: now signal it
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 42  # the command's own handler ran
    finally:
        process.kill()
        process.communicate()


def test_preflight_failure_stops_before_the_command(host_factory: HostFactory, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    code, _, err = run(
        ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"], base_env(host_factory("no-npu").root)
    )
    assert code == 1
    assert "FAIL  npu" in err and "preflight failed, not starting" in err and "--no-check" in err
    assert not marker.exists()


def test_normalised_env_is_exported(ready_host: tuple[HostRoot, Path]) -> None:
    host, site = ready_host
    env = base_env(host.root, RKNN_NPU_CORE_MASK="0x3", RKNN_NPU_SOC="RK3588", PYTHONPATH=str(site))
    code, out, err = run(
        [
            "--",
            sys.executable,
            "-c",
            "import os; print(*(os.environ.get(k) for k in "
            "('RKNN_NPU_CORE_MASK','RKNN_NPU_CORES','RKNN_NPU_SOC','RKNN_NPU_DEVICE')))",
        ],
        env,
    )
    assert code == 0, err
    assert out.split() == ["3", "0,1", "rk3588", "/dev/dri/renderD129"]
    assert "FAIL" not in err


def test_settings_errors_are_usage_errors(ready_host: tuple[HostRoot, Path]) -> None:
    host, _ = ready_host
    code, _, err = run(["--", "true"], base_env(host.root, RKNN_NPU_CORE_MASK="nope"))
    assert code == 2 and "RKNN_NPU_CORE_MASK='nope'" in err and "Traceback" not in err


def test_no_check_starts_anyway_but_says_what_it_could_not_normalise(
    ready_host: tuple[HostRoot, Path],
) -> None:
    host, _ = ready_host
    probe = "import os; print(os.environ['RKNN_NPU_CORE_MASK'])"
    env = base_env(host.root, RKNN_NPU_CORE_MASK="0")  # AUTO on a 3-core NPU: refused by the checks
    code, out, err = run(["--no-check", "--", sys.executable, "-c", probe], env)
    assert code == 0 and out.strip() == "0"
    assert "warning: RKNN_NPU_* passed on unchecked: RKNN_NPU_CORE_MASK=0 (NPU_CORE_AUTO)" in err


def test_missing_command_and_not_found() -> None:
    assert run(["--no-check"], base_env())[0] == 2
    code, _, err = run(["--no-check", "--", "rknnlaunch-no-such-command"], base_env())
    assert code == 127 and "command not found" in err


@pytest.mark.skipif(any(readable(p) for p in COMPATIBLE_PATHS), reason="this machine has a real device tree")
def test_python_children_read_the_plugin_compatible_file(
    ready_host: tuple[HostRoot, Path], tmp_path: Path
) -> None:
    host, site = ready_host
    (host.root / "proc/device-tree").unlink()  # masked, as in a container
    write(host.root, "/run/rknpu/compatible", b"radxa,rock-5b\0rockchip,rk3588\0")
    # An image's own sitecustomize must keep working behind ours.
    theirs = tmp_path / "theirs"
    write(theirs, "sitecustomize.py", "import os\nos.environ['IMAGE_SITECUSTOMIZE'] = 'ran'\n")
    env = base_env(
        host.root,
        RKNN_NPU_COMPATIBLE_FILE="/run/rknpu/compatible",
        RKNN_NPU_SOC="rk3588",
        PYTHONPATH=os.pathsep.join([str(site), str(theirs)]),
    )
    probe = (
        "import os, pathlib\n"
        "print(open('/proc/device-tree/compatible', 'rb').read().split(b'\\0')[1].decode())\n"
        "print(pathlib.Path('/sys/firmware/devicetree/base/compatible').read_bytes()[:5].decode())\n"
        "print(os.path.exists('/proc/device-tree/compatible'), os.environ.get('IMAGE_SITECUSTOMIZE'))\n"
        "print(os.environ['PYTHONPATH'].split(os.pathsep)[0])\n"
    )
    code, out, err = run(["--", sys.executable, "-c", probe], env)
    assert code == 0, err
    assert out.split("\n")[:4] == ["rockchip,rk3588", "radxa", "True ran", str(SHIM_DIR)]


def test_run_reuses_what_the_preflight_discovered(
    host_factory: Callable[[str], HostRoot], monkeypatch: pytest.MonkeyPatch
) -> None:
    import rknnlaunch.cli._run as cmd_run
    from rknnlaunch.preflight._checks import Findings, run_checks
    from rknnlaunch.settings._env import load_settings

    host = host_factory("rk3588-drm")
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root), "RKNN_NPU_CORE_MASK": "3"})
    checked = Findings()
    run_checks(settings, found=checked)
    monkeypatch.setattr(cmd_run, "find_npu", lambda _settings: pytest.fail("discovered the NPU twice"))
    env, description = cmd_run.child_environment(settings, {}, checked)
    assert (env["RKNN_NPU_CORE_MASK"], env["RKNN_NPU_CORES"], env["RKNN_NPU_SOC"]) == ("3", "0,1", "rk3588")
    assert description is not None and "cores 0,1" in description


def test_run_imports_neither_numpy_nor_other_commands() -> None:
    # `rknnlaunch run` is every container's ENTRYPOINT: it must not pay for numpy, YOLO or the bench.
    code = (
        "import sys; from rknnlaunch.cli._main import build_parser, chosen_command; "
        "argv = ['run', '--no-check', '--', 'true']; build_parser(chosen_command(argv)).parse_args(argv); "
        "heavy = sorted(m for m in sys.modules if m == 'numpy' or m.startswith(('rknnlaunch.yolo', "
        "'rknnlaunch.bench', 'rknnlaunch.runtime._open', 'rknnlaunch.cli._bench', "
        "'rknnlaunch.cli._detect'))); "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
