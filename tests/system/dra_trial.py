"""The DRA driver assembled on one machine, everything under one temp folder: a simulated RK3588
host tree, a small fake API server (tests/dra/fakeapi.py), the driver (a process, or its image
under podman), the kubelet stub (tests/dra/kubeletstub.py) registering it, a scheduler's share of
the work done here (a sample claim of deploy/dra/samples allocated against the published slice
with the DeviceClass's and the claim's CEL selectors), NodePrepareResources, and a workload
running `rknnlaunch doctor` and `rknnlaunch bench` with the claim's CDI spec on the simulated NPU
(assembled.py's workload). Used by images/demo.sh --dra and tests/system/test_system_dra.py.

Nothing is written outside the trial's folder: the driver gets every path it writes
(registration and plugin sockets, checkpoint, CDI specs) under it, never the defaults under
/var/lib/kubelet and /var/run/cdi. The one exception is the container variant, which hands
podman the claim's spec through /var/run/cdi (removed afterwards), the folder podman reads.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
REPO = TESTS.parent
for extra in (HERE, TESTS, TESTS / "dra", REPO / "plugin"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import assembled  # noqa: E402
import yaml  # noqa: E402
from allocator import AllocationError, Allocator  # noqa: E402
from fakeapi import FakeApiServer  # noqa: E402
from kubeletstub import KubeletStub  # noqa: E402

NODE = "demo-node"
DRIVER = "npu.rockchip.com"
SAMPLES = REPO / "deploy/dra/samples"
CLASSES = REPO / "deploy/dra/deviceclasses.yaml"
DEFAULT_SAMPLE = "two-rk3588-cores.yaml"


# --- the scheduler's part: allocate a claim against the published slices ---------------------------


def sample_claim(path: Path) -> dict[str, Any]:
    """The ResourceClaim spec of a sample (a ResourceClaimTemplate's spec, or a ResourceClaim's)."""
    for document in yaml.safe_load_all(path.read_text()):
        if document and document.get("kind") == "ResourceClaimTemplate":
            spec: dict[str, Any] = document["spec"]["spec"]
            return spec
        if document and document.get("kind") == "ResourceClaim":
            spec = document["spec"]
            return spec
    raise ValueError(f"{path} holds no ResourceClaim or ResourceClaimTemplate")


def allocate(claim_spec: dict[str, Any], slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scheduler's first-fit results for ``claim_spec`` over ``slices``, with the shipped
    DeviceClasses and a real CEL engine (tests/dra/allocator.py, the same rig tests/dra uses)."""
    classes = [d for d in yaml.safe_load_all(CLASSES.read_text()) if d and d.get("kind") == "DeviceClass"]
    try:
        results = Allocator(classes, slices).allocate({"spec": claim_spec})
    except AllocationError as exc:
        raise assembled.TrialError(f"the scheduler refuses the claim: {exc}") from None
    if results is None:
        wanted = ", ".join(
            f"{r['name']} ({(r.get('exactly') or {}).get('deviceClassName', 'firstAvailable')})"
            for r in claim_spec["devices"]["requests"]
        )
        raise assembled.TrialError(
            f"the claim's requests {wanted} cannot be allocated from the published slices\n"
            "fix: pick a sample this simulated RK3588 can satisfy"
        )
    return [result.to_json() for result in results]


def pool_complete(found: dict[str, Any]) -> bool:
    """Every slice of the pool's newest generation is published (a 1.35+ partitionable pool is
    two: its counters and its devices), as the scheduler waits for before allocating from it."""
    if not found:
        return False
    pools = [piece["spec"]["pool"] for piece in found.values()]
    newest = max(pool["generation"] for pool in pools)
    current = [pool for pool in pools if pool["generation"] == newest]
    return len(current) == current[0]["resourceSliceCount"]


# --- the driver ------------------------------------------------------------------------------------


def driver_args(work: Path, host: str, kubeconfig: str) -> list[str]:
    """Every path the driver writes, under ``work`` (containers: the same paths, mounted)."""
    return [
        f"--host-root={host}",
        f"--node-name={NODE}",
        f"--kubeconfig={kubeconfig}",
        f"--registration-dir={work / 'registry'}",
        f"--plugin-dir={work / 'plugin'}",
        f"--cdi-dir={work / 'cdi'}",
        "--log-format=json",
    ]


@contextmanager
def driver_running(trial: assembled.Trial, api: FakeApiServer, image: str | None) -> Iterator[KubeletStub]:
    """The driver (process or container), registered with the kubelet stub; yields the stub."""
    work = trial.work
    for folder in ("registry", "plugin", "cdi"):
        (work / folder).mkdir(exist_ok=True)
    kubeconfig = api.kubeconfig(work / "kubeconfig")
    name = f"rknnlaunch-dra-{os.getpid()}"
    process: subprocess.Popen[str] | None = None
    log = (work / "driver.log").open("w")
    try:
        if image:
            # --network host: the fake API server listens on this machine's loopback. The host
            # tree and the work folder are mounted at the same paths, so every path matches.
            assembled.podman(
                "run", "-d", "--rm", "--name", name, "--network", "host", "--read-only",
                "-v", f"{trial.host}:/host:ro", "-v", f"{work}:{work}",
                image, *driver_args(work, "/host", str(kubeconfig)),
            )  # fmt: skip
        else:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rknpu_dra_driver",
                    *driver_args(work, str(trial.host), str(kubeconfig)),
                ],
                stderr=log,
                env={**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "plugin")))},
            )
        # The kubelet starting: it deletes the node's slices first (the driver republishes them).
        kubelet = KubeletStub(work / "registry", DRIVER, api=api, node_name=NODE)
        info = kubelet.register(timeout=600 if image else 30)
        trial.say(
            "registered", driver=info.name, endpoint=info.endpoint, versions=list(info.supported_versions)
        )
        yield kubelet
        kubelet.close()
    finally:
        if image:
            logs = assembled.podman("logs", name, check=False)
            print(f"--- driver container log (tail)\n{(logs.stdout + logs.stderr)[-4000:]}")
            assembled.podman("rm", "-f", "-t", "10", name, check=False)
        if process is not None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        log.close()


