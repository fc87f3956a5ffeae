"""The DRA driver through a node's life: slices someone else deletes or edits, API outages, the
kubelet's start, a rolling update's handover, health in the kubelet's stream, a reboot, a deleted
registration socket, the metrics page. Figures the issue asks for are printed (`-s` shows them)."""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from awaiting import PATIENCE, eventually
from drarig import DRIVER, NODE, DriverRig, dra_settings
from kubeletstub import KubeletStub

from rknpu_dra_driver._cli import run
from rknpu_dra_driver._kubeapi.dra_health.v1alpha1 import api_pb2 as health_pb
from rknpu_dra_driver._settings import DraSettings
from rknpu_serverkit import StopEvent

UID = "5d7c1f7e-2b9e-4c8e-8d3f-6a1b2c3d4e05"


def results(*devices: str) -> list[dict[str, Any]]:
    return [{"request": "npu", "driver": DRIVER, "pool": NODE, "device": d} for d in devices]


def slice_devices(slices: dict[str, Any]) -> list[str]:
    return [d["name"] for s in slices.values() for d in s["spec"].get("devices") or []]


def _three(slices: dict[str, Any]) -> bool:
    return len(slice_devices(slices)) == 3


def _specs(slices: dict[str, Any]) -> dict[str, Any]:
    return {name: {k: v for k, v in s["spec"].items() if k != "pool"} for name, s in slices.items()}


@pytest.mark.parametrize("layout", ["per-core", "partitionable"])
def test_a_slice_deleted_by_the_kubelet_at_its_start_is_recreated_within_5_s(
    rig: DriverRig, layout: str
) -> None:
    rig.settings = rig.settings.model_copy(update={"slice_layout": layout})
    rig.start()
    before = _specs(rig.api.wait_slices(lambda s: bool(slice_devices(s))))
    rig.api.wait_watching()
    began = time.monotonic()
    restarted = KubeletStub(rig.settings.registration_dir, DRIVER, api=rig.api, node_name=NODE)
    assert rig.api.slices == {} or _specs(rig.api.slices) == before  # wiped (or repaired already)
    rig.api.wait_slices(lambda s: _specs(s) == before, timeout=5)
    took = time.monotonic() - began
    restarted.register()  # the driver registers with the restarted kubelet
    print(f"\n{layout}: {len(before)} deleted slice(s) re-created in {took:.3f} s (<= 5 s)")
    # One slice of the pool deleted alone (the counters slice of the partitionable layout, say).
    began = time.monotonic()
    rig.api.delete_slices_named(sorted(before)[-1])
    rig.api.wait_slices(lambda s: _specs(s) == before, timeout=5)


def test_a_slice_emptied_by_someone_else_is_repaired_within_5_s(rig: DriverRig) -> None:
    rig.start()
    (name,) = rig.api.wait_slices(_three)
    rig.api.wait_watching()
    began = time.monotonic()
    rig.api.put_slice(name, lambda s: s["spec"].update(devices=[]))
    slices = rig.api.wait_slices(_three, timeout=5)
    print(f"\nemptied slice repaired in {time.monotonic() - began:.3f} s (target <= 5 s)")
    assert slices[name]["spec"]["pool"]["generation"] == 2


def test_after_an_api_outage_the_true_state_is_published(rig: DriverRig) -> None:
    rig.start()
    rig.api.wait_slices(_three)
    rig.api.set_down(True)
    render = rig.host_root / "dev/dri/renderD129"
    publisher_log = logging.getLogger("rknpu_dra_driver.slices")
    records = _Records()
    publisher_log.addHandler(records)
    try:
        render.rename(render.with_suffix(".gone"))  # the NPU goes away during the outage
        # The outage lasts until the driver has tried to publish the loss, and failed.
        records.wait("cannot publish the ResourceSlices")
    finally:
        publisher_log.removeHandler(records)
    rig.api.set_down(False)
    rig.api.wait_slices(lambda s: len(s) == 1 and slice_devices(s) == [], timeout=PATIENCE)
    render.with_suffix(".gone").rename(render)
    rig.api.wait_slices(_three, timeout=PATIENCE)


