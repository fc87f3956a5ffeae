"""Slow, optional: the real rknn-toolkit-lite2 in an arm64 chroot (qemu-user), and doctor's librknnrt verdict.

Needs an arm64 root filesystem with python3 and rknn-toolkit-lite2 installed (e.g. built with
`debootstrap --arch=arm64 bookworm ROOTFS` and `chroot ROOTFS pip install rknn-toolkit-lite2`),
qemu-user-static registered with binfmt_misc, and root. Point RKNNLAUNCH_ARM64_ROOTFS at it and run
`pytest -m slow tests/sdk/test_sdk_arm64_chroot.py`. Skips cleanly otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import rknnlaunch

ROOTFS = os.environ.get("RKNNLAUNCH_ARM64_ROOTFS")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not ROOTFS or not Path(ROOTFS, "usr/bin/python3").exists(),
        reason="no arm64 rootfs (set RKNNLAUNCH_ARM64_ROOTFS)",
    ),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chroot") is None, reason="chroot needs root"),
    pytest.mark.skipif(
        not any(Path("/proc/sys/fs/binfmt_misc").glob("qemu-aarch64*")),
        reason="qemu-aarch64 is not registered with binfmt_misc",
    ),
]


def chroot(
    rootfs: Path, *command: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["chroot", str(rootfs), *command],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", **(env or {})},
    )


def test_real_toolkit_imports_and_doctor_reports_missing_librknnrt() -> None:  # pragma: no cover - slow
    assert ROOTFS is not None
    rootfs = Path(ROOTFS)
    imported = chroot(
        rootfs, "python3", "-c", "from rknnlite.api import RKNNLite; print(RKNNLite.NPU_CORE_0_1_2)"
    )
    assert imported.returncode == 0 and imported.stdout.strip() == "7", imported.stderr
    source = rootfs / "tmp" / "rknnlaunch-src"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(Path(rknnlaunch.__file__).parent, source / "rknnlaunch")
    (rootfs / "usr/lib/librknnrt.so").unlink(missing_ok=True)
    report = chroot(
        rootfs, "python3", "-m", "rknnlaunch", "doctor", "--json", env={"PYTHONPATH": "/tmp/rknnlaunch-src"}
    )
    checks = {check["id"]: check for check in json.loads(report.stdout)["checks"]}
    assert checks["librknnrt"]["status"] == "fail"
    assert "/usr/lib/librknnrt.so is missing" in checks["librknnrt"]["summary"]
    assert checks["rknn-toolkit-lite2"]["status"] == "ok"
