"""Issue 33 target: a workload reads its cores from the DRA metadata file with the env removed, and
`doctor` says which source it used; an unusable file falls back to the env with one warning line.

The file is the DRA driver's for an RK3588 claim of cores 0 and 1 (a two-core request), built by
`metadata_document` in the format of kubernetes/dynamic-resource-allocation `kubeletplugin/metadata.go`
(3d036712930cdac0b0d46c4c21316a78147c551f), at the container path its `api/metadata` defines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehost import write
from rknnlaunch.cli._main import main
from rknnlaunch.npu import HostRoot
from rknnlaunch.settings import MetadataDevice, container_file_path, encode_metadata, metadata_document

HostFactory = Callable[[str], HostRoot]
REPO = Path(__file__).resolve().parents[2]


def pair_file() -> str:
    devices = [
        MetadataDevice("node-a", f"npu-core-{core}", frozenset({core}), {"soc": {"string": "rk3588"}})
        for core in (0, 1)
    ]
    return encode_metadata(metadata_document("ml", "yolo-npu", "5f0c", "npu/pair", devices))


def put(root: Path, text: str) -> Path:
    return write(root, str(container_file_path("yolo-npu", "npu/pair")), text)


@pytest.fixture
def no_npu_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("RKNN_NPU_", "RKNNLAUNCH_")):
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("no_npu_env")
def test_doctor_reads_the_cores_from_the_metadata_file(
    host_factory: HostFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    host = host_factory("rk3588-drm")
    path = put(host.root, pair_file())
    main(["doctor", "--json", "--root", str(host.root)])
    allocation = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["allocation"]
    assert allocation["status"] == "ok"
    details = allocation["details"]
    assert details["cores"] == [0, 1] and details["mask"] == 3 and details["injected"] is True
    assert details["source_kind"] == "metadata"
    assert details["metadata"] == {"files": [str(path)], "problem": None}
    assert details["source"] == f"metadata file {path} (claim ml/yolo-npu/5f0c)"
    main(["doctor", "--root", str(host.root)])
    (line,) = (line.split(None, 2) for line in capsys.readouterr().out.splitlines() if "allocation" in line)
    assert line[:2] == ["OK", "allocation"]
    assert line[2].startswith(f"cores 0,1 (mask 3, NPU_CORE_0_1) of rk3588 from metadata file {path} (claim")


@pytest.mark.usefixtures("no_npu_env")
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is unreadable: the file is empty"),
        ("{garbled", "is unreadable: not a JSON stream"),
        (pair_file().replace("coreMask", "index"), "names no NPU device"),
    ],
    ids=["empty", "garbled", "no-npu-device"],
)
def test_doctor_warns_once_and_falls_back_to_the_env(
    host_factory: HostFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    says: str,
) -> None:
    host = host_factory("rk3588-drm")
    path = put(host.root, text)
    monkeypatch.setenv("RKNN_NPU_CORE_MASK", "4")
    main(["doctor", "--root", str(host.root)])
    out = capsys.readouterr().out
    lines = [line.split(None, 2) for line in out.splitlines() if "metadata file" in line]
    assert len(lines) == 1 and lines[0][:2] == ["WARN", "allocation"], out
    assert lines[0][2].startswith(f"metadata file {path} {says}")
    assert lines[0][2].endswith(
        ": falling back to the env: cores 2 (mask 4, NPU_CORE_2) of rk3588 from RKNN_NPU_CORE_MASK=4; "
        "RKNNLite runs it as one context with core_mask=4 (NPU_CORE_2)"
    )
    assert "fix: fix or remove the file" in out
    main(["doctor", "--json", "--root", str(host.root)])
    allocation = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["allocation"]
    assert allocation["status"] == "warn" and allocation["details"]["cores"] == [2]
    assert allocation["details"]["source_kind"] == "env"
    assert says in allocation["details"]["metadata"]["problem"]


@pytest.mark.usefixtures("no_npu_env")
def test_a_missing_explicit_file_warns_and_the_default_folder_absent_is_quiet(
    host_factory: HostFactory, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    host = host_factory("rk3588-drm")
    main(["doctor", "--root", str(host.root)])
    assert "metadata" not in capsys.readouterr().out  # a device-plugin pod: no DRA metadata, no noise
    monkeypatch.setenv("RKNN_NPU_METADATA", "/nonexistent/npu.rockchip.com-metadata.json")
    main(["doctor", "--root", str(host.root)])
    lines = [line for line in capsys.readouterr().out.splitlines() if "metadata file" in line]
    assert len(lines) == 1 and "(RKNN_NPU_METADATA) does not exist: falling back to the env" in lines[0]


def test_a_workload_started_by_run_gets_the_metadata_cores_with_the_env_removed(
    host_factory: HostFactory,
) -> None:
    """A real process: `rknnlaunch run` resolves the allocation from the file and the command it
    execs sees the cores (the base image's ENTRYPOINT path), with no RKNN_NPU_* set."""
    host = host_factory("rk3588-drm")
    put(host.root, pair_file())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RKNN_NPU_", "RKNNLAUNCH_"))}
    env["RKNNLAUNCH_ROOT"] = str(host.root)  # the fake host's /sys, /dev, /proc and container files
    child = "import os; print(os.environ['RKNN_NPU_CORE_MASK'], os.environ['RKNN_NPU_CORES'])"
    done = subprocess.run(
        [sys.executable, "-m", "rknnlaunch", "run", "--no-check", "--", sys.executable, "-c", child],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "0,1"]
