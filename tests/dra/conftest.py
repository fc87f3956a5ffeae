"""Fixtures for the DRA driver tests: a fixture host, the fake API server, the driver in a thread
(its real sockets and the real `kubernetes` client) and the kubelet stub."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fakeapi import FakeApiServer
from kubeletstub import KubeletStub

from fakehost import make_host
from rknpu_dra_driver._cli import run
from rknpu_dra_driver._settings import DraSettings
from rknpu_serverkit import StopEvent

NODE = "node-a"
DRIVER = "npu.rockchip.com"


@dataclass
class DriverRig:
    root: Path
    api: FakeApiServer
    settings: DraSettings
    stop: StopEvent = field(default_factory=StopEvent)
    thread: threading.Thread | None = None
    result: list[int] = field(default_factory=list)

    @property
    def cdi_dir(self) -> Path:
        return self.settings.cdi_dir

    @property
    def plugin_dir(self) -> Path:
        return self.settings.resolved_plugin_dir

    @property
    def host_root(self) -> Path:
        return self.settings.host_root

    def start(self) -> KubeletStub:
        self.stop = StopEvent()
        self.result = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(run(self.settings, self.stop)), daemon=True
        )
        self.thread.start()
        kubelet = KubeletStub(self.settings.registration_dir / f"{DRIVER}-reg.sock")
        kubelet.register()
        return kubelet

    def end(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)
            assert not self.thread.is_alive(), "the driver did not stop"


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    api = FakeApiServer().start()
    api.add_node(NODE)
    yield api
    api.stop()


@pytest.fixture
def rig(fake_api: FakeApiServer) -> Iterator[DriverRig]:
    # Unix socket paths are limited to 107 bytes: keep the folder short.
    root = Path(tempfile.mkdtemp(prefix="rkdra-", dir="/tmp"))
    make_host("rk3588-drm", root / "host")
    settings = DraSettings(
        host_root=root / "host",
        node_name=NODE,
        driver_name=DRIVER,
        kubeconfig=str(fake_api.kubeconfig(root / "kubeconfig")),
        registration_dir=root / "registry",
        plugin_dir=root / "plugin",
        cdi_dir=root / "cdi",
        api_timeout=1.0,
        health_interval=0.1,
    )
    made = DriverRig(root, fake_api, settings)
    yield made
    made.end()
    shutil.rmtree(root, ignore_errors=True)