def _settings(rig: DriverRig, instance: str) -> DraSettings:
    return rig.settings.model_copy(update={"instance_id": instance})


class _Instance:
    def __init__(self, settings: DraSettings) -> None:
        self.stop = StopEvent()
        self.result: list[int] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(run(settings, self.stop)), daemon=True
        )
        self.thread.start()

    def end(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive() and self.result == [0]


@pytest.fixture
def instances() -> Iterator[list[_Instance]]:
    made: list[_Instance] = []
    yield made
    for instance in made:
        if instance.thread.is_alive():
            instance.end()


def test_a_rolling_update_hands_over_without_a_gap(rig: DriverRig, instances: list[_Instance]) -> None:
    claims = [(f"c{i}", str(uuid.uuid4())) for i in range(400)]
    for name, uid in claims:
        # adminAccess: 400 claims may share core 0 (the driver refuses to double-book it otherwise).
        rig.api.add_claim("default", name, uid, [{**results("npu-core-0")[0], "adminAccess": True}])
    instances.append(_Instance(_settings(rig, "old-pod-uid")))
    kubelet = KubeletStub(rig.settings.registration_dir, DRIVER)
    kubelet.register()
    rig.api.wait_slices(_three)
    longest = [0.0]
    errors: list[str] = []
    done = threading.Event()
    answered = [0]
    progressed = threading.Condition()

    def prepares() -> None:  # the kubelet's calls, one after another, throughout the handover
        for name, uid in claims:
            if done.is_set():
                return
            began = time.monotonic()
            try:
                answer = kubelet.prepare([("default", name, uid)])
                if answer.claims[uid].error:
                    errors.append(answer.claims[uid].error)
            except Exception as exc:  # a call lost in the handover: the kubelet would retry it
                errors.append(repr(exc))
            longest[0] = max(longest[0], time.monotonic() - began)
            with progressed:
                answered[0] += 1
                progressed.notify_all()

    caller = threading.Thread(target=prepares)
    began = time.monotonic()
    caller.start()
    instances.append(_Instance(_settings(rig, "new-pod-uid")))  # maxSurge: the new pod starts
    kubelet.register()  # ... and registers beside the old one
    instances[0].end()  # then the old pod stops
    assert kubelet.info is not None and kubelet.info.endpoint.endswith("dra-new-pod-uid.sock")
    with progressed:  # calls keep going to the new instance: a few more answered after the handover
        handed_over = answered[0]
        assert progressed.wait_for(lambda: answered[0] >= handed_over + 5, PATIENCE)
    done.set()
    caller.join(30)
    ended = time.monotonic()
    without = rig.api.longest_without_devices(began, ended)
    print(
        f"\nhandover: longest prepare {longest[0]:.3f} s, longest with no slice {without:.3f} s "
        f"(targets <= 1 s), errors {len(errors)}"
    )
    assert errors == [] and longest[0] <= 1.0 and without <= 1.0
    assert _three(rig.api.slices)


def _health(kubelet: KubeletStub) -> tuple[Any, threading.Condition, dict[str, int]]:
    stream = kubelet.watch_health()
    state: dict[str, int] = {}
    changed = threading.Condition()

    def follow() -> None:
        try:
            for response in stream:
                with changed:
                    for device in response.devices:
                        assert device.device.pool_name == NODE and device.message
                        state[device.device.device_name] = device.health
                    changed.notify_all()
        except Exception:  # cancelled
            return

    threading.Thread(target=follow, daemon=True).start()
    return stream, changed, state


def test_health_reaches_the_kubelet_within_1_s(rig: DriverRig) -> None:
    kubelet = rig.start()
    stream, changed, state = _health(kubelet)
    with changed:
        assert changed.wait_for(
            lambda: len(state) > 3 and set(state.values()) == {health_pb.HEALTHY}, PATIENCE
        )
    # The per-core devices and the larger core sets of the partitionable layout, by slice name.
    assert {"npu-core-0", "npu-core-1", "npu-core-2", "npu-cores-0-1-2"} <= set(state)
    render = rig.host_root / "dev/dri/renderD129"
    began = time.monotonic()
    render.rename(render.with_suffix(".gone"))
    with changed:
        assert changed.wait_for(lambda: set(state.values()) == {health_pb.UNHEALTHY}, 5)
    failed = time.monotonic() - began
    began = time.monotonic()
    render.with_suffix(".gone").rename(render)
    with changed:
        assert changed.wait_for(lambda: set(state.values()) == {health_pb.HEALTHY}, 5)
    recovered = time.monotonic() - began
    print(f"\nhealth: UNHEALTHY after {failed:.3f} s, HEALTHY after {recovered:.3f} s (targets <= 1 s)")
    stream.cancel()
    assert failed <= 1.0 and recovered <= 1.0


def test_the_v1_health_service_answers_too(rig: DriverRig) -> None:
    kubelet = rig.start()
    stream = kubelet.watch_health("v1")
    first = next(iter(stream))
    assert {"npu-core-0", "npu-core-1", "npu-core-2"} <= {d.device.device_name for d in first.devices}
    stream.cancel()


def _boot(rig: DriverRig, boot_id: str) -> None:
    path = rig.host_root / "proc/sys/kernel/random/boot_id"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(boot_id + "\n")


def test_after_a_reboot_claims_are_prepared_again_and_gone_ones_cleaned(rig: DriverRig) -> None:
    import json

    from rknpu_dra_driver.claims._checkpoint import CHECKPOINT_NAME

    gone_uid = str(uuid.uuid4())
    _boot(rig, "boot-1")
    kubelet = rig.start()
    rig.api.add_claim("default", "kept", UID, results("npu-core-1"))
    rig.api.add_claim("default", "gone", gone_uid, results("npu-core-2"))
    first = kubelet.prepare([("default", "kept", UID), ("default", "gone", gone_uid)])
    rig.end()
    # The reboot: a new boot id, the CDI tmpfs empty, one claim deleted meanwhile.
    _boot(rig, "boot-2")
    for spec in rig.cdi_dir.glob("*.json"):
        spec.unlink()
    with rig.api.lock:
        del rig.api.claims[("default", "gone")]
    kubelet = rig.start()
    # The stale claim goes once the API client is up (a file the driver writes: polled).
    records = eventually(
        lambda: json.loads((rig.plugin_dir / CHECKPOINT_NAME).read_text())["claims"],
        lambda found: [r["claim"]["uid"] for r in found] == [UID],
    )
    assert [r["bootId"] for r in records] == ["boot-1"]
    reads = len([p for _m, p in rig.api.requests if p.endswith("/resourceclaims/kept")])
    again = kubelet.prepare([("default", "kept", UID)])
    assert again.claims[UID] == first.claims[UID]
    assert (
        len([p for _m, p in rig.api.requests if p.endswith("/resourceclaims/kept")]) == reads + 1
    )  # read again
    assert len(list(rig.cdi_dir.glob("*.json"))) == 1  # its spec is back
    records = json.loads((rig.plugin_dir / CHECKPOINT_NAME).read_text())["claims"]
    assert [(r["claim"]["uid"], r["bootId"]) for r in records] == [(UID, "boot-2")]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []
        self._said = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._said:
            self.messages.append(record.getMessage())
            self._said.notify_all()

    def wait(self, fragment: str, timeout: float = PATIENCE) -> None:
        with self._said:
            assert self._said.wait_for(lambda: any(fragment in m for m in self.messages), timeout), (
                self.messages
            )


def test_a_kubelet_long_in_coming_is_said_once_with_the_folder(rig: DriverRig) -> None:
    # --kubelet-wait-notice is 30 s by default; the line is awaited, never slept for.
    rig.settings = rig.settings.model_copy(update={"kubelet_wait_notice": 0.3})
    kubelet_log = logging.getLogger("rknpu_dra_driver.kubelet")
    records = _Records()
    kubelet_log.addHandler(records)
    try:
        rig.launch()  # served, and no kubelet registers it
        records.wait("still waiting for the kubelet after 0.3 s")
        # Its NotifyRegistrationStatus is answered once the driver has taken the registration.
        KubeletStub(rig.settings.registration_dir, DRIVER).register()
    finally:
        kubelet_log.removeHandler(records)
    assert len([m for m in records.messages if m.startswith("still waiting")]) == 1


def test_a_deleted_registration_socket_is_served_again(rig: DriverRig) -> None:
    """By the kit's Supervisor: one loop serves both programs' sockets again."""
    supervisor_log = logging.getLogger("rknpu_serverkit.serving")
    records = _Records()
    supervisor_log.addHandler(records)
    try:
        kubelet = rig.start()
        (path, _info) = kubelet.plugins[0]
        path.unlink()
        began = time.monotonic()
        again = KubeletStub(rig.settings.registration_dir, DRIVER)
        again.register(timeout=PATIENCE)
        print(f"\nregistration socket served again in {time.monotonic() - began:.3f} s")
    finally:
        supervisor_log.removeHandler(records)
    assert "serving and registering again" in records.messages
    rig.api.add_claim("default", "c", UID, results("npu-core-0"))
    assert again.prepare([("default", "c", UID)]).claims[UID].error == ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_metrics_are_served(rig: DriverRig) -> None:
    port = _free_port()
    rig.settings = rig.settings.model_copy(update={"metrics_address": f"127.0.0.1:{port}"})
    kubelet = rig.start()
    rig.api.wait_slices(_three)
    rig.api.add_claim("default", "c", UID, results("npu-core-0"))
    assert kubelet.prepare([("default", "c", UID)]).claims[UID].error == ""
    missing = str(uuid.uuid4())
    assert kubelet.prepare([("default", "nope", missing)]).claims[missing].error
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in (
        'rknpu_dra_requests_total{operation="prepare"} 2.0',
        'rknpu_dra_request_errors_total{operation="prepare",reason="claim_gone"} 1.0',
        "rknpu_dra_prepare_seconds_count 1.0",
        "rknpu_dra_prepared_claims 1.0",
        'rknpu_dra_device_healthy{device="npu-core-2"} 1.0',
        "rknpu_dra_slice_publishes_total 1.0",
    ):
        assert line in page, line


def test_a_health_change_with_metrics_on_freezes_nothing(rig: DriverRig) -> None:
    """The health gauge used to re-read the ResourceManager's state from inside its own (not
    re-entrant) lock: the first health change with --metrics-address froze health and prepare."""
    port = _free_port()
    rig.settings = rig.settings.model_copy(update={"metrics_address": f"127.0.0.1:{port}"})
    kubelet = rig.start()
    rig.api.wait_slices(_three)
    stream, changed, state = _health(kubelet)
    with changed:
        assert changed.wait_for(
            lambda: len(state) > 3 and set(state.values()) == {health_pb.HEALTHY}, PATIENCE
        )
    render = rig.host_root / "dev/dri/renderD129"
    render.rename(render.with_suffix(".gone"))
    with changed:
        assert changed.wait_for(lambda: set(state.values()) == {health_pb.UNHEALTHY}, 5)
    # The ResourceManager answers again: a prepare gets its (refusing: no usable NPU) answer fast.
    rig.api.add_claim("default", "c", UID, results("npu-core-0"))
    began = time.monotonic()
    answer = kubelet.prepare([("default", "c", UID)])
    took = time.monotonic() - began
    assert answer.claims[UID].error and took < 1.0, (answer, took)
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'rknpu_dra_device_healthy{device="npu-core-0"} 0.0' in page
    render.with_suffix(".gone").rename(render)
    with changed:
        assert changed.wait_for(lambda: set(state.values()) == {health_pb.HEALTHY}, 5)
    assert kubelet.prepare([("default", "c", UID)]).claims[UID].error == ""
    stream.cancel()


def _readyz(port: int) -> int:
    try:
        status: int = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).status
        return status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_readyz_answers_200_once_registered_and_published(rig: DriverRig) -> None:
    """The DaemonSet's readinessProbe: a rolling update stops the old pod only after this 200."""
    port = _free_port()
    rig.settings = rig.settings.model_copy(update={"metrics_address": f"127.0.0.1:{port}"})
    rig.launch()
    rig.api.wait_slices(_three)  # published (the metrics server was up before the publisher ran)
    assert _readyz(port) == 503  # the kubelet has not registered the driver yet
    KubeletStub(rig.settings.registration_dir, DRIVER).register()
    assert _readyz(port) == 200  # NotifyRegistrationStatus answered after it set the flag


