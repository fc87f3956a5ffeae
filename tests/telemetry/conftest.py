"""Fixtures for the telemetry tests: a fake kubelet pod-resources server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_podresources import PodResourcesServer


@pytest.fixture
def pod_resources() -> Iterator[PodResourcesServer]:
    """A running fake pod-resources API; `.fake.set([...])` sets who holds what."""
    server = PodResourcesServer().start()
    try:
        yield server
    finally:
        server.cleanup()
