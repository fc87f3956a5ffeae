"""Shared pytest fixtures: fixture host trees from fakehost.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from fakehost import make_host
from rknnlaunch.npu import HostRoot

# realchecks: the table of real-thing (slow) checks and CI's --real-checks-strict; pytester tests it.
pytest_plugins = ["realchecks", "pytester"]

# A loaded 2-core CI machine makes single examples slow now and then: judge properties, not speed.
settings.register_profile("rknnlaunch", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rknnlaunch")


@pytest.fixture
def host_factory(tmp_path: Path) -> Callable[[str], HostRoot]:
    """`host_factory("rk3588-drm")` builds that fixture host under tmp_path and returns its root."""

    def build(name: str) -> HostRoot:
        return make_host(name, tmp_path / name)

    return build
