"""Slow: the real rknn-toolkit-lite2 in emulated arm64 roots (qemu-user), through our code paths.

The roots are what images/arm64-root.sh builds (the one recipe; `.ci/run` and images/verify-arm64.sh
use it too) and are named by RKNNLAUNCH_ARM64_ROOTS (paths joined by ':'). Each root describes itself
in /rknnlaunch-root.json (suite, Python, toolkit version, venvs); every test id names them, e.g.
`[bookworm-py3.11.2-lite2.3.2]`, so the output says which Python and toolkit ran.

- bookworm (Python 3.11): the images' venvs, installed by images/install-python.sh exactly as the
  Dockerfiles run it. RKNNLite() constructs; `doctor --json` reports the emulated host; the real
  `init_runtime` sees the plugin's compatible file through our redirect, in-process via
  rknnlaunch.open() and in a child of `rknnlaunch run` (then it detects RK3588 and stops at the
  missing librknnrt instead of "Please specify the target"); the plugin starts without
  OpenCV/onnxruntime, discovers a fixture RK3588 and stops cleanly on SIGTERM.
- bullseye (Python 3.9, the pre-3.11 pathlib/io that boards' 3.10 shares; rknnlaunch itself needs
  3.10): the toolkit alone, with the redirect module and the `run` shim loaded by path as the shim does.

By hand: `bash .ci/run` (or see README "Real-thing checks"). Needs root, chroot and binfmt_misc.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rknnfile_builder import write_rknn

from rknnlaunch.runtime import _dtcompat as dtcompat

ROOTS_ENV = "RKNNLAUNCH_ARM64_ROOTS"
MANIFEST = "rknnlaunch-root.json"
EMULATED = 900  # seconds: everything is slow under qemu on a loaded 2-core machine
TESTS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Root:
    path: Path
    manifest: dict[str, Any]

    @property
    def label(self) -> str:
        m = self.manifest
        return f"{m['suite']}-py{m['python']}-lite{m['toolkit_version']}"

    @property
    def sdk(self) -> str | None:
        venv: str | None = self.manifest["sdk_venv"]
        return venv


def _roots() -> list[Root]:
    roots = []
    for entry in os.environ.get(ROOTS_ENV, "").split(os.pathsep):
        if entry and Path(entry, MANIFEST).is_file():
            roots.append(Root(Path(entry), json.loads(Path(entry, MANIFEST).read_text())))
    return roots


ROOTS = _roots()
SDK_ROOTS = [root for root in ROOTS if root.sdk]


def _missing_prerequisite() -> str | None:
    if not os.environ.get(ROOTS_ENV):
        return f"no arm64 roots: {ROOTS_ENV} is unset (build them with images/arm64-root.sh, or run .ci/run)"
    if not ROOTS:
        return f"{ROOTS_ENV}={os.environ[ROOTS_ENV]} names no root with {MANIFEST} (images/arm64-root.sh)"
    if os.geteuid() != 0 or shutil.which("chroot") is None:
        return "chroot needs root"
    if not any(Path("/proc/sys/fs/binfmt_misc").glob("qemu-aarch64*")):
        return "qemu-aarch64 is not registered with binfmt_misc (images/arm64-root.sh registers it)"
    return None


MISSING = _missing_prerequisite()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]


def roots_param(roots: list[Root], needs: str) -> Any:
    """Parametrize over ``roots``; with none, one skipped case that says what is missing."""
    if roots:
        return pytest.mark.parametrize("root", roots, ids=[root.label for root in roots])
    reason = MISSING or f"no arm64 root with {needs} in {ROOTS_ENV}"
    return pytest.mark.parametrize(
        "root", [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-root")]
    )


def chroot(
    root: Root, *command: str, env: dict[str, str] | None = None, check: bool = False
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [shutil.which("chroot") or "/usr/sbin/chroot", str(root.path), *command],
        capture_output=True,
        text=True,
        timeout=EMULATED,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root", **(env or {})},
    )
    if check:
        assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def lay_out_helpers(root: Root) -> None:
    """Copy the test helpers (and, for roots without the SDK, the redirect module and shim) into /tmp."""
    helpers = root.path / "tmp/rknnlaunch-tests"
    shutil.rmtree(helpers, ignore_errors=True)
    helpers.mkdir(parents=True)
    for helper in (TESTS.parent / "fakehost.py", TESTS / "rknnfile_builder.py"):
        shutil.copy(helper, helpers / helper.name)
    # The shim loads the redirect module from its parent folder: keep that layout.
    shim = root.path / "tmp/rknnlaunch-shim/rknnlaunch"
    shutil.rmtree(shim.parent, ignore_errors=True)
    shim.mkdir(parents=True)
    shutil.copy(dtcompat.__file__, shim / "_dtcompat.py")
    shutil.copytree(dtcompat.SHIM_DIR, shim / "_dtshim", ignore=shutil.ignore_patterns("__pycache__"))
    for old in (root.path / "tmp").glob("host-*"):
        shutil.rmtree(old)
    (root.path / "usr/lib/librknnrt.so").unlink(missing_ok=True)


def python_of(root: Root, venv: str | None) -> str:
    return f"{venv}/bin/python" if venv else root.manifest["toolkit_python"]


@roots_param(ROOTS, "the toolkit")
def test_real_rknnlite_constructs(root: Root) -> None:  # pragma: no cover - slow
    done = chroot(
        root,
        root.manifest["toolkit_python"],
        "-c",
        "import sys, importlib.metadata as m\n"
        "from rknnlite.api import RKNNLite\n"
        "RKNNLite()\n"
        "print(RKNNLite.NPU_CORE_0_1_2, sys.version.split()[0], m.version('rknn-toolkit-lite2'))\n",
        check=True,
    )
    assert done.stdout.split() == ["7", root.manifest["python"], root.manifest["toolkit_version"]]


_WATCH_IN_THE_ROOT = """
import av
from concurrent.futures import Future
from rknnlaunch.pipeline import DetectResult, StageTimings
from rknnlaunch.streams import Source, StreamEvent, Watcher
from rknnlaunch.yolo import Detections
print("decoders", "h264_rkmpp" in av.codecs_available, "hevc_rkmpp" in av.codecs_available)


