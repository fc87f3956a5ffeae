"""The operator modes, process-level against the fake kubelet: --mode whole, --extra-device,
--host-librknnrt (Allocate, CDI spec, log lines)."""

from __future__ import annotations

import json

from fakekubelet import DeviceStream, PluginProcess, Rig, RigFactory, allocate, preferred

from fakehost import char_device, write


def test_whole_mode_offers_one_device_with_every_core(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", "--mode", "whole")
    assert DeviceStream(rig.stub()).next() == [("npu-cores-0-1-2", "Healthy")]
    assert preferred(rig.stub(), ["npu-cores-0-1-2"], [], 1) == ["npu-cores-0-1-2"]
    container = allocate(rig.stub(), ["npu-cores-0-1-2"]).container_responses[0]
    assert container.envs["RKNN_NPU_CORE_MASK"] == "7" and container.envs["RKNN_NPU_CORES"] == "0,1,2"
    assert [d.host_path for d in container.devices] == ["/dev/dri/card1", "/dev/dri/renderD129"]
    line = rig.plugin.wait_log(lambda entry: entry["msg"] == "allocated")
    assert line["ids"] == ["npu-cores-0-1-2"] and line["mask"] == 7


def test_whole_mode_on_a_fused_rk3582_names_two_cores(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3576", "--mode", "whole")
    assert DeviceStream(rig.stub()).next() == [("npu-cores-0-1", "Healthy")]
    assert allocate(rig.stub(), ["npu-cores-0-1"]).container_responses[0].envs["RKNN_NPU_CORE_MASK"] == "3"


def _restart_on(rig: Rig, *args: str) -> None:
    """Restart the plugin (after a test changed the host) and wait for its registration."""
    rig.plugin.stop()
    rig.plugin = PluginProcess(rig.host_root, rig.plugin_dir, *args)
    rig.registration = rig.kubelet.wait_registration()[1]


def test_extra_devices_are_handed_in_when_present_and_said_once_when_absent(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", register=False)
    char_device(rig.host_root, "/dev/rga", 10, 58)  # RGA present, MPP not (no VPU driver loaded)
    _restart_on(rig, "--extra-device", "/dev/rga,/dev/mpp_service")
    container = allocate(rig.stub(), ["npu-core-0"]).container_responses[0]
    assert [d.host_path for d in container.devices] == ["/dev/dri/card1", "/dev/dri/renderD129", "/dev/rga"]
    assert all(d.permissions == "rw" for d in container.devices)
    char_device(rig.host_root, "/dev/mpp_service", 241, 0)
    rig.plugin.wait_log(
        lambda e: e["msg"].startswith("extra device appeared") and e["path"] == "/dev/mpp_service"
    )
    paths = [d.host_path for d in allocate(rig.stub(), ["npu-core-1"]).container_responses[0].devices]
    assert paths[-2:] == ["/dev/rga", "/dev/mpp_service"]
    absent = [line for line in rig.plugin.lines if line["msg"].startswith("extra device not on this node")]
    assert [(line["level"], line["path"]) for line in absent] == [("warning", "/dev/mpp_service")]


def test_host_librknnrt_is_mounted_read_only_with_its_source(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", register=False)
    write(rig.host_root, "/usr/lib/librknnrt.so", b"\x7fELF librknnrt version: 2.3.2 (x)\0")
    cdi_dir = rig.root / "cdi"
    _restart_on(rig, "--host-librknnrt", "/usr/lib/librknnrt.so", "--cdi", "--cdi-dir", str(cdi_dir))
    container = allocate(rig.stub(), ["npu-core-0"]).container_responses[0]
    assert container.envs["RKNN_NPU_LIBRKNNRT_SOURCE"] == "host:/usr/lib/librknnrt.so"
    assert [(m.container_path, m.host_path, m.read_only) for m in container.mounts][-1] == (
        "/usr/lib/librknnrt.so",
        "/usr/lib/librknnrt.so",
        True,
    )
    spec = json.loads((cdi_dir / "rockchip.com-npu.json").read_text())
    mounts = spec["devices"][0]["containerEdits"]["mounts"]
    assert mounts[-1]["containerPath"] == "/usr/lib/librknnrt.so" and "ro" in mounts[-1]["options"]


def test_host_librknnrt_absent_is_not_mounted(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", "--host-librknnrt", "/usr/lib/librknnrt.so")
    rig.plugin.wait_log(lambda e: e["msg"].startswith("host librknnrt not on this node"))
    container = allocate(rig.stub(), ["npu-core-0"]).container_responses[0]
    assert "RKNN_NPU_LIBRKNNRT_SOURCE" not in container.envs
    assert all(m.container_path != "/usr/lib/librknnrt.so" for m in container.mounts)
