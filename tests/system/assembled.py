"""The assembled system on one machine: a simulated RK3588 host tree, the project's kubelet stub,
the device plugin (in its image under podman, or as a plain process), an Allocate of two cores,
and a workload (the runtime image, or plain processes) running `rknnlaunch doctor` and
`rknnlaunch bench` with what Allocate handed it, on the simulated NPU. Used by
tests/system/test_system_assembled.py and by images/demo.sh.

The simulated NPU: the fake host's sysfs/debugfs (tests/fakehost.py), device nodes that open (as
root, char devices with /dev/null's numbers: a node of the DRM numbers would answer ENXIO on a
machine without the rknpu driver, and nothing reads or writes them, since the simulated librknnrt
never opens a node), and the simulated librknnrt (tests/kit/librknnrt_sim) whose per-core queue
files in the trial's rknn-sim folder show which cores the workload's jobs ran on.

Containers: the plugin image sees the fake host at /host and shares the device-plugin folder
with the kubelet stub and its CDI folder with us; the CDI spec it writes names the node's paths,
which on this machine live under the fake host tree, so the spec handed to podman is the same
spec with every hostPath prefixed by that tree (nothing else changes). The workload container is
started with `--device rockchip.com/npu=npu` from it, the Allocate env, non-root and a read-only
root filesystem, on the simulated librknnrt the image was built with (images/build.sh
--librknnrt-standin sim), through the real rknn-toolkit-lite2.

Plain processes: the workload's bench runs the same .rknn through the x86_64 build of the
simulated librknnrt, reached through tests/kit/rknnlite_sim (rknn-toolkit-lite2's Python surface
over ctypes; the real binding ships for aarch64 only).

The trial passes only when doctor passes, bench succeeds and the simulator's queues show jobs on
exactly the allocated cores.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
for extra in (TESTS, TESTS / "plugin", REPO / "plugin"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from fakekubelet import DeviceStream, FakeKubelet  # noqa: E402

import fakehost  # noqa: E402
from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb  # noqa: E402

RUNC = "/usr/sbin/runc"
TINY_MODEL = TESTS / "kit/models/tiny-rk3588.rknn"
RKNNLITE_SIM = TESTS / "kit/rknnlite_sim"
CDI_SYSTEM_DIR = Path("/var/run/cdi")
IMAGE_NAMES = {
    "runtime": "rknnlaunch-runtime",
    "plugin": "rknpu-device-plugin",
    "probe": "rknpu-device-plugin-probe",
    "dra": "rknpu-dra-driver",
}


@dataclass
class Trial:
    """Where one trial keeps its state, and what it found."""

    work: Path
    images: dict[str, str]
    engine: str | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    keep: bool = False
    """--keep: the work folder outlives the trial (else paths in it are not shown: gone at the end)."""

    @property
    def host(self) -> Path:
        return self.work / "host"

    @property
    def plugin_dir(self) -> Path:
        return self.work / "device-plugins"

    @property
    def cdi_dir(self) -> Path:
        return self.work / "cdi"

    @property
    def sim_dir(self) -> Path:
        return self.work / "rknn-sim"

    def say(self, step: str, **facts: Any) -> None:
        self.steps.append({"step": step, **facts})
        print(f"== {step}: " + ", ".join(f"{k}={v}" for k, v in facts.items()), flush=True)


def podman(*args: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["podman", "--runtime", RUNC, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])}...: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done


class TrialError(RuntimeError):
    """A prerequisite of the trial is missing: one line, and the fix."""


def build_simulator() -> Path:
    """The x86_64 simulated librknnrt (tests/kit/librknnrt_sim/build.sh; gcc)."""
    built = subprocess.run(
        ["bash", str(TESTS / "kit/librknnrt_sim/build.sh")],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SIM_ARCHS": "x86_64"},
    )
    if built.returncode != 0:
        reason = (built.stderr.strip().splitlines() or ["no output"])[-1]
        raise TrialError(f"cannot build the simulated librknnrt: {reason}\nfix: apt-get install gcc")
    return Path(built.stdout.strip().splitlines()[-1], "x86_64/librknnrt.so")


def openable_nodes(host: Path) -> list[str]:
    """As root, replace the fake host's DRM char devices (ENXIO without the rknpu driver) with nodes
    of /dev/null's numbers, same owner, mode crw-rw---- as on a board: the simulated NPU's nodes
    open, as a real driver's do. Regular files (fakehost's nodes without root) open already.
    Returns the nodes changed."""
    changed = []
    for node in sorted((host / "dev/dri").glob("*")):
        info = node.lstat()
        if not stat.S_ISCHR(info.st_mode):
            continue
        try:
            os.close(os.open(node, os.O_RDWR))
            continue
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                continue
        node.unlink()
        os.mknod(node, 0o660 | stat.S_IFCHR, os.makedev(1, 3))
        os.chown(node, info.st_uid, info.st_gid)
        os.chmod(node, 0o660)  # a render node's crw-rw---- (fakehost's mknod mode loses g+w to the umask)
        changed.append(f"/dev/dri/{node.name}")
    return changed


def prepare(trial: Trial) -> None:
    fakehost.make_host("rk3588-drm", trial.host)
    # The workload reads its host facts under RKNNLAUNCH_ROOT=/host, the compatible file the plugin
    # mounts included (`rknnlaunch run` resolves RKNN_NPU_COMPATIBLE_FILE under that root).
    fakehost.write(trial.host, "/run/rknpu/compatible", b"radxa,rock-5b\0rockchip,rk3588\0")
    if os.geteuid() == 0:
        openable_nodes(trial.host)
    # The plain-process workload loads the fake host's /usr/lib/librknnrt.so: the x86_64 simulator
    # (doctor then reports the runtime as a STAND-IN). Containers use the one their image carries.
    (trial.host / "usr/lib").mkdir(parents=True, exist_ok=True)
    shutil.copy(build_simulator(), trial.host / "usr/lib/librknnrt.so")
    trial.plugin_dir.mkdir(parents=True)
    trial.cdi_dir.mkdir(parents=True)
    trial.sim_dir.mkdir(parents=True)
    trial.sim_dir.chmod(0o1777)  # the workload runs as 10001 and writes its core queues here


def cores_used(sim_dir: Path) -> list[int]:
    """The cores the simulated librknnrt queued jobs on (its LOCKDIR/core<N>.lock files)."""
    return sorted(int(path.stem[4:]) for path in sim_dir.glob("core*.lock") if path.stem[4:].isdigit())


def per_core_fps(report: dict[str, Any]) -> dict[str, float]:
    """The bench report's single-core cases: core -> FPS."""
    return {
        ",".join(str(core) for core in case["cores"]): round(case["fps"], 1)
        for case in report.get("cases", [])
        if case.get("kind") == "single" and len(case.get("cores", [])) == 1 and case.get("fps")
    }


