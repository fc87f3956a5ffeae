"""The driver's default slice layout ("auto") against API servers that keep the partitionable
fields (1.34 style, 1.35+ style) and one that drops them (DRAPartitionableDevices off, the default
on 1.34/1.35): what the API server stores is then allocated by the scheduler rig. Also the
explicit "partitionable" layout on a server dropping the fields (the driver stops, storing
nothing), and "auto" on a server whose version cannot be told at first."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from allocator import Allocator
from drarig import DRIVER, NODE, DriverRig, dra_settings
from fakeapi import FakeApiServer
from test_dra_allocation import classes, mask, sample_claims

from fakehost import make_host
from rknnlaunch import RknnLaunchError
from rknpu_device_plugin.devices import device_cores
from rknpu_dra_driver import _publisher
from rknpu_dra_driver._cli import run

PARTITION_FIELDS = ("sharedCounters", "consumesCounters")


def _rig(api: FakeApiServer, root: Path, layout: str = "auto") -> DriverRig:
    make_host("rk3588-drm", root / "host")
    settings = dra_settings(root, api, api_timeout=5.0, slice_layout=layout)
    return DriverRig(root, api, settings)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[DriverRig]:
    drop, minor, *layout = request.param
    api = FakeApiServer(drop_fields=drop, minor=minor).start()
    api.add_node(NODE)
    root = Path(tempfile.mkdtemp(prefix="rkdra-", dir="/tmp"))
    rig = _rig(api, root, *layout)
    yield rig
    rig.end()
    api.stop()
    shutil.rmtree(root, ignore_errors=True)


def _devices(slices: dict[str, dict[str, Any]]) -> list[str]:
    return [d["name"] for s in slices.values() for d in s["spec"].get("devices") or ()]


def _two_core_sample_after_the_shared_core(stored: list[dict[str, Any]]) -> int:
    allocator = Allocator(classes(), stored)
    (shared,) = sample_claims("shared-core.yaml")
    first = allocator.allocate(shared)
    assert first is not None
    allocator.commit(first)
    (pair,) = sample_claims("two-rk3588-cores.yaml")
    second = allocator.allocate(pair)
    assert second is not None
    return mask(second)


@pytest.mark.parametrize("server", [((), 35)], indirect=True, ids=["gate-on-1.35"])
def test_a_135_server_keeping_the_fields_gets_a_counters_slice_and_the_partitionable_devices(
    server: DriverRig,
) -> None:
    server.start()
    slices = server.api.wait_slices(lambda s: len(_devices(s)) == 5)
    assert sorted(slices) == [f"{NODE}-{DRIVER}", f"{NODE}-{DRIVER}-counters"]
    counters = slices[f"{NODE}-{DRIVER}-counters"]["spec"]
    assert "devices" not in counters and counters["sharedCounters"][0]["name"] == "npu-cores"
    assert _devices(slices) == ["npu-core-2", "npu-core-0", "npu-core-1", "npu-cores-0-1", "npu-cores-0-1-2"]
    assert _two_core_sample_after_the_shared_core(list(slices.values())) == 3


@pytest.mark.parametrize("server", [((), 34)], indirect=True, ids=["gate-on-1.34"])
def test_a_134_server_keeping_the_fields_gets_the_counters_in_the_device_slice(server: DriverRig) -> None:
    server.start()
    slices = server.api.wait_slices(lambda s: len(s) == 1 and len(_devices(s)) == 5)
    ((name, only),) = slices.items()
    assert name == f"{NODE}-{DRIVER}" and only["spec"]["sharedCounters"]
    assert all(d["consumesCounters"] for d in only["spec"]["devices"])
    assert _two_core_sample_after_the_shared_core([only]) == 3


@pytest.mark.parametrize(
    "server",
    [(PARTITION_FIELDS, 34), (PARTITION_FIELDS, 35)],
    indirect=True,
    ids=["gate-off-1.34", "gate-off-1.35"],
)
def test_a_server_dropping_the_fields_gets_the_per_core_fallback(server: DriverRig) -> None:
    server.start()
    slices = server.api.wait_slices(
        lambda s: len(s) == 1 and _devices(s) == ["npu-core-2", "npu-core-0", "npu-core-1"]
    )
    (only,) = slices.values()
    assert only["spec"]["pool"]["resourceSliceCount"] == 1
    # Never overlapping devices without counters: the fallback has one device per core.
    assert _two_core_sample_after_the_shared_core([only]) == 3


def _overlapping_without_counters(stored: dict[str, Any]) -> list[tuple[str, str]]:
    """Pairs of devices of one stored slice that share a core while either lacks consumesCounters
    (what the scheduler would double-book)."""
    devices = (stored.get("spec") or {}).get("devices") or []
    pairs = []
    for i, first in enumerate(devices):
        for second in devices[i + 1 :]:
            shared = device_cores(first["name"]) & device_cores(second["name"])
            if shared and not (first.get("consumesCounters") and second.get("consumesCounters")):
                pairs.append((first["name"], second["name"]))
    return pairs


@pytest.mark.parametrize(
    "server",
    [(PARTITION_FIELDS, 34), (PARTITION_FIELDS, 35)],
    indirect=True,
    ids=["gate-off-1.34", "gate-off-1.35"],
)
def test_a_server_dropping_the_fields_never_stores_overlapping_devices_even_across_a_restart(
    server: DriverRig,
) -> None:
    """The partitionable layout is tried with dryRun=All first: the server's history (every stored
    version of every slice) never holds overlapping devices without counters, neither at the first
    start nor at a restart after the kubelet wiped the slices (a new instance knows nothing)."""
    per_core = ["npu-core-2", "npu-core-0", "npu-core-1"]
    server.start()
    server.api.wait_slices(lambda s: len(s) == 1 and _devices(s) == per_core)
    first_dry_runs = server.api.dry_runs
    assert first_dry_runs >= 1
    server.end()
    server.api.delete_slices(NODE)  # the kubelet's wipe: the restart must write the pool again
    server.start()
    server.api.wait_slices(lambda s: len(s) == 1 and _devices(s) == per_core)
    assert server.api.dry_runs > first_dry_runs  # the new instance asked again, and again stored nothing
    with server.api.lock:
        history = [obj for kind, obj in server.api.events if kind != "DELETED"]
    assert history
    for stored in history:
        assert _overlapping_without_counters(stored) == [], stored
        assert len(_devices({"s": stored})) in (0, 3), stored  # per-core only, never the 5-device pool


@pytest.mark.parametrize(
    "server",
    [(PARTITION_FIELDS, 34, "partitionable"), (PARTITION_FIELDS, 35, "partitionable")],
    indirect=True,
    ids=["gate-off-1.34", "gate-off-1.35"],
)
def test_the_explicit_partitionable_layout_on_a_server_dropping_the_fields_stops_storing_nothing(
    server: DriverRig,
) -> None:
    """The user's choice has no fallback: the dry run shows the fields dropped, nothing is stored,
    and the driver stops with the error naming the gate and the fix (the process exits 1 with it:
    tests/serverkit/test_bad_inputs_servers.py, row dra-partitionable-gate-off)."""
    ended: list[BaseException | int] = []

    def driver() -> None:
        try:
            ended.append(run(server.settings, server.stop))
        except RknnLaunchError as exc:
            ended.append(exc)

    thread = threading.Thread(target=driver, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the driver kept running"
    (error,) = ended
    assert isinstance(error, RknnLaunchError) and error.exit_code == 1, error
    assert "DRAPartitionableDevices feature gate is off on this API server" in error.problem
    assert error.fix is not None and "kube-apiserver" in error.fix
    assert "--slice-layout auto" in error.fix and "per-core" in error.fix
    assert server.api.dry_runs >= 1
    with server.api.lock:
        history = [obj for kind, obj in server.api.events if kind != "DELETED"]
        stored = dict(server.api.slices)
    assert history == [] and stored == {}  # nothing stored, so nothing to double-book
    assert ("POST", "/apis/resource.k8s.io/v1/resourceslices") in server.api.requests  # the dry run


@pytest.mark.parametrize("server", [((), 35)], indirect=True, ids=["version-fails-then-1.35"])
@pytest.mark.parametrize("status", [500, 404])
def test_auto_on_a_server_of_unknown_version_offers_per_core_then_partitionable_once_told(
    server: DriverRig, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/version fails: "auto" offers one device per core (right on every server), and keeps asking;
    once /version answers and a dry run shows the fields kept, the next pass moves to the
    partitionable pool. No stored version ever holds overlapping devices without counters."""
    monkeypatch.setattr(_publisher, "RESYNC_S", 0.3)  # "later": the periodic resync asks again
    server.api.version_status = status
    server.start()
    per_core = ["npu-core-2", "npu-core-0", "npu-core-1"]
    server.api.wait_slices(lambda s: len(s) == 1 and _devices(s) == per_core)
    assert server.api.dry_runs == 0  # per-core needs no dry run
    with server.api.lock:
        server.api.version_status = None
    slices = server.api.wait_slices(lambda s: len(_devices(s)) == 5)
    assert sorted(slices) == [f"{NODE}-{DRIVER}", f"{NODE}-{DRIVER}-counters"]
    assert server.api.dry_runs >= 1
    assert _two_core_sample_after_the_shared_core(list(slices.values())) == 3
    with server.api.lock:
        history = [obj for kind, obj in server.api.events if kind != "DELETED"]
    for stored in history:
        assert _overlapping_without_counters(stored) == [], stored
