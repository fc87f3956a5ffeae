"""The DRA driver test rig: the driver in a thread (its real sockets and the real `kubernetes`
client) on a fixture host, talking to the fake API server, reached through the kubelet stub."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakeapi import FakeApiServer
from kubeletstub import KubeletStub

from fakehost import make_host
from rknpu_dra_driver._cli import run
from rknpu_dra_driver._settings import DraSettings
from rknpu_serverkit import StopEvent

NODE = "node-a"
DRIVER = "npu.rockchip.com"


def dra_settings(root: Path, api: FakeApiServer, **overrides: Any) -> DraSettings:
    """The rigs' settings (the one factory): a fixture RK3588 made under ``root``, the fake API
    server's kubeconfig, short folders (unix socket paths are limited to 107 bytes), a quick
    health loop, the per-core layout; ``overrides`` change any field. The kubelet's two folders
    are made first, as the kubelet makes them: the driver never creates them."""
    make_host("rk3588-drm", root / "host")
    for folder in ("registry", "plugin"):
        (root / folder).mkdir(exist_ok=True)
    fields: dict[str, Any] = {
        "host_root": root / "host",
        "node_name": NODE,
        "driver_name": DRIVER,
        "kubeconfig": str(api.kubeconfig(root / "kubeconfig")),
        "registration_dir": root / "registry",
        "plugin_dir": root / "plugin",
        "cdi_dir": root / "cdi",
        "api_timeout": 5.0,
        "health_interval": 0.1,
        "instance_id": "",
        "slice_layout": "per-core",
    }
    return DraSettings(**{**fields, **overrides})


def driver_argv(settings: DraSettings) -> list[str]:
    """The command line of a driver process run with ``settings`` (`dra_settings`), JSON logs."""
    return [
        sys.executable,
        "-m",
        "rknpu_dra_driver",
        f"--host-root={settings.host_root}",
        f"--node-name={NODE}",
        f"--kubeconfig={settings.kubeconfig}",
        f"--registration-dir={settings.registration_dir}",
        f"--plugin-dir={settings.resolved_plugin_dir}",
        f"--cdi-dir={settings.cdi_dir}",
        f"--slice-layout={settings.slice_layout}",
        "--log-format=json",
    ]


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
        self.launch()
        kubelet = KubeletStub(self.settings.registration_dir, DRIVER)
        kubelet.register()
        return kubelet

    def launch(self) -> None:
        """Start the driver without registering it (`start` registers it too)."""
        self.stop = StopEvent()
        self.result = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(run(self.settings, self.stop)), daemon=True
        )
        self.thread.start()

    def end(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)
            assert not self.thread.is_alive(), "the driver did not stop"
