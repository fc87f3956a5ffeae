"""Fixtures for the DRA driver tests: a fixture host, the fake API server and the driver rig."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from drarig import NODE, DriverRig, dra_settings
from fakeapi import FakeApiServer

from fakehost import make_host


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
    settings = dra_settings(
        root,
        fake_api,
        api_timeout=5.0,
        # The contract tests pin the per-core slice; test_dra_allocation_layouts.py plays "auto"
        # against API servers that keep or drop the partitionable fields.
        slice_layout="per-core",
    )
    made = DriverRig(root, fake_api, settings)
    yield made
    made.end()
    shutil.rmtree(root, ignore_errors=True)
