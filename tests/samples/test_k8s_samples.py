"""samples/k8s: the promises the manifests make (schemas are checked by .ci/checks/manifests.sh)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML comes with the dev extra (kubernetes-validate)")

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "samples" / "k8s"
NPU_RESOURCES = ("rockchip.com/npu", "huawei.com/Ascend310")
MANIFESTS = sorted(K8S.rglob("*.yaml"))


def _docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
    return spec


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.relative_to(K8S)}:{doc['metadata']['name']}", doc)
        for path in MANIFESTS
        for doc in _docs(path)
        if doc["kind"] in ("Pod", "Deployment", "Job", "DaemonSet", "StatefulSet")
    ]


WORKLOADS = _workloads()


def _image_user() -> int:
    users = re.findall(r"^USER (\d+)", (REPO / "images" / "runtime" / "Dockerfile").read_text(), re.MULTILINE)
    return int(users[-1])


def _npu(container: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    resources = container.get("resources", {})
    for name in NPU_RESOURCES:
        if name in resources.get("limits", {}) or name in resources.get("requests", {}):
            return name, resources.get("requests", {}), resources.get("limits", {})
    return None


def test_there_are_samples() -> None:
    assert {"pod.yaml", "deployment.yaml", "job-bench.yaml"} <= {p.name for p in MANIFESTS}
    assert len(WORKLOADS) >= 5


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[n for n, _ in WORKLOADS])
def test_npu_workloads_are_unprivileged_non_root_with_exact_limits(name: str, doc: dict[str, Any]) -> None:
    spec = _pod_spec(doc)
    pod_security = spec.get("securityContext", {})
    assert pod_security.get("runAsNonRoot") is True
    assert pod_security.get("runAsUser", 0) != 0
    assert pod_security.get("supplementalGroups"), "the device nodes' group must be granted"
    assert not any(spec.get(key) for key in ("hostPID", "hostIPC", "hostNetwork"))
    npu_containers = [c for c in spec["containers"] if _npu(c)]
    assert npu_containers, f"{name} requests no NPU"
    for container in npu_containers:
        found = _npu(container)
        assert found is not None
        resource, requests, limits = found
        assert requests.get(resource) == limits.get(resource) and int(limits[resource]) >= 1
        security = container.get("securityContext", {})
        assert security.get("privileged") is False
        assert security.get("allowPrivilegeEscalation") is False
        assert security.get("capabilities", {}).get("drop") == ["ALL"]
        assert "procMount" not in security


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[n for n, _ in WORKLOADS])
def test_our_images_keep_the_preflight_entrypoint_and_user(name: str, doc: dict[str, Any]) -> None:
    spec = _pod_spec(doc)
    for container in spec["containers"]:
        found = _npu(container)
        if found is None or found[0] != "rockchip.com/npu":
            continue
        assert "command" not in container, "`command:` would replace `rknnlaunch run --` (the preflight)"
        assert spec["securityContext"]["runAsUser"] == _image_user()
        assert container["securityContext"].get("readOnlyRootFilesystem") is True


def _one(path: str) -> dict[str, Any]:
    (doc,) = _docs(K8S / path)
    return doc


def _npu_count(doc: dict[str, Any]) -> int:
    (container,) = _pod_spec(doc)["containers"]
    return int(container["resources"]["limits"]["rockchip.com/npu"])


def test_pod_deployment_and_job_request_1_1x3_and_3_cores() -> None:
    assert _npu_count(_one("pod.yaml")) == 1
    deployment = _one("deployment.yaml")
    assert deployment["spec"]["replicas"] == 3 and _npu_count(deployment) == 1
    job = _one("job-bench.yaml")
    assert _npu_count(job) == 3
    script = " ".join(_pod_spec(job)["containers"][0]["args"])
    assert "rknnlaunch bench" in script and "--json" in script


def test_heterogeneous_sample_places_by_resource_request_alone() -> None:
    docs = _docs(K8S / "heterogeneous" / "street-detect.yaml")
    assert [d["kind"] for d in docs] == ["Deployment", "Deployment"]
    apps, types, resources = set(), set(), set()
    for doc in docs:
        labels = doc["spec"]["template"]["metadata"]["labels"]
        apps.add(labels["app.kubernetes.io/name"])
        types.add(labels["rknnlaunch.io/npu-type"])
        selector = doc["spec"]["selector"]["matchLabels"]
        assert selector["rknnlaunch.io/npu-type"] == labels["rknnlaunch.io/npu-type"]
        spec = _pod_spec(doc)
        assert "nodeSelector" not in spec and "affinity" not in spec and "nodeName" not in spec
        (container,) = spec["containers"]
        found = _npu(container)
        assert found is not None
        resources.add(found[0])
    assert apps == {"street-detect"}  # one app...
    assert types == {"rockchip-rk3588", "huawei-ascend310b"}  # ...told apart by a label
    assert resources == {"rockchip.com/npu", "huawei.com/Ascend310"}  # ...placed by what it requests