@contextlib.contextmanager
def plugin_running(trial: Trial, image: str | None, probe: Sequence[str] = ()) -> Iterator[Any]:
    """The device plugin, registered with the kubelet stub; yields the stub."""
    kubelet = FakeKubelet(trial.plugin_dir)
    kubelet.start()
    pod_resources = None
    resources_args = ["--pod-resources-socket", ""]
    if probe:  # the probe only runs once it can tell which cores pods hold: a pod-resources stub
        from telemetry.fake_podresources import PodResourcesServer

        (trial.work / "pod-resources").mkdir(exist_ok=True)
        pod_resources = PodResourcesServer(str(trial.work / "pod-resources")).start()
        resources_args = ["--pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock"]
    args = ["--cdi", "--log-format", "json", *resources_args, *probe]
    name = f"rknnlaunch-plugin-{os.getpid()}"
    process: subprocess.Popen[str] | None = None
    log = (trial.work / "plugin.log").open("w")
    try:
        if image:
            podman(
                "run", "-d", "--rm", "--name", name, "--network", "none", "--read-only",
                "-v", f"{trial.host}:/host:ro",
                "-v", f"{trial.plugin_dir}:/var/lib/kubelet/device-plugins",
                "-v", f"{trial.cdi_dir}:/var/run/cdi",
                "-v", f"{trial.sim_dir}:/run/rknn-sim",
                "-e", "RKNN_SIM_LOCK_DIR=/run/rknn-sim",
                *(["-v", f"{trial.work / 'pod-resources'}:/var/lib/kubelet/pod-resources"] if probe else []),
                *(["-e", "RKNN_SIM_OUTPUT_VALUES=/run/rknn-sim/probe-values.txt"] if probe else []),
                image, "--host-root", "/host", "--cdi-dir", "/var/run/cdi", *args,
            )  # fmt: skip
        else:
            process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "rknpu_device_plugin", "--host-root", str(trial.host)),
                    *("--device-plugin-dir", str(trial.plugin_dir), "--cdi-dir", str(trial.cdi_dir)),
                    *args,
                ],
                stderr=log,
                env={**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "plugin")))},
            )
        yield kubelet
    finally:
        if image:  # the plugin's own account, for the test log
            logs = podman("logs", name, check=False)
            print(f"--- plugin container log (tail)\n{(logs.stdout + logs.stderr)[-4000:]}")
            podman("rm", "-f", "-t", "5", name, check=False)
        if process is not None:
            process.terminate()
            process.wait(30)
        log.close()
        if pod_resources is not None:
            pod_resources.cleanup()
        kubelet.stop()


