"""Fixtures for the device plugin tests: a fixture host, a fake kubelet and the real plugin process."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fakekubelet import FakeKubelet, PluginProcess

from fakehost import make_host
from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb
from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc


@dataclass
class Rig:
    """One fixture host + fake kubelet + plugin process. ``registration`` is the first Register."""

    root: Path
    host_root: Path
    kubelet: FakeKubelet
    plugin: PluginProcess
    registration: pb.RegisterRequest | None = None
    _stubs: list[pb_grpc.DevicePluginStub] = field(default_factory=list)

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet.plugin_dir

    def stub(self) -> pb_grpc.DevicePluginStub:
        assert self.registration is not None
        return self.kubelet.plugin_stub(self.registration.endpoint)


RigFactory = Callable[..., Rig]


@pytest.fixture
def rig_factory() -> Iterator[RigFactory]:
    """``rig_factory("rk3588-drm", "--mode", "shared", register=True)`` -> a running Rig."""
    made: list[Rig] = []
    roots: list[Path] = []

    def build(
        host: str | None,
        *args: str,
        register: bool = True,
        kubelet: bool = True,
        env: dict[str, str] | None = None,
    ) -> Rig:
        # Unix socket paths are limited to 107 bytes: keep the folder short.
        root = Path(tempfile.mkdtemp(prefix="rkdp-", dir="/tmp"))
        roots.append(root)
        host_root = root / "host"
        if host is None:
            (host_root / "dev").mkdir(parents=True)
        else:
            make_host(host, host_root)
        fake = FakeKubelet(root / "dp")
        if kubelet:
            fake.start()
        else:
            fake.plugin_dir.mkdir(parents=True)
        plugin = PluginProcess(host_root, fake.plugin_dir, *args, env=env)
        rig = Rig(root, host_root, fake, plugin)
        made.append(rig)
        if register:
            rig.registration = fake.wait_registration()[1]
        return rig

    yield build
    for rig in made:
        rig.plugin.stop()
        rig.kubelet.stop()
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)
