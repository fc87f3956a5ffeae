"""--vpu: the video blocks offered as rockchip.com/vpu beside the NPU, through the real plugin
process and the fake kubelet (fixture host rk3588-video: tests/fakehost.py `video_blocks`)."""

from __future__ import annotations

import signal

import grpc
import pytest
from fakekubelet import DeviceStream, Rig, RigFactory, allocate, ids_of, preferred

from fakehost import RK3588_DMA_HEAPS
from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb

VIDEO_NODES = ["/dev/mpp_service", "/dev/rga", *(f"/dev/dma_heap/{heap}" for heap in RK3588_DMA_HEAPS)]


def _registrations(rig: Rig, count: int) -> dict[str, pb.RegisterRequest]:
    """The rig's first Register and the next ``count - 1``, by resource name (either may come first)."""
    assert rig.registration is not None
    requests = [rig.registration] + [rig.kubelet.wait_registration()[1] for _ in range(count - 1)]
    return {r.resource_name: r for r in requests}


def test_vpu_registers_its_own_resource_and_hands_in_only_video_nodes(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-video", "--vpu", "--vpu-replicas", "4")
    by_name = _registrations(rig, 2)
    assert set(by_name) == {"rockchip.com/npu", "rockchip.com/vpu"}
    video = by_name["rockchip.com/vpu"]
    assert video.endpoint == "rockchip.com-vpu.sock"
    stub = rig.kubelet.plugin_stub(video.endpoint)

    stream = DeviceStream(stub)
    devices = stream.next()
    assert devices == [(f"vpu-{i}", "Healthy") for i in range(4)]

    assert preferred(stub, ["vpu-3", "vpu-1", "vpu-2"], ["vpu-2"], 2) == ["vpu-2", "vpu-3"]
    response = allocate(stub, ["vpu-0"], ["vpu-1", "vpu-2"])
    for container in response.container_responses:
        assert [(d.host_path, d.container_path, d.permissions) for d in container.devices] == [
            (path, path, "rw") for path in VIDEO_NODES
        ]
        assert dict(container.envs) == {}  # no NPU env
        assert not container.mounts
    stream.cancel()

    # The NPU resource is unchanged: its own nodes, never the video ones.
    npu = by_name["rockchip.com/npu"]
    npu_stub = rig.kubelet.plugin_stub(npu.endpoint)
    npu_ids = ids_of(DeviceStream(npu_stub).next() or [])
    npu_paths = [d.host_path for d in allocate(npu_stub, npu_ids[:1]).container_responses[0].devices]
    assert not set(npu_paths) & set(VIDEO_NODES)

    rig.plugin.signal(signal.SIGTERM)
    assert rig.plugin.wait() == 0


def test_vpu_refuses_unknown_ids(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-video", "--vpu")
    by_name = _registrations(rig, 2)
    stub = rig.kubelet.plugin_stub(by_name["rockchip.com/vpu"].endpoint)
    assert len(DeviceStream(stub).next() or []) == 8  # the default replicas
    with pytest.raises(grpc.RpcError) as caught:
        allocate(stub, ["vpu-99"])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "vpu-99" in (caught.value.details() or "")


def test_vpu_without_mpp_offers_only_the_npu(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", "--vpu")
    assert rig.registration is not None and rig.registration.resource_name == "rockchip.com/npu"
    rig.plugin.wait_log(lambda line: str(line.get("msg", "")).startswith("--vpu: no /dev/mpp_service"))
    assert rig.kubelet.no_registration(1.0)


def test_vpu_is_off_by_default(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-video")
    assert rig.registration is not None and rig.registration.resource_name == "rockchip.com/npu"
    assert rig.kubelet.no_registration(1.0)
    assert not (rig.plugin_dir / "rockchip.com-vpu.sock").exists()
