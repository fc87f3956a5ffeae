"""A real container engine reads the CDI specs both programs write: podman (Debian 12's 4.3.1 reads
CDI up to 0.5.0) resolves the DRA driver's per-request devices and the device plugin's device and
puts their env and device nodes into the container's OCI config; the old 0.6.0 spec with
annotations is refused, which is what made this check necessary (issue 25).

Needs root and podman (`apt-get install podman`; CI's real-thing step installs it); marked slow.
The container is created and initialised only (`podman create` + `podman init`, rootfs `/`), so no
image is needed; the OCI config podman wrote is read back whether or not the runtime then starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from rknnlaunch.npu import DeviceNode, NpuInfo, soc_by_name
from rknpu_dra_driver.claims._cdi import cdi_device_id, claim_spec
from rknpu_dra_driver.claims._claim import AllocatedDevice, ClaimRef, PreparedClaim
from rknpu_node import NodeExtras, cdi_spec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="podman reads /var/run/cdi as root"),
]

CDI_DIR = Path("/var/run/cdi")
DRIVER = "npu.rockchip.com"
PODMAN = ["podman", "--cgroup-manager=cgroupfs"]


def _info() -> NpuInfo:
    soc = soc_by_name("rk3588")
    assert soc is not None
    # Device nodes every machine has, so the engine's own checks of them pass.
    nodes = (DeviceNode("/dev/null", "card"), DeviceNode("/dev/zero", "render"))
    return NpuInfo(soc, ("rockchip,rk3588",), 3, "test", "drm", nodes, driver_version="0.9.8")


@pytest.fixture
def written() -> Iterator[list[Path]]:
    paths: list[Path] = []
    yield paths
    for path in paths:
        path.unlink(missing_ok=True)


def _write(paths: list[Path], spec: dict[str, Any]) -> None:
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    path = CDI_DIR / f"rknnlaunch-test-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(spec))
    paths.append(path)


@cache
def _cgroup_flags() -> tuple[str, ...]:
    """``--cgroups=disabled`` (no cgroup setup on a CI runner) only under crun: runc refuses it
    ("not compatible with NoCgroups"), and Debian 12's podman 4.3.1 runs runc by default."""
    runtime = subprocess.run(
        ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()
    return ("--cgroups=disabled",) if runtime == "crun" else ()


def _oci_config(device: str) -> dict[str, Any]:
    """The OCI config podman makes for a container given ``--device <CDI id>``; raises
    AssertionError with podman's error when it cannot resolve the device."""
    created = subprocess.run(
        [*PODMAN, "create", *_cgroup_flags(), "--device", device, "--rootfs", "/", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert created.returncode == 0, created.stderr
    container = created.stdout.strip()
    try:
        init = subprocess.run([*PODMAN, "init", container], capture_output=True, text=True, timeout=120)
        assert "CDI" not in init.stderr, init.stderr
        static = subprocess.run(
            [*PODMAN, "inspect", "--format", "{{.StaticDir}}", container],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        config: dict[str, Any] = json.loads((Path(static) / "config.json").read_text())
        return config
    finally:
        subprocess.run([*PODMAN, "rm", "-f", container], capture_output=True, timeout=120)


def _env(config: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in config["process"]["env"])


@pytest.mark.parametrize(
    ("uid", "version"),
    [
        # The CDI library's minimum-version rule: a device name not starting with a letter needs
        # 0.5.0, and a claim's device names start with its UID; fixed UIDs make each case certain.
        ("0b5e2c1a-7d4f-4e8a-9c3b-1f2a3b4c5d6e", "0.5.0"),
        ("b05e2c1a-7d4f-4e8a-9c3b-1f2a3b4c5d6e", "0.3.0"),
    ],
    ids=["digit-first-uid", "letter-first-uid"],
)
def test_podman_reads_the_dra_drivers_per_request_specs(written: list[Path], uid: str, version: str) -> None:
    ref = ClaimRef("default", "detector", uid)
    devices = (
        AllocatedDevice("pair", "node", "npu-core-0"),
        AllocatedDevice("pair", "node", "npu-core-1"),
        AllocatedDevice("side", "node", "npu-core-2"),
    )
    claim = PreparedClaim(ref, devices, cdi_device_id(DRIVER, uid))
    spec = claim_spec(DRIVER, claim, _info(), None, NodeExtras())
    assert spec["cdiVersion"] == version
    # Earlier runs' specs of the same UID would make the CDI id ambiguous: this run's file only.
    for stale in CDI_DIR.glob("rknnlaunch-test-*.json"):
        if uid in stale.read_text():
            stale.unlink()
    _write(written, spec)
    pair = _env(_oci_config(claim.request_cdi_id("pair")))
    side = _env(_oci_config(claim.request_cdi_id("side")))
    assert (pair["RKNN_NPU_CORE_MASK"], pair["RKNN_NPU_CORES"]) == ("3", "0,1")
    assert (side["RKNN_NPU_CORE_MASK"], side["RKNN_NPU_CORES"]) == ("4", "2")
    assert pair["RKNN_NPU_CLAIM"] == f"default/detector/{uid}"


def test_podman_reads_the_device_plugins_spec(written: list[Path]) -> None:
    spec = cdi_spec(_info(), None)
    spec = {**spec, "kind": f"test{uuid.uuid4().hex[:6]}.rockchip.com/npu"}
    assert spec["cdiVersion"] == "0.3.0"
    _write(written, spec)
    config = _oci_config(f"{spec['kind']}=npu")
    assert _env(config)["RKNN_NPU_SOC"] == "rk3588"
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/null", "/dev/zero"]


def test_podman_refuses_the_old_annotated_0_6_0_spec(written: list[Path]) -> None:
    """The control: what the driver wrote before issue 25 does not resolve on podman 4.3."""
    version = subprocess.run(["podman", "--version"], capture_output=True, text=True).stdout
    if not version.split()[-1].startswith("4."):
        pytest.skip(f"{version.strip()} may read CDI 0.6.0")
    kind = f"test{uuid.uuid4().hex[:6]}.rockchip.com/claim"
    old = {
        "cdiVersion": "0.6.0",
        "kind": kind,
        "annotations": {"npu.rockchip.com/claim": "{}"},
        "devices": [{"name": "x", "containerEdits": {"env": ["RKNN_NPU_CORE_MASK=3"]}}],
    }
    _write(written, old)
    with pytest.raises(AssertionError, match="unresolvable CDI devices"):
        _oci_config(f"{kind}=x")
