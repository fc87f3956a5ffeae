"""The Allocate answer run through a real OCI runtime (Debian's runc, default `runc spec`).

Pins docs/hardware.md#the-device-tree-compatible-file: a Mount of the device-tree compatible file
into /proc or /sys makes the container fail to start, while our /run/rknpu/compatible mount, the
env and exactly the NPU's device nodes reach the container. Needs root and runc (`apt-get install
runc busybox-static`); marked slow, so it runs with `pytest -m slow`.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from fakekubelet import RigFactory, allocate

from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("runc") is None, reason="runc is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="runc needs root"),
]

BUSYBOX = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.exists(p)), None)
SCRIPT = (
    'cat "$RKNN_NPU_COMPATIBLE_FILE" | tr "\\0" " "; echo; ls /dev/dri; '
    'echo "$RKNN_NPU_CORE_MASK $RKNN_NPU_CORES $RKNN_NPU_SOC $RKNN_NPU_DEVICE"; '
    "ls /proc/device-tree/compatible 2>&1 || true"
)


@pytest.fixture(scope="module")
def bundle_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    if BUSYBOX is None:
        pytest.skip("busybox (static) is not installed")
    folder = tmp_path_factory.mktemp("runc")
    rootfs = folder / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin/busybox")
    for tool in ("sh", "cat", "ls", "tr", "echo"):
        (rootfs / "bin" / tool).symlink_to("busybox")
    subprocess.run(["runc", "spec"], cwd=folder, check=True)
    spec = json.loads((folder / "config.json").read_text())
    return rootfs, spec


def oci_config(
    spec: dict[str, Any], rootfs: Path, container: pb.ContainerAllocateResponse, host_root: Path
) -> dict[str, Any]:
    """What a CRI runtime makes of one ContainerAllocateResponse (host paths live under host_root)."""
    config = copy.deepcopy(spec)
    config["root"] = {"path": str(rootfs), "readonly": True}
    config["process"]["terminal"] = False
    config["process"]["args"] = ["/bin/sh", "-c", SCRIPT]
    config["process"]["env"] += [f"{key}={value}" for key, value in container.envs.items()]
    for mount in container.mounts:
        config["mounts"].append(
            {
                "destination": mount.container_path,
                "type": "bind",
                "source": str(host_root / mount.host_path.lstrip("/")),
                "options": ["rbind", "ro" if mount.read_only else "rw"],
            }
        )
    linux = config["linux"]
    for device in container.devices:
        st = os.stat(host_root / device.host_path.lstrip("/"))
        if not stat.S_ISCHR(st.st_mode):
            pytest.skip("fixture device nodes are not char devices here (mknod not permitted)")
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        linux.setdefault("devices", []).append(
            {"path": device.container_path, "type": "c", "major": major, "minor": minor, "fileMode": 0o660}
        )
        linux["resources"]["devices"].append(
            {"allow": True, "type": "c", "major": major, "minor": minor, "access": device.permissions}
        )
    return config


def run_container(config: dict[str, Any], folder: Path) -> subprocess.CompletedProcess[str]:
    bundle = folder / f"bundle-{uuid.uuid4().hex[:8]}"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(config))
    name = f"rknpu-test-{uuid.uuid4().hex[:8]}"
    try:
        return subprocess.run(
            ["runc", "run", "--bundle", str(bundle), name], capture_output=True, text=True, timeout=60
        )
    finally:
        subprocess.run(["runc", "delete", "--force", name], capture_output=True, timeout=30)


def test_allocate_answer_reaches_the_container_through_runc(
    rig_factory: RigFactory, bundle_base: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    rootfs, spec = bundle_base
    rig = rig_factory("rk3588-drm")
    container = allocate(rig.stub(), ["npu-core-0", "npu-core-1"]).container_responses[0]
    result = run_container(oci_config(spec, rootfs, container, rig.host_root), tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].strip() == "radxa,rock-5b rockchip,rk3588"
    assert lines[1:3] == ["card1", "renderD129"]  # the NPU's nodes only, not the GPU's
    assert lines[3] == "3 0,1 rk3588 /dev/dri/renderD129"
    # On a board /proc/device-tree points into /sys/firmware, which runc masks (an x86 CI host has
    # no device tree at all): either way the SDK must read our file instead.
    assert "No such file" in lines[4]


@pytest.mark.parametrize(
    ("destination", "error"),
    [
        ("/proc/device-tree/compatible", "inside /proc"),
        ("/sys/firmware/devicetree/base/compatible", "read-only file system"),
    ],
)
def test_mounting_compatible_into_proc_or_sys_fails_the_container(
    rig_factory: RigFactory,
    bundle_base: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    destination: str,
    error: str,
) -> None:
    rootfs, spec = bundle_base
    rig = rig_factory("rk3588-drm")
    container = allocate(rig.stub(), ["npu-core-2"]).container_responses[0]
    config = oci_config(spec, rootfs, container, rig.host_root)
    config["mounts"][-1]["destination"] = destination
    result = run_container(config, tmp_path)
    assert result.returncode != 0
    assert error in result.stderr