class NoDetector:  # the decode path only: every frame detects nothing at once
    size = 1

    def submit(self, frame, index=None, dropped=0):
        done = Future()
        timings = StageTimings(0, 0, 0, 0, 0)
        done.set_result(DetectResult(index or 0, Detections.empty(), timings, "none", dropped))
        return done


with Watcher([Source("/tmp/rknnlaunch-clip.mp4", name="clip", every_frame=True)], NoDetector()) as watcher:
    for item in watcher:
        if isinstance(item, StreamEvent):
            print(item.event, item.reason)
    print("decoded", watcher.stats()["clip"].decoded)
"""


@roots_param(SDK_ROOTS, "the SDK")
def test_pyav_rkmpp_lists_the_mpp_decoders_and_decodes_in_software_without_the_node(
    root: Root, tmp_path: Path
) -> None:  # pragma: no cover - slow
    """The runtime image's `[video]` (pyav-rkmpp on aarch64) has h264_rkmpp/hevc_rkmpp; with no
    /dev/mpp_service (none in the root) a watch decodes a real H.264 clip in software and says why."""
    from streams.videos import make_video

    clip = make_video(tmp_path / "clip.mp4", "h264", (320, 180), frames=10, fps=10)
    shutil.copy(clip, root.path / "tmp/rknnlaunch-clip.mp4")
    done = chroot(root, f"{root.sdk}/bin/python", "-c", _WATCH_IN_THE_ROOT, check=True)
    assert "decoders True True" in done.stdout, done.stdout
    assert "live 320x180 h264 10 fps, software h264 decode: cannot open /dev/mpp_service" in done.stdout
    assert "decoded 10" in done.stdout and "ended end of file" in done.stdout


@roots_param(SDK_ROOTS, "the SDK")
def test_doctor_json_on_the_emulated_host(root: Root) -> None:  # pragma: no cover - slow
    lay_out_helpers(root)
    report = chroot(root, f"{root.sdk}/bin/rknnlaunch", "doctor", "--json")
    assert report.returncode == 1, report.stderr  # no NPU: fails, with one reason for one cause
    document = json.loads(report.stdout)
    assert document["schema"] == "rknnlaunch.doctor/1" and document["status"] == "fail"
    checks = {check["id"]: check for check in document["checks"]}
    assert checks["npu"]["status"] == "fail" and checks["npu"]["fix"]
    # What follows from the NPU is not checked without one (issue 22: one result for one cause).
    for follows in ("librknnrt", "rknn-toolkit-lite2"):
        assert checks[follows]["status"] == "skip", checks[follows]
        assert "no NPU found" in checks[follows]["summary"]


OPEN_PROBE = """
import json, os, sys
sys.path[:0] = ["/tmp/rknnlaunch-tests"]
from pathlib import Path
from fakehost import make_host, write
from rknnfile_builder import write_rknn
import rknnlaunch
host = make_host("rk3588-drm", Path("/tmp/host-" + sys.argv[1]))
(host.root / "proc/device-tree").unlink()  # masked, as in a pod
write(host.root, "/run/rknpu/compatible", b"radxa,rock-5b\\0rockchip,rk3588\\0")
os.environ["RKNNLAUNCH_ROOT"] = str(host.root)  # open() reads its settings from the environment
if sys.argv[1] == "provided":
    os.environ["RKNN_NPU_COMPATIBLE_FILE"] = "/run/rknpu/compatible"