def test_readyz_waits_for_the_slice_too(rig: DriverRig) -> None:
    port = _free_port()
    rig.settings = rig.settings.model_copy(update={"metrics_address": f"127.0.0.1:{port}"})
    rig.api.set_down(True)  # no slice can be written
    kubelet = rig.start()  # registered
    assert kubelet.plugins and _readyz(port) == 503
    rig.api.set_down(False)
    rig.api.wait_slices(_three)
    # The flag is set in the driver right after the write returns: no event of ours to await.
    assert eventually(lambda: _readyz(port), lambda code: code == 200) == 200


def test_start_to_slice_is_quick(rig: DriverRig) -> None:
    began = time.monotonic()
    rig.start()
    rig.api.wait_slices(_three, timeout=PATIENCE)
    print(f"\nstart to slice (in process) {time.monotonic() - began:.3f} s")


def test_a_core_failing_its_probe_reads_unhealthy_within_1_s(rig: DriverRig) -> None:
    from rknnlaunch.npu import HostRoot
    from rknpu_dra_driver.apiserver._api import KubeApi
    from rknpu_dra_driver.claims._store import ClaimStore
    from rknpu_dra_driver.kubelet._health import HealthBoard
    from rknpu_dra_driver.kubelet._servers import KubeletServers
    from rknpu_node import NullEvents, ResourceManager

    resources = ResourceManager(HostRoot(rig.host_root), NullEvents())
    resources.scan()
    store = ClaimStore(KubeApi("", 1.0), resources, DRIVER, NODE, rig.plugin_dir, rig.cdi_dir)
    board = HealthBoard(resources, NODE)
    servers = KubeletServers(store, board, DRIVER, rig.plugin_dir, rig.settings.registration_dir)
    servers.start()
    try:
        kubelet = KubeletStub(rig.settings.registration_dir, DRIVER)
        kubelet.register()
        stream, changed, state = _health(kubelet)
        with changed:
            assert changed.wait_for(lambda: set(state.values()) == {health_pb.HEALTHY}, PATIENCE)
        began = time.monotonic()
        resources.set_probe_failures({1: "the probe hung"})  # what ProbeLoop reports for core 1
        with changed:
            assert changed.wait_for(lambda: state["npu-core-1"] == health_pb.UNHEALTHY, 5)
        failed = time.monotonic() - began
        assert state["npu-core-0"] == state["npu-core-2"] == health_pb.HEALTHY
        assert state["npu-cores-0-1-2"] == health_pb.UNHEALTHY  # a set with the failed core
        began = time.monotonic()
        resources.set_probe_failures({})
        with changed:
            assert changed.wait_for(lambda: state["npu-core-1"] == health_pb.HEALTHY, 5)
        recovered = time.monotonic() - began
        print(f"\nprobe health: UNHEALTHY after {failed:.4f} s, HEALTHY after {recovered:.4f} s")
        stream.cancel()
        kubelet.close()
        assert failed <= 1.0 and recovered <= 1.0
    finally:
        servers.stop()
        store.close()


