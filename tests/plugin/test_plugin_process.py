"""The real plugin process against a fake kubelet: registration, devices, allocation, health,
kubelet restarts and shutdown."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import grpc
import pytest
from awaiting import PATIENCE
from fakekubelet import DeviceStream, RigFactory, all_health, allocate, ids_of, preferred

from fakehost import char_device
from rknpu_device_plugin._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb

RK3588_IDS = ["npu-core-0", "npu-core-1", "npu-core-2"]


def test_registers_with_v1beta1_options_and_its_own_socket(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm")
    request = rig.registration
    assert request is not None
    assert request.version == "v1beta1"
    assert request.resource_name == "rockchip.com/npu"
    assert request.endpoint == "rockchip.com-npu.sock"
    assert request.options.get_preferred_allocation_available is True
    assert (rig.plugin_dir / request.endpoint).is_socket()
    options = rig.stub().GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert options.get_preferred_allocation_available and not options.pre_start_required
    line = rig.plugin.wait_log(lambda entry: entry["msg"] == "registered with kubelet")
    assert line["resource"] == "rockchip.com/npu" and line["endpoint"] == "rockchip.com-npu.sock"


@pytest.mark.parametrize(
    ("host", "ids"),
    [
        ("rk3588-drm", RK3588_IDS),
        ("rk3588-render128", RK3588_IDS),
        ("rk3588-misc", RK3588_IDS),
        ("rk3576", ["npu-core-0", "npu-core-1"]),
        ("rk3568", ["npu-core-0"]),
    ],
)
def test_lists_one_healthy_device_per_core(rig_factory: RigFactory, host: str, ids: list[str]) -> None:
    rig = rig_factory(host)
    stream = DeviceStream(rig.stub())
    devices = stream.next()
    assert devices == [(device_id, "Healthy") for device_id in ids]
    stream.cancel()


def test_shared_mode_offers_each_core_replicas_times(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3576", "--mode", "shared", "--replicas", "3")
    devices = DeviceStream(rig.stub()).next()
    assert ids_of(devices or []) == [f"npu-core-{c}-{r}" for c in range(2) for r in range(3)]
    response = allocate(rig.stub(), ["npu-core-1-2"])
    assert response.container_responses[0].envs["RKNN_NPU_CORE_MASK"] == "2"


def test_shared_mode_spreads_a_two_unit_request_and_can_refuse_it(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", "--mode", "shared", "--replicas", "2")
    every = [f"npu-core-{c}-{r}" for c in range(3) for r in range(2)]
    chosen = preferred(rig.stub(), every, [], 2)
    assert chosen == ["npu-core-0-0", "npu-core-1-0"]  # two cores, not both shares of core 0
    assert allocate(rig.stub(), chosen).container_responses[0].envs["RKNN_NPU_CORE_MASK"] == "3"
    strict = rig_factory(
        "rk3588-drm", "--mode", "shared", "--replicas", "2", "--fail-requests-greater-than-one"
    )
    with pytest.raises(grpc.RpcError) as refused:
        allocate(strict.stub(), chosen)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "--fail-requests-greater-than-one" in (refused.value.details() or "")
    assert allocate(strict.stub(), ["npu-core-2-1"]).container_responses[0].envs["RKNN_NPU_CORE_MASK"] == "4"


def test_per_soc_resource_name(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3576", "--resource-name", "rockchip.com/npu-{soc}")
    assert rig.registration is not None
    assert rig.registration.resource_name == "rockchip.com/npu-rk3576"
    assert rig.registration.endpoint == "rockchip.com-npu-rk3576.sock"


def test_preferred_allocation_keeps_a_runnable_pair_free(rig_factory: RigFactory) -> None:
    stub = rig_factory("rk3588-drm").stub()
    assert preferred(stub, RK3588_IDS, [], 1) == ["npu-core-2"]
    assert preferred(stub, RK3588_IDS, [], 2) == ["npu-core-0", "npu-core-1"]
    assert preferred(stub, RK3588_IDS, [], 3) == RK3588_IDS
    assert preferred(stub, ["npu-core-0", "npu-core-1"], [], 1) == ["npu-core-0"]
    assert preferred(stub, RK3588_IDS, ["npu-core-2"], 2) == ["npu-core-0", "npu-core-2"]


def test_allocate_hands_in_env_and_exactly_the_npu_nodes(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm")
    response = allocate(rig.stub(), ["npu-core-0", "npu-core-1"], ["npu-core-2"])
    first, second = response.container_responses
    assert dict(first.envs) == {
        "RKNN_NPU_CORE_MASK": "3",
        "RKNN_NPU_CORES": "0,1",
        "RKNN_NPU_SOC": "rk3588",
        "RKNN_NPU_DEVICE": "/dev/dri/renderD129",
        "RKNN_NPU_COMPATIBLE_FILE": "/run/rknpu/compatible",
    }
    assert [(d.container_path, d.host_path, d.permissions) for d in first.devices] == [
        ("/dev/dri/card1", "/dev/dri/card1", "rw"),
        ("/dev/dri/renderD129", "/dev/dri/renderD129", "rw"),
    ]  # never the GPU's card0/renderD128
    assert [(m.container_path, m.host_path, m.read_only) for m in first.mounts] == [
        ("/run/rknpu/compatible", "/sys/firmware/devicetree/base/compatible", True)
    ]
    assert second.envs["RKNN_NPU_CORE_MASK"] == "4" and second.envs["RKNN_NPU_CORES"] == "2"
    assert not first.cdi_devices
    line = rig.plugin.wait_log(lambda entry: entry["msg"] == "allocated" and entry["mask"] == 3)
    assert line["ids"] == ["npu-core-0", "npu-core-1"]


def test_compatible_file_found_without_host_proc(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", register=False, kubelet=False)
    rig.plugin.stop()
    (rig.host_root / "proc/device-tree").unlink()  # the DaemonSet mounts /sys, not /proc
    rig.kubelet.start()
    from fakekubelet import PluginProcess

    plugin = PluginProcess(rig.host_root, rig.plugin_dir)
    try:
        _, request = rig.kubelet.wait_registration()
        stub = rig.kubelet.plugin_stub(request.endpoint)
        container = allocate(stub, ["npu-core-0"]).container_responses[0]
        assert [(m.container_path, m.host_path) for m in container.mounts] == [
            ("/run/rknpu/compatible", "/sys/firmware/devicetree/base/compatible")
        ]
        assert container.envs["RKNN_NPU_SOC"] == "rk3588"
    finally:
        assert plugin.stop() == 0


def test_allocate_on_the_misc_driver_build(rig_factory: RigFactory) -> None:
    response = allocate(rig_factory("rk3588-misc").stub(), ["npu-core-1"])
    container = response.container_responses[0]
    assert container.envs["RKNN_NPU_DEVICE"] == "/dev/rknpu"
    assert container.envs["RKNN_NPU_CORE_MASK"] == "2"
    assert [d.host_path for d in container.devices] == ["/dev/rknpu", "/dev/dma_heap/system"]


def test_cdi_spec_written_and_named_in_allocate(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-render128", "--cdi", "--cdi-dir", "CDI")
    # --cdi-dir is relative to the plugin's working directory: the test's cwd.
    spec_path = os.path.join(os.getcwd(), "CDI", "rockchip.com-npu.json")
    try:
        response = allocate(rig.stub(), ["npu-core-2"])
        assert [d.name for d in response.container_responses[0].cdi_devices] == ["rockchip.com/npu=npu"]
        assert len(response.container_responses[0].devices) == 2  # device specs as well
        with open(spec_path) as handle:
            spec = json.load(handle)
        assert spec["kind"] == "rockchip.com/npu"
        nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
        assert nodes == ["/dev/dri/card0", "/dev/dri/renderD128"]
    finally:
        if os.path.exists(spec_path):
            os.unlink(spec_path)
            os.rmdir(os.path.dirname(spec_path))


@pytest.mark.parametrize(
    ("ids", "code", "named"),
    [
        (["npu-core-7"], grpc.StatusCode.INVALID_ARGUMENT, "npu-core-7"),
        (["gpu-0"], grpc.StatusCode.INVALID_ARGUMENT, "gpu-0"),
        (["npu-core-1", "npu-core-1"], grpc.StatusCode.INVALID_ARGUMENT, "npu-core-1"),
        ([], grpc.StatusCode.INVALID_ARGUMENT, "no device ID"),
    ],
)
def test_bad_allocate_names_the_id_and_the_plugin_keeps_serving(
    rig_factory: RigFactory, ids: list[str], code: grpc.StatusCode, named: str
) -> None:
    rig = rig_factory("rk3588-drm")
    stub = rig.stub()
    with pytest.raises(grpc.RpcError) as caught:
        allocate(stub, ids)
    assert caught.value.code() == code
    assert named in caught.value.details()
    rig.plugin.wait_log(lambda entry: entry["level"] == "error" and "Allocate refused" in entry["msg"])
    assert allocate(stub, ["npu-core-0"]).container_responses[0].envs["RKNN_NPU_CORE_MASK"] == "1"


def test_preferred_allocation_refuses_ids_it_never_offered(rig_factory: RigFactory) -> None:
    stub = rig_factory("rk3588-drm").stub()
    for must in (["npu-core-7"], ["npu-core-\u0661"], ["npu-core-01"], ["npu-core-1-0"]):
        with pytest.raises(grpc.RpcError) as caught:
            preferred(stub, RK3588_IDS, must, 1)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown device ID" in caught.value.details()
    # Look-alikes among the available IDs are never chosen.
    assert preferred(stub, ["npu-core-\u0661", "npu-core-01", "npu-core-2"], [], 1) == ["npu-core-2"]


def test_a_huge_bad_request_gets_a_short_refusal_and_a_short_log_line(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm")
    flood = [f"gpu-{n}\x1b[2K" for n in range(10_000)]
    with pytest.raises(grpc.RpcError) as caught:
        allocate(rig.stub(), flood)
    details = caught.value.details()
    assert len(details) < 500 and "and 9,997 more (10,000 IDs)" in details and "\x1b" not in details
    line = rig.plugin.wait_log(lambda entry: "Allocate refused" in entry["msg"])
    assert len(json.dumps(line)) < 1000
    assert allocate(rig.stub(), ["npu-core-0"]).container_responses[0].envs["RKNN_NPU_CORE_MASK"] == "1"


@pytest.mark.parametrize("watch", ["inotify", "polling"])
def test_health_loss_and_recovery_within_a_second(rig_factory: RigFactory, watch: str) -> None:
    args = ("--no-inotify",) if watch == "polling" else ()
    rig = rig_factory("rk3588-drm", *args)
    stream = DeviceStream(rig.stub())
    stream.wait_for(all_health("Healthy"))
    render = rig.host_root / "dev/dri/renderD129"
    removed = time.monotonic()
    render.unlink()
    _, seen = stream.wait_for(all_health("Unhealthy"), timeout=5)
    assert seen - removed < 1.0
    with pytest.raises(grpc.RpcError) as caught:
        allocate(rig.stub(), ["npu-core-0"])
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "npu-core-0" in caught.value.details() and "Unhealthy" in caught.value.details()
    restored = time.monotonic()
    char_device(rig.host_root, "/dev/dri/renderD129", 226, 129)
    _, seen = stream.wait_for(all_health("Healthy"), timeout=5)
    assert seen - restored < 1.0
    rig.plugin.wait_log(lambda entry: entry["msg"] == "health changed" and entry["unhealthy"])


def test_driver_unload_marks_every_core_unhealthy(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3576", "--health-interval", "0.2")
    stream = DeviceStream(rig.stub())
    stream.wait_for(all_health("Healthy"))
    for name in ("card1", "renderD129"):  # what rmmod rknpu takes away: sysfs class entries and nodes
        (rig.host_root / f"sys/class/drm/{name}").unlink()
        (rig.host_root / f"dev/dri/{name}").unlink()
    devices, _ = stream.wait_for(all_health("Unhealthy"))
    assert ids_of(devices) == ["npu-core-0", "npu-core-1"]


def test_driver_unbound_with_nodes_left_is_seen_by_the_periodic_recheck(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm")  # default --health-interval
    stream = DeviceStream(rig.stub())
    stream.wait_for(all_health("Healthy"))
    unbound = time.monotonic()
    # No /dev event: only the sysfs driver binding goes (inotify does not work on sysfs).
    device = rig.host_root / "sys/devices/platform/fdab0000.npu"
    (device / "driver").unlink()  # what `echo fdab0000.npu > .../RKNPU/unbind` does
    (device / "uevent").write_text("OF_NAME=npu\n")
    _, seen = stream.wait_for(all_health("Unhealthy"))
    assert seen - unbound < 1.0
    line = rig.plugin.wait_log(lambda entry: entry["msg"] == "health changed" and entry["unhealthy"])
    assert "no Rockchip NPU found" in line["reason"]


def test_concurrent_streams_all_get_updates_and_end_cleanly_on_shutdown(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm")
    streams = [DeviceStream(rig.stub()) for _ in range(3)]
    for stream in streams:
        stream.wait_for(all_health("Healthy"))
    (rig.host_root / "dev/dri/card1").unlink()
    for stream in streams:
        stream.wait_for(all_health("Unhealthy"))
    rig.plugin.signal(signal.SIGTERM)
    assert rig.plugin.wait() == 0
    for stream in streams:
        assert stream.ended.wait(2)
        assert stream.error is None  # ended by the plugin with status OK, not cut off


def test_idle_streams_never_starve_allocate(rig_factory: RigFactory) -> None:
    # More streams than the old server had worker threads (16): each used to pin one.
    rig = rig_factory("rk3588-drm")
    assert rig.registration is not None
    held = [DeviceStream(rig.kubelet.plugin_stub(rig.registration.endpoint)) for _ in range(40)]
    for stream in held:
        stream.wait_for(all_health("Healthy"))
    assert allocate(rig.stub(), ["npu-core-2"]).container_responses[0].envs["RKNN_NPU_CORES"] == "2"
    assert preferred(rig.stub(), RK3588_IDS, [], 1) == ["npu-core-2"]
    rig.plugin.signal(signal.SIGTERM)
    assert rig.plugin.wait() == 0
    for stream in held:
        assert stream.ended.wait(2)
        assert stream.error is None


def test_plugin_socket_is_owner_only_whatever_the_umask(rig_factory: RigFactory) -> None:
    previous = os.umask(0)  # the plugin inherits it: a socket made under it would be 0777
    try:
        rig = rig_factory("rk3588-drm")
    finally:
        os.umask(previous)
    assert rig.registration is not None
    mode = (rig.plugin_dir / rig.registration.endpoint).stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600


def test_kubelet_restart_deletes_sockets_and_the_plugin_registers_again(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm")
    # Restart only once the plugin has its Register answer (a restart cancelling the call in
    # flight makes the plugin retry it, which is right, but is another test).
    rig.plugin.wait_log(lambda entry: entry["msg"] == "registered with kubelet")
    other = rig.plugin_dir / "other-vendor.sock"
    other.write_text("not a socket: the kubelet deletes only sockets")
    old_stream = DeviceStream(rig.stub())
    old_stream.next()
    restarted = rig.kubelet.restart()  # deletes every socket, then creates kubelet.sock
    registered, request = rig.kubelet.wait_registration(timeout=5)
    assert registered - restarted < 1.0
    assert old_stream.ended.wait(5)  # the old generation's stream does not linger
    new_stream = DeviceStream(rig.kubelet.plugin_stub(request.endpoint))
    assert new_stream.next() == [(device_id, "Healthy") for device_id in RK3588_IDS]
    assert request.endpoint == "rockchip.com-npu.sock"
    assert allocate(rig.stub(), ["npu-core-2"]).container_responses[0].envs["RKNN_NPU_CORES"] == "2"
    assert other.exists()
    rig.plugin.wait_log(lambda entry: entry["msg"] == "registered with kubelet" and entry["generation"] == 2)


def test_kubelet_dialing_back_during_register_gets_the_devices(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3576", kubelet=False, register=False)
    rig.kubelet.connect_back = True
    rig.kubelet.start()
    rig.kubelet.wait_registration()
    expected = [("npu-core-0", "Healthy"), ("npu-core-1", "Healthy")]
    first = rig.kubelet.streams.get(timeout=PATIENCE)
    assert first.next() == expected
    rig.plugin.wait_log(lambda entry: entry["msg"] == "registered with kubelet")
    rig.kubelet.restart()
    rig.kubelet.wait_registration()
    assert first.ended.wait(5)
    assert rig.kubelet.streams.get(timeout=PATIENCE).next() == expected


def test_losing_only_our_socket_triggers_serve_and_register(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", "--no-inotify")
    assert rig.registration is not None
    (rig.plugin_dir / rig.registration.endpoint).unlink()
    rig.kubelet.wait_registration()
    assert allocate(rig.stub(), ["npu-core-0"]).container_responses


def test_waits_for_kubelet_then_registers(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", kubelet=False, register=False)
    rig.plugin.wait_log(lambda entry: entry["msg"] == "waiting for kubelet.sock")
    rig.kubelet.start()
    rig.kubelet.wait_registration()


def test_a_kubelet_long_in_coming_is_said_once_with_the_folder(rig_factory: RigFactory) -> None:
    # --kubelet-wait-notice is 30 s by default; the line is awaited, never slept for.
    rig = rig_factory("rk3588-drm", "--kubelet-wait-notice", "0.5", kubelet=False, register=False)
    line = rig.plugin.wait_log(lambda entry: entry["msg"].startswith("still waiting for the kubelet"))
    assert line["level"] == "warning" and line["msg"] == "still waiting for the kubelet after 0.5 s"
    assert line["folder"] == str(rig.plugin_dir) and "--device-plugin-dir" in line["fix"]
    rig.kubelet.start()
    rig.kubelet.wait_registration()
    rig.plugin.wait_log(lambda entry: entry["msg"] == "registered with kubelet")
    assert rig.plugin.stop() == 0  # every line read
    notices = [entry for entry in rig.plugin.lines if entry["msg"].startswith("still waiting")]
    assert len(notices) == 1


def test_stale_socket_of_ours_is_replaced_and_others_are_left_alone(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", kubelet=False, register=False)
    rig.plugin.stop()
    rig.kubelet.start()
    ours = rig.plugin_dir / "rockchip.com-npu.sock"
    theirs = rig.plugin_dir / "nvidia-gpu.sock"
    ours.write_text("stale")
    theirs.write_text("another plugin")
    from fakekubelet import PluginProcess

    plugin = PluginProcess(rig.host_root, rig.plugin_dir)
    try:
        rig.kubelet.wait_registration()
        assert ours.is_socket()
        assert theirs.read_text() == "another plugin"
    finally:
        assert plugin.stop() == 0
    assert theirs.exists() and not ours.exists()


def test_second_instance_waits_instead_of_stealing_the_socket(rig_factory: RigFactory) -> None:
    from fakekubelet import PluginProcess

    rig = rig_factory("rk3588-drm")
    rig.plugin.wait_log(lambda entry: entry["msg"] == "registered with kubelet")
    assert rig.registration is not None
    ours = rig.plugin_dir / rig.registration.endpoint
    first_inode = ours.stat().st_ino
    second = PluginProcess(rig.host_root, rig.plugin_dir)
    try:
        line = second.wait_log(lambda entry: entry["msg"] == "cannot serve; retrying")
        assert "another process serves" in line["error"]
        assert ours.stat().st_ino == first_inode and rig.kubelet.no_registration(0.3)
        rig.plugin.signal(signal.SIGTERM)  # the old instance goes (a rollout): the new one takes over
        assert rig.plugin.wait() == 0
        rig.kubelet.wait_registration()
        second.wait_log(lambda entry: entry["msg"] == "registered with kubelet")
    finally:
        assert second.stop() == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_removes_socket_and_exits_0(rig_factory: RigFactory, signum: int) -> None:
    rig = rig_factory("rk3588-drm")
    assert rig.registration is not None
    stream = DeviceStream(rig.stub())
    stream.next()
    sent = time.monotonic()
    rig.plugin.signal(signum)
    assert rig.plugin.wait(timeout=5) == 0
    assert time.monotonic() - sent < 2.0
    assert not (rig.plugin_dir / rig.registration.endpoint).exists()
    assert rig.kubelet.socket.exists()  # the kubelet's socket is never ours to remove


def test_sigterm_during_a_hung_register_still_exits_quickly(rig_factory: RigFactory) -> None:
    rig = rig_factory("rk3588-drm", kubelet=False, register=False)
    rig.kubelet.answer_register.clear()
    rig.kubelet.start()
    rig.kubelet.wait_registration()  # the call is in the kubelet, which does not answer
    sent = time.monotonic()
    rig.plugin.signal(signal.SIGTERM)
    assert rig.plugin.wait(timeout=5) == 0
    assert time.monotonic() - sent < 2.0
    assert not (rig.plugin_dir / "rockchip.com-npu.sock").exists()


@pytest.mark.parametrize("host", ["no-npu", "rocket"])
def test_no_npu_logs_one_actionable_line_and_registers_nothing(rig_factory: RigFactory, host: str) -> None:
    rig = rig_factory(host, "--health-interval", "0.1", register=False)
    line = rig.plugin.wait_log(lambda entry: entry["level"] == "error")
    assert "re-scanning" in line["msg"] and "fix:" in line["error"]
    assert rig.kubelet.no_registration(0.5)
    assert len([entry for entry in rig.plugin.lines if entry["level"] == "error"]) == 1
    assert rig.plugin.process.poll() is None


def test_fail_on_init_error_exits_1(rig_factory: RigFactory) -> None:
    rig = rig_factory("no-npu", "--fail-on-init-error", register=False)
    assert rig.plugin.wait() == 1  # exited, and every line read
    errors = [entry for entry in rig.plugin.lines if entry["level"] == "error"]
    assert [entry["msg"] for entry in errors] == [
        "no usable NPU; exiting with status 1 (--fail-on-init-error)"
    ]
    assert "fix:" in errors[0]["error"] and "--host-root" in errors[0]["error"]


def test_late_driver_load_is_picked_up(rig_factory: RigFactory) -> None:
    from fakehost import make_host

    rig = rig_factory(None, "--health-interval", "0.2", register=False)
    rig.plugin.wait_log(lambda entry: entry["level"] == "error")
    make_host("rk3568", rig.host_root)
    _, request = rig.kubelet.wait_registration()
    assert request.resource_name == "rockchip.com/npu"
    stream = DeviceStream(rig.kubelet.plugin_stub(request.endpoint))
    stream.wait_for(lambda devices: devices == [("npu-core-0", "Healthy")])


def test_env_settings_apply_and_flags_win(rig_factory: RigFactory) -> None:
    rig = rig_factory(
        "rk3588-drm",
        "--resource-name",
        "example.com/npu",
        env={"RKNPU_PLUGIN_RESOURCE_NAME": "env.example.com/npu", "RKNPU_PLUGIN_SOCKET_NAME": "env.sock"},
    )
    assert rig.registration is not None
    assert rig.registration.resource_name == "example.com/npu"
    assert rig.registration.endpoint == "env.sock"


@pytest.mark.parametrize("command", [["rknpu-device-plugin"], [sys.executable, "-m", "rknpu_device_plugin"]])
def test_help_works(command: list[str]) -> None:
    if command[0] == "rknpu-device-plugin":
        command = [os.path.join(os.path.dirname(sys.executable), "rknpu-device-plugin")]
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0
    assert "--fail-on-init-error" in result.stdout and "RKNPU_PLUGIN_" in result.stdout


def test_bad_settings_exit_2_with_a_fix() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rknpu_device_plugin", "--replicas", "3"],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
    )
    assert result.returncode == 2
    assert "replicas only apply to --mode shared" in result.stderr and "fix:" in result.stderr


def test_plugin_imports_without_cv2_or_onnxruntime() -> None:
    code = (
        "import sys; import rknpu_device_plugin._cli, rknpu_device_plugin.kubelet._service, "
        "rknpu_device_plugin.kubelet._registration, rknpu_serverkit._serving; "
        "bad = [m for m in ('cv2', 'onnxruntime', 'matplotlib', 'rich') if m in sys.modules]; "
        "sys.exit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=PATIENCE).returncode == 0


def test_metrics_address_serves_the_plugin_events(rig_factory: RigFactory) -> None:
    import socket
    import urllib.request

    with socket.socket() as probe:  # a free port (the tiny reuse race is acceptable in a test)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rig = rig_factory("rk3588-drm", "--metrics-address", f"127.0.0.1:{port}", "--pod-resources-socket", "")
    rig.plugin.wait_log(lambda entry: entry["msg"] == "registered with kubelet")
    allocate(rig.stub(), ["npu-core-0", "npu-core-1"])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        page = response.read().decode()
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line[:1] != "#"
    }
    assert samples["rknpu_registrations_total"] == 1
    assert samples["rknpu_allocations_total"] == 1
    assert samples['rknpu_device_healthy{device="npu-core-2"}'] == 1
