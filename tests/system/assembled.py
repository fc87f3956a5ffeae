"""The assembled system on one machine: a simulated RK3588 host tree, the project's kubelet stub,
the device plugin (in its image under podman, or as a plain process), an Allocate of two cores,
and a workload (the runtime image, or plain processes) running `rknnlaunch doctor` and
`rknnlaunch bench` with what Allocate handed it. Used by tests/system/test_system_assembled.py
and by images/demo.sh (`python -m assembled`).

Containers: the plugin image sees the fake host at /host and shares the device-plugin folder
with the kubelet stub and its CDI folder with us; the CDI spec it writes names the node's paths,
which on this machine live under the fake host tree, so the spec handed to podman is the same
spec with every hostPath prefixed by that tree (nothing else changes). The workload container is
started with `--device rockchip.com/npu=npu` from it, the Allocate env, non-root and a read-only
root filesystem, on the simulated librknnrt the image was built with (images/build.sh
--librknnrt-standin sim).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
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
TINY_ONNX = TESTS / "kit/models/tiny.onnx"
CDI_SYSTEM_DIR = Path("/var/run/cdi")
IMAGE_NAMES = {
    "runtime": "rknnlaunch-runtime",
    "plugin": "rknpu-device-plugin",
    "probe": "rknpu-device-plugin-probe",
}


@dataclass
class Trial:
    """Where one trial keeps its state, and what it found."""

    work: Path
    images: dict[str, str]
    engine: str | None
    steps: list[dict[str, Any]] = field(default_factory=list)

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


def prepare(trial: Trial) -> None:
    fakehost.make_host("rk3588-drm", trial.host)
    # The workload reads its host facts under RKNNLAUNCH_ROOT=/host, the compatible file the plugin
    # mounts included (`rknnlaunch run` resolves RKNN_NPU_COMPATIBLE_FILE under that root).
    fakehost.write(trial.host, "/run/rknpu/compatible", b"radxa,rock-5b\0rockchip,rk3588\0")
    # The plain-process workload's doctor reads the fake host's /usr/lib/librknnrt.so: the x86_64
    # simulator there, so it reports the runtime (a STAND-IN) rather than a missing one.
    built = subprocess.run(
        ["bash", str(TESTS / "kit/librknnrt_sim/build.sh")], capture_output=True, text=True, check=False
    )
    if built.returncode == 0:
        library = Path(built.stdout.strip().splitlines()[-1], "x86_64/librknnrt.so")
        (trial.host / "usr/lib").mkdir(parents=True, exist_ok=True)
        shutil.copy(library, trial.host / "usr/lib/librknnrt.so")
    trial.plugin_dir.mkdir(parents=True)
    trial.cdi_dir.mkdir(parents=True)
    trial.sim_dir.mkdir(parents=True)
    trial.sim_dir.chmod(0o1777)  # the workload runs as 10001 and writes its core queues here


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
                stderr=subprocess.DEVNULL,
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


def node_spec(trial: Trial) -> Path:
    """The plugin's CDI spec with its node paths moved under the fake host tree, in podman's CDI folder."""
    specs = sorted(trial.cdi_dir.glob("*.json")) + sorted(trial.cdi_dir.glob("*.yaml"))
    if not specs:
        raise RuntimeError(f"the plugin wrote no CDI spec in {trial.cdi_dir}")
    spec = json.loads(specs[0].read_text())
    trial.say("cdi spec", file=specs[0].name, kind=spec["kind"])
    for device in spec["devices"]:
        edits = device["containerEdits"]
        for node in edits.get("deviceNodes", []):
            node["hostPath"] = str(trial.host) + node.get("hostPath", node["path"])
        for mount in edits.get("mounts", []):
            mount["hostPath"] = str(trial.host) + mount["hostPath"]
    CDI_SYSTEM_DIR.mkdir(parents=True, exist_ok=True)
    target = CDI_SYSTEM_DIR / f"rknnlaunch-trial-{os.getpid()}.json"
    target.write_text(json.dumps(spec))
    return target


def workload(trial: Trial, answer: pb.ContainerAllocateResponse, image: str | None) -> dict[str, Any]:
    """`rknnlaunch doctor --json` and `rknnlaunch bench` with the Allocate answer."""
    env = dict(answer.envs)
    results: dict[str, Any] = {}
    if image:
        spec = node_spec(trial)
        try:
            base = [
                "run", "--rm", "--read-only", "--user", "10001:10001", "--network", "none",
                "--tmpfs", "/tmp:rw,mode=1777", "--group-add", "keep-groups",
                *[arg for device in answer.cdi_devices for arg in ("--device", device.name)],
                *[arg for key, value in env.items() for arg in ("-e", f"{key}={value}")],
                "-e", "RKNNLAUNCH_ROOT=/host", "-e", "RKNN_SIM_LOCK_DIR=/run/rknn-sim",
                "-v", f"{trial.host}:/host:ro", "-v", f"{trial.sim_dir}:/run/rknn-sim",
                "-v", f"{TINY_MODEL}:/models/tiny.rknn:ro",
            ]  # fmt: skip
            doctor = podman(*base, "--entrypoint", "rknnlaunch", image, "doctor", "--json", check=False)
            # The image's ENTRYPOINT (`rknnlaunch run --`) without its preflight, which stops at the
            # fake device nodes a VM cannot open (doctor above reports them); the shim that shows
            # rknn-toolkit-lite2 the plugin's compatible file stays.
            bench = podman(
                *base, "--entrypoint", '["rknnlaunch", "run", "--no-check", "--"]', image,
                "rknnlaunch", "bench", "--model", "/models/tiny.rknn",
                "-n", "20", "--warmup", "2", "--no-progress", check=False,
            )  # fmt: skip
        finally:
            spec.unlink(missing_ok=True)
    else:
        plain = {**os.environ, **env, "RKNNLAUNCH_ROOT": str(trial.host)}
        rknnlaunch = [sys.executable, "-m", "rknnlaunch"]
        doctor = subprocess.run([*rknnlaunch, "doctor", "--json"], capture_output=True, text=True, env=plain)
        # No RKNNLite off arm64: the same tiny graph on the CPU backend, labelled as such.
        bench = subprocess.run(
            [
                *rknnlaunch,
                "bench",
                "--model",
                str(TINY_ONNX),
                "--backend",
                "cpu",
                "-n",
                "10",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            env=plain,
        )
    try:
        document = json.loads(doctor.stdout)
        results["doctor"] = {check["id"]: check["status"] for check in document["checks"]}
        results["doctor_summaries"] = {check["id"]: check["summary"] for check in document["checks"]}
    except (ValueError, KeyError):
        results["doctor"] = {"unreadable": doctor.stdout[-2000:] + doctor.stderr[-2000:]}
    results["doctor_exit"] = doctor.returncode
    results["bench_exit"] = bench.returncode
    results["bench_output"] = bench.stdout[-6000:] + bench.stderr[-3000:]
    trial.say("doctor", exit=doctor.returncode, checks=results["doctor"])
    trial.say("bench", exit=bench.returncode)
    print(results["bench_output"])
    return results


def run(work: Path, images: dict[str, str], engine: str | None) -> dict[str, Any]:
    trial = Trial(work, images, engine)
    started = time.monotonic()
    prepare(trial)
    with plugin_running(trial, images.get("plugin") if engine else None) as kubelet:
        answer = register_and_allocate(trial, kubelet)
        results = workload(trial, answer, images.get("runtime") if engine else None)
    results["steps"] = trial.steps
    results["wall_s"] = round(time.monotonic() - started, 1)
    return results


def engine_here() -> str | None:
    usable = shutil.which("podman") and os.geteuid() == 0 and os.path.exists(RUNC)
    if usable and subprocess.run(["podman", "version"], capture_output=True, check=False).returncode == 0:
        return "podman"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", action="store_true", help="plain processes even where podman works")
    parser.add_argument(
        "--image", action="append", default=[], metavar="ROLE=TAG", help="runtime=TAG, plugin=TAG"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    images = dict(item.split("=", 1) for item in args.image)
    engine = None if args.processes else engine_here()
    work = Path(tempfile.mkdtemp(prefix="rknnlaunch-trial-"))
    try:
        results = run(work, images, engine if images else None)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    ok = results["bench_exit"] == 0
    how = "containers" if engine and images else "plain processes"
    print(f"== trial {'passed' if ok else 'FAILED'} in {results['wall_s']} s ({how})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