def test_two_instances_share_one_checkpoint_and_nothing_else(rig: DriverRig) -> None:
    from rknnlaunch.npu import HostRoot
    from rknpu_dra_driver.apiserver._api import KubeApi
    from rknpu_dra_driver.claims._claim import ClaimRef
    from rknpu_dra_driver.claims._store import ClaimStore
    from rknpu_node import NullEvents, ResourceManager

    rig.api.add_claim("default", "c", UID, results("npu-core-1"))
    resources = ResourceManager(HostRoot(rig.host_root), NullEvents())
    resources.scan()
    api = KubeApi(rig.settings.kubeconfig, 5.0)
    api.connect()
    old, new = (ClaimStore(api, resources, DRIVER, NODE, rig.plugin_dir, rig.cdi_dir) for _ in range(2))
    ref = ClaimRef("default", "c", UID)
    assert old.prepare(ref).claim is not None
    assert set(new.claims) == {UID}  # the old instance's prepare, seen by the new one
    assert new.unprepare(ref) == ""
    assert old.claims == {} and list(rig.cdi_dir.glob("*.json")) == []
    assert old.prepare(ref).claim is not None  # prepared again, not answered from a memory
    assert len(list(rig.cdi_dir.glob("*.json"))) == 1
    old.close()
    new.close()