try:
    rknnlaunch.open(write_rknn(Path("/tmp/m.rknn")))
except rknnlaunch.RuntimeInitError as exc:
    print(json.dumps({"lines": list(exc.log_lines), "fix": exc.fix}))
"""


def open_outcomes(root: Root) -> dict[str, dict[str, Any]]:
    lay_out_helpers(root)
    (root.path / "tmp/probe_open.py").write_text(OPEN_PROBE)
    outcome = {}
    for case in ("masked", "provided"):
        done = chroot(root, f"{root.sdk}/bin/python", "/tmp/probe_open.py", case, check=True)
        outcome[case] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


@roots_param(SDK_ROOTS, "the SDK")
def test_real_rknnlite_through_open_with_and_without_the_compatible_file(
    root: Root,
) -> None:  # pragma: no cover - slow
    """The redirect works with the real, compiled toolkit: it then gets as far as loading librknnrt."""
    outcome = open_outcomes(root)
    assert "Exception: Please specify the target in init_runtime!" in outcome["masked"]["lines"]
    assert "RKNN_NPU_COMPATIBLE_FILE" in outcome["masked"]["fix"]
    assert "Exception: Can not find dynamic library on RK3588!" in outcome["provided"]["lines"]
    assert "librknnrt.so" in outcome["provided"]["fix"]


CHILD = """
import pathlib
from rknnlite.api import RKNNLite
print("pathlib", pathlib.Path("/proc/device-tree/compatible").read_bytes().split(b"\\0")[1].decode())
lite = RKNNLite()
lite.load_rknn("/tmp/m.rknn")
print("init", lite.init_runtime(core_mask=1))
"""


@roots_param(SDK_ROOTS, "the SDK")
def test_real_rknnlite_in_a_child_of_rknnlaunch_run(root: Root) -> None:  # pragma: no cover - slow
    """The sitecustomize shim makes the real toolkit in a `run` child see the plugin's compatible file."""
    open_outcomes(root)  # lays out /tmp/host-provided and /tmp/m.rknn
    done = chroot(
        root,
        f"{root.sdk}/bin/rknnlaunch",
        "run",
        "--no-check",
        "--",
        f"{root.sdk}/bin/python",
        "-c",
        CHILD,
        env={"RKNNLAUNCH_ROOT": "/tmp/host-provided", "RKNN_NPU_COMPATIBLE_FILE": "/run/rknpu/compatible"},
    )
    output = done.stdout + done.stderr
    assert "pathlib rockchip,rk3588" in output, output
    assert "init -1" in output
    assert "Can not find dynamic library on RK3588" in output, output
    assert "Please specify the target" not in output


