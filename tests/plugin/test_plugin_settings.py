"""Plugin settings: flags override RKNPU_PLUGIN_* env, validation gives a fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from rknnlaunch import UsageError
from rknpu_device_plugin._settings import parse_settings


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = parse_settings([])
    assert settings.host_root == Path("/")
    assert settings.device_plugin_dir == Path("/var/lib/kubelet/device-plugins")
    assert settings.resource_name == "rockchip.com/npu" and settings.mode == "core"
    assert settings.metrics_address is None and not settings.fail_on_init_error and not settings.cdi
    assert settings.resolved_socket_name("rk3588") == "rockchip.com-npu.sock"


def test_env_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RKNPU_PLUGIN_MODE", "shared")
    monkeypatch.setenv("RKNPU_PLUGIN_REPLICAS", "4")
    monkeypatch.setenv("RKNPU_PLUGIN_FAIL_ON_INIT_ERROR", "true")
    monkeypatch.setenv("RKNPU_PLUGIN_LOG_LEVEL", "DEBUG")
    settings = parse_settings(["--replicas", "2", "--no-fail-on-init-error"])
    assert settings.mode == "shared" and settings.replicas == 2
    assert settings.fail_on_init_error is False and settings.log_level == "debug"


def test_operator_modes_from_flags_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RKNPU_PLUGIN_EXTRA_DEVICE", "/dev/rga, /dev/mpp_service,/dev/rga")
    monkeypatch.setenv("RKNPU_PLUGIN_PROBE_MODEL", "/opt/rknpu-probe/probe-{soc}.rknn")
    settings = parse_settings(["--mode", "whole", "--host-librknnrt", "/usr/lib/librknnrt.so"])
    assert settings.mode == "whole" and settings.extra_device == ("/dev/rga", "/dev/mpp_service")
    assert settings.host_librknnrt == "/usr/lib/librknnrt.so"
    assert settings.resolved_probe_model("rk3576") == Path("/opt/rknpu-probe/probe-rk3576.rknn")
    assert settings.probe_interval == 300 and settings.probe_timeout == 20


def test_per_soc_resource_name() -> None:
    settings = parse_settings(["--resource-name", "rockchip.com/npu-{soc}"])
    assert settings.resolved_resource_name("rk3576") == "rockchip.com/npu-rk3576"
    assert settings.resolved_socket_name("rk3576") == "rockchip.com-npu-rk3576.sock"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replicas", "2"], "replicas only apply to --mode shared"),
        (["--fail-requests-greater-than-one"], "only applies to --mode shared"),
        (["--resource-name", "npu"], "not an extended resource name"),
        (["--soc", "rk9999"], "unknown SoC"),
        (["--socket-name", "kubelet.sock"], "plain file name"),
        (["--health-interval", "0"], "greater than 0"),
        (["--health-interval", "soon"], "invalid float value"),  # argparse errors: UsageError too
        (["--bogus"], "unrecognized arguments"),
        (["--mode", "all"], "invalid choice"),
        (["--extra-device", "/dev/rga,rga"], "'rga' is not a device node path under /dev"),
        (["--extra-device", "/dev/../etc/passwd"], "not a device node path"),
        (["--host-librknnrt", "librknnrt.so"], "absolute host path"),
        (["--probe-model", "/opt/probe.onnx"], "must name an .rknn model"),
        (["--probe-interval", "0"], "greater than 0"),
        (["--probe-timeout", "-1"], "greater than 0"),
    ],
)
def test_invalid_settings_raise_usage_error(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        parse_settings(argv)
    assert caught.value.fix is not None and caught.value.exit_code == 2