def register_and_allocate(trial: Trial, kubelet: FakeKubelet, cores: int = 2) -> pb.ContainerAllocateResponse:
    _, request = kubelet.wait_registration(timeout=600)
    trial.say("registered", resource=request.resource_name, endpoint=request.endpoint)
    stub = kubelet.plugin_stub(request.endpoint)
    stream = DeviceStream(stub)
    devices = stream.next(timeout=600) or []
    stream.cancel()
    trial.say("devices", ids=[device for device, _ in devices], health=[health for _, health in devices])
    ids = sorted(device for device, _ in devices)[:cores]
    answer = stub.Allocate(
        pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=600
    ).container_responses[0]
    trial.say(
        "allocated",
        ids=ids,
        mask=answer.envs.get("RKNN_NPU_CORE_MASK"),
        env=dict(answer.envs),
        cdi_devices=[device.name for device in answer.cdi_devices],
        devices=[d.host_path for d in answer.devices],
    )
    return answer


def node_spec(trial: Trial, spec_dir: Path) -> Path:
    """The node's CDI spec (the plugin's, or a DRA claim's) with its node paths moved under the fake
    host tree, in podman's CDI folder."""
    specs = sorted(spec_dir.glob("*.json")) + sorted(spec_dir.glob("*.yaml"))
    if not specs:
        raise RuntimeError(f"the node wrote no CDI spec in {spec_dir}")
    spec = json.loads(specs[0].read_text())
    trial.say("cdi spec", file=specs[0].name, kind=spec["kind"])
    for edits in [spec.get("containerEdits", {}), *(device["containerEdits"] for device in spec["devices"])]:
        for node in edits.get("deviceNodes", []):
            node["hostPath"] = str(trial.host) + node.get("hostPath", node["path"])
        for mount in edits.get("mounts", []):
            # The DRA driver's own files (the per-claim metadata under its --plugin-dir, in the
            # trial's work folder) are real paths here; the node's live under the fake host tree.
            if not Path(mount["hostPath"]).is_relative_to(trial.work):
                mount["hostPath"] = str(trial.host) + mount["hostPath"]
    if spec.get("cdiVersion") == "0.6.0":
        # The DRA driver's claim specs are 0.6.0 for their annotations (the driver alone reads them,
        # to rebuild its checkpoint); podman 4.3 (Debian bookworm) reads CDI up to 0.5.0 and ignores
        # newer specs. The same edits without the annotations are a valid 0.5.0 spec.
        spec.pop("annotations", None)
        for device in spec["devices"]:
            device.pop("annotations", None)
        spec["cdiVersion"] = "0.5.0"
    CDI_SYSTEM_DIR.mkdir(parents=True, exist_ok=True)
    target = CDI_SYSTEM_DIR / f"rknnlaunch-trial-{os.getpid()}.json"
    target.write_text(json.dumps(spec))
    return target


def node_groups(trial: Trial) -> list[str]:
    """``--group-add GID`` for the groups owning the fake host's NPU nodes: what a pod sets with
    securityContext.supplementalGroups (the render group), so the non-root workload opens them."""
    gids = sorted({node.stat().st_gid for node in (trial.host / "dev/dri").glob("*")} - {0})
    return [arg for gid in gids for arg in ("--group-add", str(gid))]


