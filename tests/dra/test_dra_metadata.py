"""Device metadata (KEP-5304), the driver's side (issue 33 item 5): prepare writes each request's
file in the library's format where the library keeps it, the request's CDI device mounts it
read-only at the library's container path (and names it in RKNN_NPU_METADATA), unprepare removes
it; a workload reading the file through the SDK, with no RKNN_NPU_* env, gets the claim's cores."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from drarig import DRIVER, NODE, DriverRig
from kubeletstub import KubeletStub
from test_dra_allocation_prepare import UID_A, UID_B, result, started

from fakehost import make_host
from rknnlaunch.settings import (
    METADATA_API_VERSION,
    container_file_path,
    find_npu,
    load_settings,
    parse_metadata,
)
from rknpu_node import minimum_cdi_version


def spec(rig: DriverRig, uid: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((rig.cdi_dir / f"{DRIVER}-claim_{uid}.json").read_text())
    return loaded


def metadata_file(rig: DriverRig, claim: str, request: str = "npu") -> Path:
    return rig.plugin_dir / "dra-device-metadata" / f"default_{claim}" / request / "metadata.json"


def _prepare(kubelet: KubeletStub, name: str, uid: str) -> None:
    answer = kubelet.prepare([("default", name, uid)]).claims[uid]
    assert answer.error == "", answer.error


def test_prepare_writes_the_metadata_file_and_the_cdi_device_mounts_it(rig: DriverRig) -> None:
    kubelet = started(rig)
    rig.api.add_claim(
        "default", "detector", UID_A, [result("npu-core-0", "npu/pair"), result("npu-core-1", "npu/pair")]
    )
    _prepare(kubelet, "detector", UID_A)

    path = metadata_file(rig, "detector")
    document = json.loads(path.read_text())
    assert document["apiVersion"] == METADATA_API_VERSION and document["kind"] == "DeviceMetadata"
    assert document["metadata"] == {"name": "detector", "namespace": "default", "uid": UID_A, "generation": 1}
    (request,) = document["requests"]
    assert request["name"] == "npu/pair"  # as the allocation names it; the folder is the base request
    assert [(d["driver"], d["pool"], d["name"]) for d in request["devices"]] == [
        (DRIVER, NODE, "npu-core-0"),
        (DRIVER, NODE, "npu-core-1"),
    ]
    first = request["devices"][0]["attributes"]
    assert first["coreMask"] == {"int": 1} and first["soc"] == {"string": "rk3588"}  # the slice's attributes
    assert "podClaimName" not in document

    (device,) = spec(rig, UID_A)["devices"]
    container = str(container_file_path("detector", "npu/pair"))
    assert container == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/detector/npu/{DRIVER}-metadata.json"
    )
    assert {"hostPath": str(path), "containerPath": container, "options": ["ro", "bind"]} in device[
        "containerEdits"
    ]["mounts"]
    env = dict(item.split("=", 1) for item in device["containerEdits"]["env"])
    assert env["RKNN_NPU_METADATA"] == container
    # A plain bind mount needs no newer cdiVersion than the spec's other content.
    without = copy.deepcopy(spec(rig, UID_A))
    without["devices"][0]["containerEdits"]["mounts"].pop()
    assert spec(rig, UID_A)["cdiVersion"] == minimum_cdi_version(without)

    # The SDK's reading of what was written (the same parser a workload uses).
    reading = parse_metadata([(container, path.read_text())])
    assert reading.cores is not None and reading.cores.cores == {0, 1}

    assert kubelet.unprepare([("default", "detector", UID_A)]).claims[UID_A].error == ""
    assert not path.exists() and not path.parent.parent.exists()


def test_a_claim_from_a_template_is_filed_under_its_pod_claim_name(rig: DriverRig) -> None:
    kubelet = started(rig)
    rig.api.add_claim("default", "light-c-npu-x7k2p", UID_A, [result("npu-core-2")])
    with rig.api.lock:
        rig.api.claims[("default", "light-c-npu-x7k2p")]["metadata"]["annotations"] = {
            "resource.kubernetes.io/pod-claim-name": "npu"
        }
    _prepare(kubelet, "light-c-npu-x7k2p", UID_A)
    document = json.loads(metadata_file(rig, "light-c-npu-x7k2p").read_text())
    assert document["podClaimName"] == "npu"
    (device,) = spec(rig, UID_A)["devices"]
    (mount,) = [
        m for m in device["containerEdits"]["mounts"] if m["containerPath"].endswith("-metadata.json")
    ]
    assert mount["containerPath"] == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/npu/npu/{DRIVER}-metadata.json"
    )
    # An annotation that could move the mount elsewhere in the container is refused.
    rig.api.add_claim("default", "edited", UID_B, [result("npu-core-0")])
    with rig.api.lock:
        rig.api.claims[("default", "edited")]["metadata"]["annotations"] = {
            "resource.kubernetes.io/pod-claim-name": "../../etc"
        }
    error = kubelet.prepare([("default", "edited", UID_B)]).claims[UID_B].error
    assert "is not a pod's claim name (a DNS label)" in error


def test_a_deleted_file_is_written_again_and_a_namesake_keeps_its_file(rig: DriverRig) -> None:
    kubelet = started(rig)
    rig.api.add_claim("default", "detector", UID_A, [result("npu-core-2")])
    _prepare(kubelet, "detector", UID_A)
    path = metadata_file(rig, "detector")
    path.unlink()
    _prepare(kubelet, "detector", UID_A)  # a retry (or a second pod of the claim) restores it
    assert path.exists()
    # The claim is deleted and re-created under another uid; the new one is prepared before the
    # kubelet unprepares the old one: the old one's unprepare leaves the new file alone.
    rig.api.add_claim("default", "detector", UID_B, [result("npu-core-0")])
    shutil.rmtree(path.parent.parent)
    _prepare(kubelet, "detector", UID_B)
    assert kubelet.unprepare([("default", "detector", UID_A)]).claims[UID_A].error == ""
    assert json.loads(path.read_text())["metadata"]["uid"] == UID_B


def test_a_workload_reads_its_cores_from_the_metadata_file_with_the_env_removed(
    rig: DriverRig, tmp_path: Path
) -> None:
    """The container as the runtime builds it from the CDI device: a board's root, the metadata
    mount at its container path, and none of the device's RKNN_NPU_* variables."""
    kubelet = started(rig)
    rig.api.add_claim("default", "detector", UID_A, [result("npu-core-0"), result("npu-core-1")])
    _prepare(kubelet, "detector", UID_A)
    (device,) = spec(rig, UID_A)["devices"]
    container = tmp_path / "container"
    make_host("rk3588-drm", container)
    for mount in device["containerEdits"]["mounts"]:
        if mount["containerPath"].endswith("-metadata.json"):
            target = container / mount["containerPath"].lstrip("/")
            target.parent.mkdir(parents=True)
            shutil.copyfile(mount["hostPath"], target)
    target = find_npu(load_settings({"RKNNLAUNCH_ROOT": str(container)}))  # no RKNN_NPU_* at all
    assert target.allocation.cores == {0, 1} and target.allocation.mask == 3
    assert target.allocation.source.startswith("metadata file ")
    assert "default/detector/" + UID_A in target.allocation.source
    print(f"\nFIGURE workload cores from the metadata file, env removed: {sorted(target.allocation.cores)}")
