"""The pod-resources client against a real gRPC server on a unix socket (the fake kubelet)."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from fake_podresources import Assignment, PodResourcesServer

from rknpu_device_plugin._kubeapi.podresources.v1 import api_pb2
from rknpu_device_plugin.telemetry._podresources import (
    CoreHolder,
    PodResourcesClient,
    PodResourcesError,
    holders_from_response,
)
from rknpu_node._policy import core_of


@pytest.mark.parametrize(
    ("device_id", "core"),
    [
        ("npu-core-0", 0),
        ("npu-core-2", 2),
        ("npu-core-1-0", 1),  # shared mode: replica 0 of core 1
        ("npu-core-2-15", 2),
        ("npu-core-", None),
        ("npu-core-1-", None),
        ("npu-core-x", None),
        ("gpu-0", None),
        ("NPU-CORE-1", None),
        ("", None),
    ],
)
def test_device_ids_map_to_cores(device_id: str, core: int | None) -> None:
    # The plugin's own parser (one owner of the ID format) is what attribution uses.
    assert core_of(device_id) == core


def test_response_is_filtered_by_resource_and_deduplicated() -> None:
    response = api_pb2.ListPodResourcesResponse()
    pod = response.pod_resources.add(name="yolo-0", namespace="vision")
    app = pod.containers.add(name="app")
    # Two replicas of core 1 in one container (shared mode) count as one holder of core 1.
    app.devices.add(resource_name="rockchip.com/npu", device_ids=["npu-core-1-0", "npu-core-1-1"])
    app.devices.add(resource_name="rockchip.com/npu", device_ids=["npu-core-0"])
    app.devices.add(resource_name="nvidia.com/gpu", device_ids=["npu-core-2"])
    app.devices.add(resource_name="rockchip.com/npu", device_ids=["bogus"])
    response.pod_resources.add(name="idle", namespace="default").containers.add(name="c")
    assert holders_from_response(response, "rockchip.com/npu") == (
        CoreHolder(0, "vision", "yolo-0", "app"),
        CoreHolder(1, "vision", "yolo-0", "app"),
    )


def test_cores_from_dra_claims_are_attributed_by_driver_and_device_name() -> None:
    """Under DRA the kubelet lists a container's claims in ``dynamic_resources`` (no ``devices``)."""
    response = api_pb2.ListPodResourcesResponse()
    container = response.pod_resources.add(name="detector", namespace="vision").containers.add(name="app")
    claim = container.dynamic_resources.add(claim_name="detector-npu-x7", claim_namespace="vision")
    pair = claim.claim_resources.add(
        driver_name="npu.rockchip.com", pool_name="node-a", device_name="npu-cores-0-1"
    )
    pair.cdi_devices.add(name="npu.rockchip.com/claim=0b9a-npu")
    claim.claim_resources.add(driver_name="gpu.example.com", pool_name="node-a", device_name="npu-core-2")
    claim.claim_resources.add(driver_name="npu.rockchip.com", pool_name="node-a", device_name="bogus")
    other = response.pod_resources.add(name="light", namespace="default").containers.add(name="c")
    other.dynamic_resources.add(claim_name="shared").claim_resources.add(
        driver_name="npu.rockchip.com", pool_name="node-a", device_name="npu-core-2"
    )
    assert holders_from_response(response, "rockchip.com/npu") == (
        CoreHolder(0, "vision", "detector", "app"),
        CoreHolder(1, "vision", "detector", "app"),
        CoreHolder(2, "default", "light", "c"),
    )
    assert holders_from_response(response, "rockchip.com/npu", dra_driver=None) == ()
    assert holders_from_response(response, "rockchip.com/npu", dra_driver="npu.example.org") == ()


