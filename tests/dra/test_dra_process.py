"""The `rknpu-dra-driver` program as a process: settings and exit codes, SIGTERM, and kill -9 in the
middle of prepares (restart: every spec is checkpointed, nothing answered is lost)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from awaiting import PATIENCE, Child
from drarig import DRIVER, NODE, DriverRig, driver_argv
from kubeletstub import KubeletStub

from rknnlaunch import SettingsError
from rknpu_dra_driver._settings import parse_settings
from rknpu_dra_driver.claims._checkpoint import CHECKPOINT_NAME

_PATHS = os.pathsep.join(sys.path)


def test_flags_have_rknpu_dra_twins_and_the_conventional_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "node-from-downward-api")
    monkeypatch.setenv("KUBECONFIG", "/etc/kube.conf")
    monkeypatch.setenv("RKNPU_DRA_CDI_DIR", "/run/cdi")
    settings = parse_settings(["--driver-name", "npu.example.org"])
    assert settings.node_name == "node-from-downward-api"
    assert settings.kubeconfig == "/etc/kube.conf"
    assert settings.cdi_dir == Path("/run/cdi")
    assert settings.resolved_plugin_dir == Path("/var/lib/kubelet/plugins/npu.example.org")
    assert settings.registration_dir == Path("/var/lib/kubelet/plugins_registry")
    monkeypatch.setenv("RKNPU_DRA_NODE_NAME", "node-b")
    assert parse_settings([]).node_name == "node-b"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--driver-name", "NPU_Rockchip"], "--driver-name (env RKNPU_DRA_DRIVER_NAME)"),
        (["--node-name", ""], "pass --node-name or set NODE_NAME"),
        (["--api-timeout", "0"], "greater than 0"),
        (["--instance-id", "a/b"], "is not a pod UID"),
        (["--extra-device", "rga"], "not a device node path"),
    ],
)
def test_bad_settings_name_the_flag(argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "node-a")
    with pytest.raises(SettingsError) as caught:
        parse_settings(argv)
    assert message in str(caught.value)


def test_bad_settings_exit_2_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rknpu_dra_driver", "--node-name", "Bad_Node"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": _PATHS},
    )
    assert result.returncode == 2
    assert "--node-name (env RKNPU_DRA_NODE_NAME)" in result.stderr and "Traceback" not in result.stderr


@pytest.fixture
def spawn(rig: DriverRig) -> Iterator[list[Child[str]]]:
    made: list[Child[str]] = []
    yield made
    for process in made:
        if process.poll() is None:
            process.process.kill()
        process.wait()


def _start(rig: DriverRig, spawn: list[Child[str]]) -> tuple[Child[str], KubeletStub]:
    # Its stderr is read as it comes (a pipe nobody reads fills and blocks the driver's logging).
    process = Child(driver_argv(rig.settings), parse=str, env={**os.environ, "PYTHONPATH": _PATHS})
    spawn.append(process)
    kubelet = KubeletStub(rig.settings.registration_dir, DRIVER)
    kubelet.register(timeout=PATIENCE)
    return process, kubelet


def test_sigterm_stops_cleanly_and_keeps_the_slice(rig: DriverRig, spawn: list[Child[str]]) -> None:
    process, kubelet = _start(rig, spawn)
    rig.api.wait_slices(lambda s: len(s) == 1, timeout=PATIENCE)
    kubelet.close()
    process.signal(signal.SIGTERM)
    assert process.wait() == 0  # exited, and its output drained
    assert all(json.loads(line) for line in process.lines)  # every line JSON
    assert len(rig.api.slices) == 1  # the next instance takes it over
    assert not (rig.plugin_dir / "dra.sock").exists()


def test_kill_9_during_prepares_loses_nothing(rig: DriverRig, spawn: list[Child[str]]) -> None:
    claims = [("default", f"c{i}", str(uuid.uuid4())) for i in range(40)]
    # adminAccess: 40 claims may then share core 0 (the driver refuses to double-book it otherwise).
    result = {"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-core-0", "adminAccess": True}
    for namespace, name, uid in claims:
        rig.api.add_claim(namespace, name, uid, [result])
    process, kubelet = _start(rig, spawn)
    rig.api.wait_slices(lambda s: len(s) == 1, timeout=PATIENCE)  # the API client is up
    answered: list[str] = []
    fifth = threading.Event()

    def storm() -> None:
        for claim in claims:
            try:
                if not kubelet.prepare([claim]).claims[claim[2]].error:
                    answered.append(claim[2])
            except Exception:  # the driver died under the call
                return
            if len(answered) == 5:
                fifth.set()

    thread = threading.Thread(target=storm)
    thread.start()
    assert fifth.wait(PATIENCE)
    os.kill(process.pid, signal.SIGKILL)  # mid-storm: the 6th prepare is somewhere in flight
    process.wait()
    thread.join(PATIENCE)
    kubelet.close()

    process, kubelet = _start(rig, spawn)
    checkpointed = {
        c["claim"]["uid"] for c in json.loads((rig.plugin_dir / CHECKPOINT_NAME).read_text())["claims"]
    }
    specs = {p.name.split("_", 1)[1].removesuffix(".json") for p in rig.cdi_dir.glob("*.json")}
    assert set(answered) <= checkpointed  # nothing answered is lost
    assert specs == checkpointed  # every spec is recorded once, every record has its spec
    assert [p.name for p in (*rig.cdi_dir.iterdir(), *rig.plugin_dir.iterdir()) if p.suffix == ".tmp"] == []
    gone = kubelet.unprepare(claims)
    assert all(not gone.claims[uid].error for _ns, _name, uid in claims)
    assert list(rig.cdi_dir.glob("*.json")) == []
    assert json.loads((rig.plugin_dir / CHECKPOINT_NAME).read_text())["claims"] == []
    kubelet.close()
    process.signal(signal.SIGTERM)
    assert process.wait() == 0