def test_an_unhealthy_core_is_tainted_where_the_api_server_keeps_taints() -> None:
    import shutil
    import tempfile

    from fakeapi import FakeApiServer

    api = FakeApiServer(keep_taints=True).start()
    api.add_node(NODE)
    root = Path(tempfile.mkdtemp(prefix="rkdra-", dir="/tmp"))
    settings = dra_settings(root, api)
    driver = _Instance(settings)
    try:
        api.wait_slices(_three)
        render = root / "host/dev/dri/renderD129"
        render.rename(render.with_suffix(".gone"))

        def tainted(slices: dict[str, Any]) -> bool:
            devices = [d for s in slices.values() for d in s["spec"].get("devices") or []]
            return len(devices) == 3 and all(d.get("taints") for d in devices)

        (published,) = api.wait_slices(tainted, timeout=5).values()
        assert published["spec"]["devices"][0]["taints"] == [
            {"key": f"{DRIVER}/unhealthy", "effect": "NoSchedule"}
        ]
        render.with_suffix(".gone").rename(render)
        api.wait_slices(
            lambda s: (
                _three(s) and not any(d.get("taints") for d in next(iter(s.values()))["spec"]["devices"])
            )
        )
    finally:
        driver.end()
        api.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_an_instance_with_an_id_waits_for_one_without(rig: DriverRig, instances: list[_Instance]) -> None:
    # The first upgrade from a driver without instance ids: it knows neither serialize.lock nor
    # this checkpoint, so the new pod waits for it (the old gap, once).
    kubelet = rig.start()
    lock_log = logging.getLogger("rknpu_dra_driver.instance")
    records = _Records()
    lock_log.addHandler(records)
    try:
        instances.append(_Instance(_settings(rig, "new-pod-uid")))
        records.wait("another rknpu-dra-driver serves this node; waiting")  # it waits, and says so
    finally:
        lock_log.removeHandler(records)
    assert not (rig.plugin_dir / "dra-new-pod-uid.sock").exists()
    assert kubelet.info is not None and kubelet.info.endpoint.endswith("/dra.sock")
    rig.end()
    kubelet = KubeletStub(rig.settings.registration_dir, DRIVER)
    kubelet.register()
    assert kubelet.info is not None and kubelet.info.endpoint.endswith("dra-new-pod-uid.sock")