# --- the trial -------------------------------------------------------------------------------------


def claim_env(spec_dir: Path, cdi_ids: list[str]) -> dict[str, str]:
    """The env a container started with ``cdi_ids`` gets from the specs in ``spec_dir``."""
    env: dict[str, str] = {}
    for path in sorted(spec_dir.glob("*.json")):
        spec = json.loads(path.read_text())
        for device in spec.get("devices", []):
            if f"{spec['kind']}={device['name']}" in cdi_ids:
                for edits in (spec.get("containerEdits", {}), device.get("containerEdits", {})):
                    env.update(item.split("=", 1) for item in edits.get("env", []))
    return env


def run(
    work: Path, sample: Path, images: dict[str, str], engine: str | None, keep: bool = False
) -> dict[str, Any]:
    trial = assembled.Trial(work, images, engine, keep=keep)
    started = time.monotonic()
    assembled.prepare(trial)
    api = FakeApiServer().start()
    try:
        api.add_node(NODE)
        with driver_running(trial, api, images.get("dra") if engine else None) as kubelet:
            slices = list(api.wait_slices(pool_complete, timeout=600 if engine else 30).values())
            devices = [device["name"] for piece in slices for device in piece["spec"].get("devices") or ()]
            trial.say("published", slices=len(slices), devices=devices)
            spec = sample_claim(sample)
            uid = str(uuid.uuid4())
            results = allocate(spec, slices)
            claim_name = sample.stem
            with api.lock:
                api.claims[("default", claim_name)] = {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": claim_name, "namespace": "default", "uid": uid},
                    "spec": spec,
                    "status": {"allocation": {"devices": {"results": results}}},
                }
            trial.say("allocated", sample=sample.name, devices=[r["device"] for r in results])
            answer = kubelet.prepare([("default", claim_name, uid)]).claims[uid]
            if answer.error:
                raise assembled.TrialError(
                    f"NodePrepareResources failed: {answer.error}\nfix: see {work}/driver.log"
                )
            cdi_ids = sorted({cdi for device in answer.devices for cdi in device.cdi_device_ids})
            env = claim_env(work / "cdi", cdi_ids)
            trial.say(
                "prepared",
                cdi_devices=cdi_ids,
                mask=env.get("RKNN_NPU_CORE_MASK"),
                cores=env.get("RKNN_NPU_CORES"),
            )
            outcome = assembled.workload(
                trial, env, cdi_ids, images.get("runtime") if engine else None, spec_dir=work / "cdi"
            )
            gone = kubelet.unprepare([("default", claim_name, uid)]).claims[uid]
            trial.say(
                "unprepared", error=gone.error or None, specs_left=len(list((work / "cdi").glob("*.json")))
            )
    finally:
        api.stop()
    allocated = sorted(int(core) for core in env.get("RKNN_NPU_CORES", "").split(",") if core)
    outcome["allocated_cores"] = allocated
    outcome["mask"] = env.get("RKNN_NPU_CORE_MASK")
    outcome["problems"] = assembled.verdict(outcome, allocated)
    outcome["steps"] = trial.steps
    outcome["wall_s"] = round(time.monotonic() - started, 1)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sample", default=DEFAULT_SAMPLE, help=f"a file of deploy/dra/samples (default {DEFAULT_SAMPLE})"
    )
    parser.add_argument(
        "--image", action="append", default=[], metavar="ROLE=TAG", help="dra=TAG, runtime=TAG"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    sample = SAMPLES / args.sample
    if not sample.is_file():
        choices = ", ".join(sorted(p.name for p in SAMPLES.glob("*.yaml")))
        print(
            f"dra_trial: --sample {args.sample} is not in deploy/dra/samples\nfix: one of {choices}",
            file=sys.stderr,
        )
        return 2
    images = dict(item.split("=", 1) for item in args.image)
    engine = None
    if images:
        problem = assembled.engine_problem()
        if problem:
            print(f"dra_trial: {problem}", file=sys.stderr)
            return 2
        engine = "podman"
    # Unix socket paths are limited to 107 bytes: a short folder under /tmp.
    work = Path(tempfile.mkdtemp(prefix="rkdra-", dir="/tmp"))
    try:
        results = run(work, sample, images, engine, args.keep)
    except assembled.TrialError as exc:
        print(f"dra_trial: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    how = (
        f"driver in {images.get('dra') or 'a plain process'}, "
        f"workload in {images.get('runtime') or 'a plain process'}"
        if engine
        else "plain processes"
    )
    if results["problems"]:
        print(f"== DRA trial FAILED in {results['wall_s']} s ({how}): " + "; ".join(results["problems"]))
        return 1
    fps = ", ".join(f"core {core} {value} FPS" for core, value in results["per_core_fps"].items())
    cores = ",".join(map(str, results["allocated_cores"]))
    print(
        f"== DRA trial passed in {results['wall_s']} s ({how}): claim {sample.name} prepared cores {cores} "
        f"(mask {results['mask']}); the workload ran on them of the simulated NPU and on no other; {fps}; "
        + (
            f"everything is kept under {work}"
            if args.keep
            else "its temp folder is removed (--keep keeps it)"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