def test_soc_templated_resource_name_matches_every_soc() -> None:
    """The plugin may offer rockchip.com/npu-{soc}; it passes the template, kubelet the real name."""
    response = api_pb2.ListPodResourcesResponse()
    container = response.pod_resources.add(name="p", namespace="n").containers.add(name="c")
    container.devices.add(resource_name="rockchip.com/npu-rk3588", device_ids=["npu-core-2"])
    container.devices.add(resource_name="rockchip.com/npu-rk3588-extra", device_ids=["npu-core-1"])
    container.devices.add(resource_name="rockchip.com/npu", device_ids=["npu-core-0"])
    assert holders_from_response(response, "rockchip.com/npu-{soc}") == (CoreHolder(2, "n", "p", "c"),)
    assert holders_from_response(response, "rockchip.com/npu") == (CoreHolder(0, "n", "p", "c"),)


def test_client_lists_holders_and_sees_changes(pod_resources: PodResourcesServer) -> None:
    pod_resources.fake.set(
        [
            Assignment("vision", "yolo-a", "infer", ["npu-core-0", "npu-core-1"]),
            Assignment("vision", "yolo-b", "infer", ["npu-core-2"]),
            Assignment("vision", "yolo-b", "infer", ["gpu-1"], resource="example.com/gpu"),
        ]
    )
    client = PodResourcesClient(pod_resources.socket_path, "rockchip.com/npu")
    try:
        assert client.list_holders() == (
            CoreHolder(0, "vision", "yolo-a", "infer"),
            CoreHolder(1, "vision", "yolo-a", "infer"),
            CoreHolder(2, "vision", "yolo-b", "infer"),
        )
        pod_resources.fake.set([Assignment("batch", "job", "worker", ["npu-core-1-0", "npu-core-1-3"])])
        assert client.list_holders() == (CoreHolder(1, "batch", "job", "worker"),)
        pod_resources.fake.set([])
        assert client.list_holders() == ()
    finally:
        client.close()


def test_missing_socket_fails_at_once(tmp_path: object) -> None:
    client = PodResourcesClient("/nonexistent/pod-resources/kubelet.sock")
    started = time.monotonic()
    with pytest.raises(PodResourcesError, match="not there"):
        client.list_holders()
    assert time.monotonic() - started < 0.5
    client.close()


def test_kubelet_error_status_is_reported(pod_resources: PodResourcesServer) -> None:
    pod_resources.fake.fail_with = grpc.StatusCode.UNAVAILABLE
    client = PodResourcesClient(pod_resources.socket_path)
    try:
        with pytest.raises(PodResourcesError, match="UNAVAILABLE"):
            client.list_holders()
    finally:
        client.close()


def test_wedged_kubelet_times_out(pod_resources: PodResourcesServer) -> None:
    release = threading.Event()
    pod_resources.fake.hold = release
    client = PodResourcesClient(pod_resources.socket_path, timeout=0.2)
    started = time.monotonic()
    try:
        with pytest.raises(PodResourcesError, match="DEADLINE_EXCEEDED"):
            client.list_holders()
        assert time.monotonic() - started < 2.0
    finally:
        release.set()
        client.close()


def test_client_recovers_after_kubelet_restart(pod_resources: PodResourcesServer) -> None:
    pod_resources.fake.set([Assignment("ns", "p", "c", ["npu-core-0"])])
    client = PodResourcesClient(pod_resources.socket_path, timeout=1.0)
    try:
        assert client.list_holders() == (CoreHolder(0, "ns", "p", "c"),)
        pod_resources.stop()  # kubelet going down removes its socket
        with pytest.raises(PodResourcesError):
            client.list_holders()
        # A new kubelet on the same path: the next call must not wait out gRPC's reconnect back-off.
        restarted = PodResourcesServer(pod_resources.directory)
        restarted.fake.set([Assignment("ns", "p2", "c", ["npu-core-1"])])
        restarted.start()
        try:
            assert client.list_holders() == (CoreHolder(1, "ns", "p2", "c"),)
        finally:
            restarted.stop()
    finally:
        client.close()