def workload(
    trial: Trial,
    env: dict[str, str],
    cdi_devices: Sequence[str],
    image: str | None,
    spec_dir: Path | None = None,
) -> dict[str, Any]:
    """`rknnlaunch doctor --json` and `rknnlaunch bench --json` with what the node handed the
    container: ``env`` (Allocate's envs, or a claim's CDI env) and the CDI devices to start it with
    (in containers; the specs are in ``spec_dir``, default the plugin's CDI folder)."""
    results: dict[str, Any] = {}
    report = trial.work / "bench.json"
    # Every core set and the thread pool: per-core FPS and the pool on the allocation, in seconds
    # (the process-pool case starts interpreters: minutes under qemu, seconds lost here).
    bench_args = ["-n", "10", "--warmup", "1", "--no-process-pool", "--no-progress"]
    if image:
        spec = node_spec(trial, spec_dir or trial.cdi_dir)
        try:
            base = [
                "run", "--rm", "--read-only", "--user", "10001:10001", "--network", "none",
                "--tmpfs", "/tmp:rw,mode=1777", *node_groups(trial),
                *[arg for device in cdi_devices for arg in ("--device", device)],
                *[arg for key, value in env.items() for arg in ("-e", f"{key}={value}")],
                "-e", "RKNNLAUNCH_ROOT=/host", "-e", "RKNN_SIM_LOCK_DIR=/run/rknn-sim",
                "-v", f"{trial.host}:/host:ro", "-v", f"{trial.sim_dir}:/run/rknn-sim",
                "-v", f"{TINY_MODEL}:/models/tiny.rknn:ro",
            ]  # fmt: skip
            doctor = podman(*base, "--entrypoint", "rknnlaunch", image, "doctor", "--json", check=False)
            # The image's ENTRYPOINT (`rknnlaunch run --`) without its preflight (doctor above is
            # the preflight, reported on its own); the shim that shows rknn-toolkit-lite2 the
            # plugin's compatible file stays.
            bench = podman(
                *base, "--entrypoint", '["rknnlaunch", "run", "--no-check", "--"]', image,
                "rknnlaunch", "bench", "--model", "/models/tiny.rknn", *bench_args,
                "--json", "/run/rknn-sim/bench.json", check=False,
            )  # fmt: skip
            report = trial.sim_dir / "bench.json"
        finally:
            spec.unlink(missing_ok=True)
    else:
        library = trial.host / "usr/lib/librknnrt.so"
        plain = {
            **os.environ,
            **env,
            "RKNNLAUNCH_ROOT": str(trial.host),
            # rknnlite.api from tests/kit/rknnlite_sim, on the fake host's simulated librknnrt
            "PYTHONPATH": os.pathsep.join((str(RKNNLITE_SIM), str(REPO), str(REPO / "plugin"))),
            "RKNN_SIM_LIBRKNNRT": str(library),
            "RKNN_SIM_LOCK_DIR": str(trial.sim_dir),
        }
        rknnlaunch = [sys.executable, "-m", "rknnlaunch"]
        doctor = subprocess.run([*rknnlaunch, "doctor", "--json"], capture_output=True, text=True, env=plain)
        bench = subprocess.run(
            [*rknnlaunch, "bench", "--model", str(TINY_MODEL), *bench_args, "--json", str(report)],
            capture_output=True,
            text=True,
            env=plain,
        )
    try:
        document = json.loads(doctor.stdout)
        results["doctor"] = {check["id"]: check["status"] for check in document["checks"]}
        results["doctor_summaries"] = {check["id"]: check["summary"] for check in document["checks"]}
        results["doctor_fixes"] = {check["id"]: check.get("fix") for check in document["checks"]}
    except (ValueError, KeyError):
        results["doctor"] = {"unreadable": doctor.stdout[-2000:] + doctor.stderr[-2000:]}
    results["doctor_exit"] = doctor.returncode
    results["bench_exit"] = bench.returncode
    results["bench_output"] = shown_paths(bench.stdout[-6000:] + bench.stderr[-3000:], trial, report)
    try:
        bench_report = json.loads(report.read_text())
    except (OSError, ValueError):
        bench_report = {}
    results["bench_backend"] = bench_report.get("backend")
    results["per_core_fps"] = per_core_fps(bench_report)
    results["cores_used"] = cores_used(trial.sim_dir)
    trial.say("doctor", exit=doctor.returncode, checks=results["doctor"])
    for check, status in results["doctor"].items():
        if status == "fail":  # say why, with doctor's own words
            print(f"   {check}: {results['doctor_summaries'].get(check)}")
            print(f"   fix: {results['doctor_fixes'].get(check)}")
    print(results["bench_output"])
    trial.say(
        "bench",
        exit=bench.returncode,
        backend=results["bench_backend"],
        mask=env.get("RKNN_NPU_CORE_MASK"),
        cores_used=",".join(map(str, results["cores_used"])) or "none",
        per_core_fps=results["per_core_fps"],
    )
    return results


