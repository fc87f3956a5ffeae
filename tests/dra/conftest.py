"""Fixtures for the DRA driver tests: a fixture host, the fake API server and the driver rig."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from drarig import DRIVER, NODE, DriverRig
from fakeapi import FakeApiServer

from fakehost import make_host
from rknpu_dra_driver._settings import DraSettings


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
        api_timeout=5.0,
        health_interval=0.1,
        instance_id="",
        # The contract tests pin the per-core slice; test_dra_allocation_layouts.py plays "auto"
        # against API servers that keep or drop the partitionable fields.
        slice_layout="per-core",
    )
    made = DriverRig(root, fake_api, settings)
    yield made
    made.end()
    shutil.rmtree(root, ignore_errors=True)
