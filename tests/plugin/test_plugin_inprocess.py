"""The plugin's parts wired in-process against the fake kubelet: supervisor, service, resource manager.

As intel-device-plugins-for-kubernetes' tests do: a real gRPC Registration server on a temporary
socket, the plugin's own Supervisor serving a real DevicePluginService over a real unix socket,
and events (a socket deleted, kubelet restarted, a device node gone) awaited, not slept on. The
process-level tests (test_plugin_process.py) keep covering flags, signals and logs.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from fakekubelet import DeviceStream, FakeKubelet, all_health

from fakehost import make_host
from rknnlaunch.npu import HostRoot
from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb
from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from rknpu_device_plugin.kubelet._registration import KubeletRegistration
from rknpu_device_plugin.kubelet._service import DevicePluginService
from rknpu_node._events import NullEvents
from rknpu_node._manager import ResourceManager
from rknpu_serverkit import Endpoint, Supervisor

SOCKET = "rknpu.sock"
RESOURCE = "rockchip.com/npu"


@dataclass
class InProcessPlugin:
    host_root: Path
    kubelet: FakeKubelet
    resources: ResourceManager
    supervisor: Supervisor

    def stub(self) -> pb_grpc.DevicePluginStub:
        return self.kubelet.plugin_stub(SOCKET)


@pytest.fixture
def plugin() -> Iterator[InProcessPlugin]:
    root = Path(tempfile.mkdtemp(prefix="rkip-", dir="/tmp"))  # unix socket paths are short
    host = make_host("rk3588-drm", root / "host")
    kubelet = FakeKubelet(root / "dp")
    kubelet.start()
    events = NullEvents()
    resources = ResourceManager(HostRoot(host.root), events, health_interval=0.2)
    resources.scan()
    service = DevicePluginService(resources, events, "core", cdi=False)
    supervisor = Supervisor(
        kubelet.plugin_dir,
        lambda: Endpoint(kubelet.plugin_dir, SOCKET, RESOURCE),
        service,
        KubeletRegistration(events),
    )
    resources.on_ready = supervisor.wake
    stop = threading.Event()
    threads = [
        threading.Thread(target=resources.run, args=(stop,), daemon=True),
        threading.Thread(target=supervisor.run, args=(stop,), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        yield InProcessPlugin(Path(host.root), kubelet, resources, supervisor)
    finally:
        stop.set()
        resources.close()
        supervisor.wake()
        for thread in threads:
            thread.join(10)
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert not any(thread.is_alive() for thread in threads), "plugin threads outlived stop"


def test_registers_with_the_kubelet_and_serves_its_devices(plugin: InProcessPlugin) -> None:
    _, request = plugin.kubelet.wait_registration()
    assert (request.version, request.endpoint, request.resource_name) == ("v1beta1", SOCKET, RESOURCE)
    assert request.options.get_preferred_allocation_available
    stream = DeviceStream(plugin.stub())
    devices, _ = stream.wait_for(all_health("Healthy"))
    assert sorted(device_id for device_id, _ in devices) == ["npu-core-0", "npu-core-1", "npu-core-2"]
    stream.cancel()


def test_deleted_plugin_socket_is_served_and_registered_again(plugin: InProcessPlugin) -> None:
    plugin.kubelet.wait_registration()
    (plugin.kubelet.plugin_dir / SOCKET).unlink()
    _, request = plugin.kubelet.wait_registration()
    assert request.endpoint == SOCKET
    answer = plugin.stub().GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert answer.get_preferred_allocation_available


def test_kubelet_restart_is_followed_by_a_new_registration(plugin: InProcessPlugin) -> None:
    plugin.kubelet.wait_registration()
    for _ in range(3):
        plugin.kubelet.restart()  # deletes every socket, ours included, then serves kubelet.sock
        plugin.kubelet.wait_registration()
    response = plugin.stub().Allocate(
        pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["npu-core-1"])]),
        timeout=5,
    )
    assert response.container_responses[0].envs["RKNN_NPU_CORE_MASK"] == "2"


def test_lost_render_node_turns_every_core_unhealthy_and_allocate_refuses(plugin: InProcessPlugin) -> None:
    plugin.kubelet.wait_registration()
    stream = DeviceStream(plugin.stub())
    stream.wait_for(all_health("Healthy"))
    (plugin.host_root / "dev/dri/renderD129").unlink()
    stream.wait_for(all_health("Unhealthy"))
    with pytest.raises(grpc.RpcError) as caught:
        plugin.stub().Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["npu-core-0"])]),
            timeout=5,
        )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    stream.cancel()


def test_preferred_allocation_keeps_one_context_core_sets(plugin: InProcessPlugin) -> None:
    plugin.kubelet.wait_registration()
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=["npu-core-0", "npu-core-1", "npu-core-2"], allocation_size=2
            )
        ]
    )
    answer = plugin.stub().GetPreferredAllocation(request, timeout=5)
    assert sorted(answer.container_responses[0].deviceIDs) == ["npu-core-0", "npu-core-1"]