def shown_paths(output: str, trial: Trial, report: Path) -> str:
    """The bench's output with its ``wrote PATH`` line made true for the person reading it after
    the trial: the report's path on this machine when the work folder is kept, else what became of
    it (the folder, and the report in it, are removed at the end: a path would name nothing)."""
    if trial.keep:
        instead = f"wrote {report} (kept with the trial's folder)"
    else:
        instead = "(bench's JSON report, read above, is removed with the trial's folder; --keep keeps it)"
    return "\n".join(instead if line.startswith("wrote ") else line for line in output.split("\n"))


def verdict(results: dict[str, Any], allocated: list[int]) -> list[str]:
    """Why the trial failed (empty: it passed): doctor, bench, and the cores the jobs ran on."""
    problems = []
    failing = sorted(
        check for check, status in results["doctor"].items() if status not in ("ok", "warn", "skip")
    )
    if results["doctor_exit"] != 0 or failing:
        problems.append(f"doctor exited {results['doctor_exit']} (failing: {', '.join(failing) or 'none'})")
    if results["bench_exit"] != 0:
        problems.append(f"bench exited {results['bench_exit']}")
    if results["cores_used"] != allocated:
        problems.append(
            f"the simulated NPU ran jobs on cores {results['cores_used']}, not the allocated {allocated}"
        )
    return problems


def run(work: Path, images: dict[str, str], engine: str | None, keep: bool = False) -> dict[str, Any]:
    trial = Trial(work, images, engine, keep=keep)
    started = time.monotonic()
    prepare(trial)
    with plugin_running(trial, images.get("plugin") if engine else None) as kubelet:
        answer = register_and_allocate(trial, kubelet)
        cdi_devices = [device.name for device in answer.cdi_devices]
        results = workload(trial, dict(answer.envs), cdi_devices, images.get("runtime") if engine else None)
    allocated = sorted(int(core) for core in answer.envs.get("RKNN_NPU_CORES", "").split(",") if core)
    results["allocated_cores"] = allocated
    results["problems"] = verdict(results, allocated)
    results["steps"] = trial.steps
    results["wall_s"] = round(time.monotonic() - started, 1)
    return results


def engine_problem() -> str | None:
    """Why the containers cannot run here (None: podman as root with runc works), with the fix."""
    if os.geteuid() != 0:
        return (
            "the containers need root (podman as root, runc, CDI in /var/run/cdi); fix: sudo images/demo.sh"
        )
    if shutil.which("podman") is None:
        return "podman is not installed; fix: apt-get install podman runc"
    if not os.path.exists(RUNC):
        return f"{RUNC} is missing (the trial runs podman with runc); fix: apt-get install runc"
    done = subprocess.run(["podman", "version"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"`podman version` fails: {reason}; fix: podman info shows what its setup lacks"
    return None


def engine_here() -> str | None:
    return "podman" if engine_problem() is None else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", action="store_true", help="plain processes even where podman works")
    parser.add_argument(
        "--image", action="append", default=[], metavar="ROLE=TAG", help="runtime=TAG, plugin=TAG"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    images = dict(item.split("=", 1) for item in args.image)
    engine = None
    if images and not args.processes:
        problem = engine_problem()
        if problem:
            print(f"assembled: {problem}", file=sys.stderr)
            return 2
        engine = "podman"
    work = Path(tempfile.mkdtemp(prefix="rknnlaunch-trial-"))
    try:
        results = run(work, images, engine, args.keep)
    except TrialError as exc:
        print(f"assembled: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    how = "containers" if engine else "plain processes"
    if results["problems"]:
        print(f"== trial FAILED in {results['wall_s']} s ({how}): " + "; ".join(results["problems"]))
        return 1
    fps = ", ".join(f"core {core} {value} FPS" for core, value in results["per_core_fps"].items())
    cores = ",".join(map(str, results["allocated_cores"]))
    print(
        f"== trial passed in {results['wall_s']} s ({how}): the workload ran on cores {cores} "
        f"(mask {results['steps'][2]['mask']}) of the simulated NPU and on no other; {fps}; "
        + (
            f"everything is kept under {work}"
            if args.keep
            else "its temp folder is removed (--keep keeps it)"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