SHIM_PROBE = """
import pathlib, sys
if sys.argv[1] == "in-process":  # what rknnlaunch.open() does, with the module loaded by path
    import importlib.util
    spec = importlib.util.spec_from_file_location("dtcompat", "/tmp/rknnlaunch-shim/rknnlaunch/_dtcompat.py")
    dtcompat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dtcompat)
    dtcompat.install_redirect("/tmp/compatible")
for path in ("/proc/device-tree/compatible", "/sys/firmware/devicetree/base/compatible"):
    with open(path, "rb") as handle:
        assert handle.read().endswith(b"rockchip,rk3588\\0"), path
    assert pathlib.Path(path).read_bytes().startswith(b"radxa"), path
    assert pathlib.Path(path).read_text().endswith("rk3588\\0"), path
    with pathlib.Path(path).open("rb") as handle:
        assert handle.read(5) == b"radxa", path
print("python", sys.version.split()[0], "reads the plugin's compatible file")
from rknnlite.api import RKNNLite
lite = RKNNLite()
lite.load_rknn("/tmp/m.rknn")
print("init", lite.init_runtime(core_mask=1))
"""


@roots_param(ROOTS, "the toolkit")
@pytest.mark.parametrize("how", ["in-process", "run-shim"])
def test_redirect_loaded_by_path_with_the_real_toolkit(root: Root, how: str) -> None:  # pragma: no cover
    """Every root's Python (3.9's pathlib too) reads the redirected file; the toolkit then finds RK3588."""
    lay_out_helpers(root)
    (root.path / "tmp/compatible").write_bytes(b"radxa,rock-5b\0rockchip,rk3588\0")
    write_rknn(root.path / "tmp/m.rknn")
    (root.path / "tmp/probe_shim.py").write_text(SHIM_PROBE)
    env = {}
    if how == "run-shim":  # the child environment `rknnlaunch run` sets (rknnlaunch.runtime._dtcompat)
        env = {
            dtcompat.REDIRECT_ENV: "/tmp/compatible",
            "PYTHONPATH": "/tmp/rknnlaunch-shim/rknnlaunch/_dtshim",
        }
    done = chroot(root, root.manifest["toolkit_python"], "/tmp/probe_shim.py", how, env=env)
    output = done.stdout + done.stderr
    assert f"python {root.manifest['python']} reads the plugin's compatible file" in output, output
    assert "init -1" in output and "Can not find dynamic library on RK3588" in output, output
    assert "Please specify the target" not in output


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@roots_param(SDK_ROOTS, "the plugin")
def test_plugin_starts_without_opencv_or_onnxruntime(root: Root) -> None:  # pragma: no cover - slow
    plugin = root.manifest["plugin_venv"]
    chroot(
        root,
        f"{plugin}/bin/python",
        "-c",
        "import importlib.util as u, sys, grpc, rknpu_device_plugin\n"
        "extra = [m for m in ('cv2', 'onnxruntime') if u.find_spec(m)]\n"
        "sys.exit(f'the plugin venv has {extra}' if extra else 0)",
        check=True,
    )
    lay_out_helpers(root)
    chroot(
        root,
        f"{plugin}/bin/python",
        "-c",
        "import sys; sys.path.insert(0, '/tmp/rknnlaunch-tests'); from pathlib import Path\n"
        "from fakehost import make_host; make_host('rk3588-drm', Path('/tmp/host-plugin'))\n"
        "Path('/tmp/host-plugin/dp').mkdir(exist_ok=True)  # the kubelet's folder: not the plugin's to make",
        check=True,
    )
    port = free_port()
    plugin_process = subprocess.Popen(
        [
            shutil.which("chroot") or "/usr/sbin/chroot",
            str(root.path),
            f"{plugin}/bin/rknpu-device-plugin",
            *("--host-root", "/tmp/host-plugin", "--device-plugin-dir", "/tmp/host-plugin/dp"),
            *("--metrics-address", f"127.0.0.1:{port}", "--pod-resources-socket", ""),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    seen = []
    watchdog = threading.Timer(EMULATED, plugin_process.kill)  # a hung start ends the line loop below
    watchdog.start()
    try:
        assert plugin_process.stderr is not None
        for line in plugin_process.stderr:  # ends when the plugin exits
            seen.append(line)
            if "waiting for kubelet.sock" in line:
                break
        assert any("waiting for kubelet.sock" in line for line in seen), "".join(seen)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=EMULATED) as page:
            metrics = page.read().decode()
        assert 'soc="rk3588"' in metrics and "rknpu_cores 3.0" in metrics
        plugin_process.send_signal(signal.SIGTERM)
        rest, _ = plugin_process.communicate(timeout=EMULATED)
        assert plugin_process.returncode == 0, "".join(seen) + rest
    finally:
        watchdog.cancel()
        if plugin_process.poll() is None:
            plugin_process.kill()
            plugin_process.wait()


# --- the real binding end to end on the simulated librknnrt (tests/kit/librknnrt_sim) ------------

KIT = TESTS.parent / "kit"
TINY_MODEL = KIT / "models/tiny-rk3588.rknn"
"""rknn-toolkit2 2.5.0's conversion of our own seeded graph (tests/kit/make_tiny_model.py)."""


def install_simulated_librknnrt(root: Root) -> None:
    """The aarch64 simulator at /usr/lib/librknnrt.so, the tiny model and a fake RK3588 host tree."""
    built = subprocess.run(
        ["bash", str(KIT / "librknnrt_sim/build.sh")], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr
    lay_out_helpers(root)  # removes any librknnrt.so: install after it
    shutil.copy(Path(built.stdout.strip().splitlines()[-1], "aarch64/librknnrt.so"), root.path / "usr/lib")
    shutil.copy(TINY_MODEL, root.path / "tmp/tiny.rknn")
    shutil.copy(KIT / "binding_cost.py", root.path / "tmp/binding_cost.py")
    write_rknn(root.path / "tmp/rk3566.rknn", targets=("rk3566",), inputs=(("x", (1, 3, 32, 32)),))
    shutil.rmtree(root.path / "tmp/rknn-sim", ignore_errors=True)
    (root.path / "tmp/compatible").write_bytes(b"radxa,rock-5b\0rockchip,rk3588\0")


def shim_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """What `rknnlaunch run` gives its child: the toolkit reads the compatible file we wrote."""
    return {
        dtcompat.REDIRECT_ENV: "/tmp/compatible",
        "PYTHONPATH": "/tmp/rknnlaunch-shim/rknnlaunch/_dtshim",
        "RKNN_SIM_LOCK_DIR": "/tmp/rknn-sim",
        **(extra or {}),
    }


END_TO_END = """
import ctypes, json, sys
import numpy as np
from rknnlite.api import RKNNLite
report = {}
frame = np.full((1, 32, 32, 3), 42, np.uint8)
for mask in (1, 2, 4, 3, 7):
    lite = RKNNLite()
    loaded = lite.load_rknn("/tmp/tiny.rknn")
    init = lite.init_runtime(core_mask=mask)
    y = lite.inference(inputs=[frame])
    report[str(mask)] = [loaded, init, None if y is None else [list(y[0].shape), float(y[0].flat[0])]]
    lite.release()
lite = RKNNLite()
lite.load_rknn("/tmp/rk3566.rknn")
report["other-target"] = lite.init_runtime(core_mask=1)
lite.release()
lite = RKNNLite()
report["no-init"] = lite.inference(inputs=[frame]) is None
# The C ABI straight: the codes our error messages will meet (rknn_api.h).
lib = ctypes.CDLL("/usr/lib/librknnrt.so")
data = open("/tmp/tiny.rknn", "rb").read()
ctx = ctypes.c_uint64()
model = ctypes.create_string_buffer(data, len(data))
report["abi-init"] = lib.rknn_init(ctypes.byref(ctx), model, len(data), 0, None)
report["abi-mask-8"] = lib.rknn_set_core_mask(ctx, 8)
report["abi-destroy"] = lib.rknn_destroy(ctx)
report["abi-run-destroyed"] = lib.rknn_run(ctx, None)
print("REPORT", json.dumps(report))
"""


@roots_param(SDK_ROOTS, "the SDK")
def test_real_rknnlite_end_to_end_on_the_simulated_librknnrt(root: Root) -> None:  # pragma: no cover
    """load_rknn -> init_runtime(mask) -> inference -> release through the real compiled binding."""
    install_simulated_librknnrt(root)
    (root.path / "tmp/end_to_end.py").write_text(END_TO_END)
    done = chroot(root, f"{root.sdk}/bin/python", "/tmp/end_to_end.py", env=shim_env())
    output = done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, output
    report = json.loads(lines[-1].removeprefix("REPORT "))
    for mask in ("1", "2", "4", "3", "7"):  # every core and core set of an RK3588
        assert report[mask] == [0, 0, [[1, 6, 1024], 42.0]], (mask, output)
    assert report["other-target"] == -1 and "The model is built for rk3566" in output
    assert report["no-init"] is True
    assert report["abi-init"] == 0
    assert report["abi-mask-8"] == -5  # RKNN_ERR_PARAM_INVALID: a core the SoC lacks
    assert report["abi-destroy"] == 0
    assert report["abi-run-destroyed"] == -7  # RKNN_ERR_CTX_INVALID


@roots_param(SDK_ROOTS, "the SDK")
def test_a_core_the_simulator_fails_returns_no_outputs(root: Root) -> None:  # pragma: no cover - slow
    install_simulated_librknnrt(root)
    script = (
        "import numpy as np\nfrom rknnlite.api import RKNNLite\n"
        "for mask in (1, 2):\n"
        "    lite = RKNNLite(); lite.load_rknn('/tmp/tiny.rknn'); lite.init_runtime(core_mask=mask)\n"
        "    y = lite.inference(inputs=[np.zeros((1, 32, 32, 3), np.uint8)])\n"
        "    print('core-mask', mask, 'none' if y is None else 'ok'); lite.release()\n"
    )
    done = chroot(root, f"{root.sdk}/bin/python", "-c", script, env=shim_env({"RKNN_SIM_FAIL_CORES": "2"}))
    output = done.stdout + done.stderr
    assert "core-mask 1 ok" in output and "core-mask 2 none" in output, output
    assert "failed to submit!" in output


@roots_param(SDK_ROOTS, "the SDK")
def test_bench_through_the_real_binding_on_three_simulated_cores(root: Root) -> None:  # pragma: no cover
    """`rknnlaunch bench` on a fake RK3588 host: per-core cases and the pool, real RKNNLite, sim NPU.
    Prints each case's efficiency and the binding's per-call cost beside the x86 fake's (-s shows)."""
    install_simulated_librknnrt(root)
    chroot(
        root,
        f"{root.sdk}/bin/python",
        "-c",
        "import sys; sys.path.insert(0, '/tmp/rknnlaunch-tests'); from pathlib import Path\n"
        "from fakehost import make_host, write\n"
        "host = make_host('rk3588-drm', Path('/tmp/host-bench'))\n"
        "write(host.root, '/run/rknpu/compatible', b'radxa,rock-5b\\0rockchip,rk3588\\0')",
        check=True,
    )
    env = {
        "RKNNLAUNCH_ROOT": "/tmp/host-bench",
        "RKNN_NPU_COMPATIBLE_FILE": "/run/rknpu/compatible",
        "RKNN_SIM_LOCK_DIR": "/tmp/rknn-sim",
    }
    done = chroot(
        root,
        f"{root.sdk}/bin/rknnlaunch",
        "bench",
        *("--model", "/tmp/tiny.rknn", "-n", "12", "--warmup", "2", "--no-progress"),
        *("--json", "/tmp/bench.json"),
        env=env,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    report = json.loads((root.path / "tmp/bench.json").read_text())
    print(output)
    print(json.dumps(report.get("cases", report), indent=1)[:4000])
    cost = chroot(
        root, f"{root.sdk}/bin/python", "/tmp/binding_cost.py", "--model", "/tmp/tiny.rknn", env=shim_env()
    )
    print("real binding (qemu):", cost.stdout.strip(), cost.stderr[-500:])
    fake_dir = root.path / "tmp/fake-locks"
    fake_dir.mkdir(exist_ok=True)
    fake = subprocess.run(
        [sys.executable, str(KIT / "binding_cost.py"), "--model", str(TINY_MODEL), "--fake", str(fake_dir)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(TESTS.parent.parent)},
    )
    print("x86 fake:", fake.stdout.strip(), fake.stderr[-500:])
    assert cost.returncode == 0, cost.stderr
