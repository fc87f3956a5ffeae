"""Slow, optional: the real rknn-toolkit-lite2 in an arm64 chroot (qemu-user), through our code paths.

Checks that the real toolkit imports, that `doctor` reports the missing librknnrt.so, that its
`init_runtime` failure reaches us as log lines, and that the compatible redirect works with its
compiled modules (in-process via open(), and in a child of `rknnlaunch run` via the sitecustomize
shim): with the redirect the toolkit detects RK3588 and stops at the missing librknnrt instead.

Build the rootfs once (as root, qemu-user-static registered with binfmt_misc):
    debootstrap --arch=arm64 --variant=minbase --include=python3,python3-pip,ca-certificates \
        bookworm ROOTFS http://deb.debian.org/debian
    cp /etc/resolv.conf ROOTFS/etc/ && chroot ROOTFS python3 -m pip install \
        --break-system-packages rknn-toolkit-lite2 numpy pydantic-settings
then run `RKNNLAUNCH_ARM64_ROOTFS=ROOTFS pytest -m slow tests/sdk/test_sdk_arm64_chroot.py` (about
25 s). Skips cleanly without it.
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
        [shutil.which("chroot") or "/usr/sbin/chroot", str(rootfs), *command],
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


PROBE = """
import json, sys
sys.path[:0] = ["/tmp/rknnlaunch-src"]
from pathlib import Path
from fakehost import make_host, write
from rknnfile_builder import write_rknn
import rknnlaunch
from rknnlaunch.settings._env import load_settings
host = make_host("rk3588-drm", Path("/tmp/host-" + sys.argv[1]))
(host.root / "proc/device-tree").unlink()  # masked, as in a pod
write(host.root, "/run/rknpu/compatible", b"radxa,rock-5b\\0rockchip,rk3588\\0")
env = {"RKNNLAUNCH_ROOT": str(host.root)}
if sys.argv[1] == "provided":
    env["RKNN_NPU_COMPATIBLE_FILE"] = "/run/rknpu/compatible"
try:
    rknnlaunch.open(write_rknn(Path("/tmp/m.rknn")), settings=load_settings(env))
except rknnlaunch.RuntimeInitError as exc:
    print(json.dumps({"lines": list(exc.log_lines), "fix": exc.fix}))
"""


def test_real_rknnlite_through_open_with_and_without_the_compatible_file() -> None:  # pragma: no cover - slow
    """The redirect works with the real, compiled toolkit: it then gets as far as loading librknnrt."""
    assert ROOTFS is not None
    rootfs = Path(ROOTFS)
    source = rootfs / "tmp" / "rknnlaunch-src"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(Path(rknnlaunch.__file__).parent, source / "rknnlaunch")
    tests = Path(__file__).resolve().parent
    for helper in (tests.parent / "fakehost.py", tests / "rknnfile_builder.py"):
        shutil.copy(helper, source / helper.name)
    (rootfs / "tmp" / "probe_open.py").write_text(PROBE)
    for old in (rootfs / "tmp").glob("host-*"):
        shutil.rmtree(old)
    outcome = {}
    for case in ("masked", "provided"):
        done = chroot(rootfs, "python3", "/tmp/probe_open.py", case)
        outcome[case] = json.loads(done.stdout.strip().splitlines()[-1])
    assert "Exception: Please specify the target in init_runtime!" in outcome["masked"]["lines"]
    assert "RKNN_NPU_COMPATIBLE_FILE" in outcome["masked"]["fix"]
    assert "Exception: Can not find dynamic library on RK3588!" in outcome["provided"]["lines"]
    assert "librknnrt.so" in outcome["provided"]["fix"]


def test_real_rknnlite_in_a_child_of_rknnlaunch_run() -> None:  # pragma: no cover - slow
    """The sitecustomize shim makes the real toolkit in a `run` child see the plugin's compatible file."""
    test_real_rknnlite_through_open_with_and_without_the_compatible_file()  # lays out /tmp/host-provided
    assert ROOTFS is not None
    child = (
        "from rknnlite.api import RKNNLite\n"
        "lite = RKNNLite()\n"
        "lite.load_rknn('/tmp/m.rknn')\n"
        "print('init', lite.init_runtime(core_mask=1))\n"
    )
    done = chroot(
        Path(ROOTFS),
        "python3",
        "-m",
        "rknnlaunch",
        "run",
        "--no-check",
        "--",
        "python3",
        "-c",
        child,
        env={
            "PYTHONPATH": "/tmp/rknnlaunch-src",
            "RKNNLAUNCH_ROOT": "/tmp/host-provided",
            "RKNN_NPU_COMPATIBLE_FILE": "/run/rknpu/compatible",
        },
    )
    output = done.stdout + done.stderr
    assert "init -1" in output
    assert "Can not find dynamic library on RK3588" in output, output
    assert "Please specify the target" not in output
