"""The NFD feature file and the node-exporter textfile: content, label validity, atomic replacement."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rknnlaunch.npu import HostRoot, discover
from rknpu_device_plugin.telemetry._collector import NpuCollector, build_registry
from rknpu_device_plugin.telemetry._nfd import (
    LABEL_NAMESPACE,
    label_value,
    nfd_feature_text,
    parse_feature_text,
    remove_feature_file,
    write_feature_file,
    write_textfile,
)
from rknpu_device_plugin.telemetry._sink import PluginMetrics
from rknpu_serverkit._files import write_atomic

NS = LABEL_NAMESPACE
# Kubernetes' label grammar: qualified name (prefix/name) and value.
LABEL_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def test_rk3588_feature_file(host_factory: Callable[[str], HostRoot]) -> None:
    info = discover(host_factory("rk3588-drm"))
    text = nfd_feature_text(info)
    assert text.startswith("# ")
    assert "+expiry-time" not in text
    assert parse_feature_text(text) == {
        f"{NS}/present": "true",
        f"{NS}/soc": "rk3588",
        f"{NS}/npu-family": "RKNPU2-V2",
        f"{NS}/cores": "3",
        f"{NS}/driver-version": "0.9.8",
        f"{NS}/runtime-mode": "drm",
        f"{NS}/core-mask": "pinned",
        f"{NS}/board": "radxa_rock-5b",
    }


@pytest.mark.parametrize(
    ("host_name", "expected"),
    [
        ("rk3588-misc", {"soc": "rk3588", "cores": "3", "runtime-mode": "misc", "driver-version": "0.9.6"}),
        ("rk3576", {"soc": "rk3576", "cores": "2", "runtime-mode": "drm", "core-mask": "pinned"}),
        (
            "rk3568",
            {
                "soc": "rk3568",
                "cores": "1",
                "core-mask": "auto-only",
                "driver-version": "0.8.2",
                "npu-family": "RKNPU2-LITE",
            },
        ),
    ],
)
def test_feature_file_per_board(
    host_factory: Callable[[str], HostRoot], host_name: str, expected: dict[str, str]
) -> None:
    labels = parse_feature_text(nfd_feature_text(discover(host_factory(host_name))))
    for name, value in expected.items():
        assert labels[f"{NS}/{name}"] == value, name
    for name, value in labels.items():
        assert LABEL_NAME.fullmatch(name), name
        assert len(value) <= 63 and LABEL_VALUE.fullmatch(value), (name, value)


def test_core_count_comes_from_the_driver(host_factory: Callable[[str], HostRoot], tmp_path: Path) -> None:
    """An RK3582 reports rockchip,rk3588 with core 2 fused off: the driver's load file says 2 cores."""
    host = host_factory("rk3588-drm")
    (host.root / "sys/kernel/debug/rknpu/load").write_text("NPU load:  Core0:  0%, Core1:  0%,\n")
    assert parse_feature_text(nfd_feature_text(discover(host)))[f"{NS}/cores"] == "2"


def test_expiry_directive(host_factory: Callable[[str], HostRoot]) -> None:
    info = discover(host_factory("rk3588-drm"))
    when = datetime(2026, 11, 30, 3, 4, 5, 678, tzinfo=timezone.utc)
    text = nfd_feature_text(info, expires_at=when)
    assert "# +expiry-time=2026-11-30T03:04:05Z\n" in text
    # The directive must come before the labels it applies to.
    assert text.index("+expiry-time") < text.index(f"{NS}/present")


@pytest.mark.parametrize(
    ("raw", "value"),
    [("0.9.8", "0.9.8"), ("radxa,rock-5b", "radxa_rock-5b"), ("-x-", "x"), ("a" * 80, "a" * 63), ("", "")],
)
def test_label_value(raw: str, value: str) -> None:
    assert label_value(raw) == value


def test_write_feature_file_replaces_atomically(
    host_factory: Callable[[str], HostRoot], tmp_path: Path
) -> None:
    info = discover(host_factory("rk3588-drm"))
    features = tmp_path / "features.d"
    path = write_feature_file(features, info)
    assert path == features / "rknpu"
    assert path.read_text() == nfd_feature_text(info)
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    first_inode = path.stat().st_ino
    write_feature_file(features, info, datetime(2030, 1, 1, tzinfo=timezone.utc))
    assert path.stat().st_ino != first_inode  # renamed into place, not rewritten in place
    assert "+expiry-time=2030-01-01T00:00:00Z" in path.read_text()
    assert sorted(os.listdir(features)) == ["rknpu"]  # no temp file left behind
    assert remove_feature_file(features) is True
    assert remove_feature_file(features) is False


def test_readers_never_see_a_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "rknpu.prom"
    big_a, big_b = "a" * 200_000 + "\n", "b" * 300_000 + "\n"
    write_atomic(target, big_a)
    stop = threading.Event()
    seen: set[int] = set()

    def reader() -> None:
        while not stop.is_set():
            seen.add(len(target.read_text()))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(100):
            write_atomic(target, big_b if i % 2 else big_a)
    finally:
        stop.set()
        thread.join()
    assert seen <= {len(big_a), len(big_b)}


def test_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "rknpu"
    write_atomic(target, "old\n")

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["rknpu"]


def test_textfile_has_the_npu_metrics_and_no_process_metrics(
    host_factory: Callable[[str], HostRoot], tmp_path: Path
) -> None:
    host = host_factory("rk3576")
    info = discover(host)
    (host.root / "sys/kernel/debug/rknpu/load").write_text("NPU load:  Core0:  25%, Core1:  75%,\n")
    registry = build_registry(NpuCollector(host, lambda: info), PluginMetrics(), process_metrics=False)
    path = write_textfile(tmp_path / "textfile", registry)
    assert path.name == "rknpu.prom"
    families = {family.name: family for family in text_string_to_metric_families(path.read_text())}
    assert not [name for name in families if name.startswith("process_")]
    load = {s.labels["core"]: s.value for s in families["rknpu_core_load_ratio"].samples}
    assert load == {"0": 0.25, "1": 0.75}
    assert families["rknpu_frequency_hertz"].samples[0].value == 1e9
    assert sorted(os.listdir(tmp_path / "textfile")) == ["rknpu.prom"]
