"""Fixtures for the device plugin tests: a fixture host, a fake kubelet and the real plugin process."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakekubelet import FakeKubelet, PluginProcess, Rig, RigFactory

from fakehost import make_host


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

    try:
        yield build
    finally:
        for rig in made:
            rig.plugin.stop()
            rig.kubelet.stop()
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    for rig in made:
        # --log-format json means every line is JSON, gRPC's own chatter included.
        stray = [line["msg"] for line in rig.plugin.lines if line.get("level") == "raw"]
        assert not stray, f"plugin wrote non-JSON lines: {stray}"
