"""The resource manager's discovery scan, in-process (the plugin process tests cover the rest)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from rknnlaunch.npu import HostRoot
from rknpu_node._events import NullEvents
from rknpu_node._manager import ResourceManager


def test_unknown_soc_error_names_the_plugins_soc_flag(
    host_factory: Callable[[str], HostRoot], caplog: pytest.LogCaptureFixture
) -> None:
    from fakehost import device_tree

    host = host_factory("rk3588-drm")
    device_tree(host.root, b"acme,board\0acme,soc9\0")
    with caplog.at_level(logging.ERROR, logger="rknpu_device_plugin"):
        ResourceManager(host, NullEvents()).scan()
    errors = [getattr(record, "fields", {}).get("error", "") for record in caplog.records]
    # The shared model's fix names the SDK's RKNN_NPU_SOC; the plugin's knob is --soc.
    assert any("acme,soc9" in error and "--soc" in error for error in errors), errors
    assert not any("RKNN_NPU_SOC" in error for error in errors)
