"""The rknpu-exporter command: settings, one-shot writes, and a real process serving and writing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from awaiting import PATIENCE, Child, eventually
from fake_podresources import Assignment, PodResourcesServer
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from rknnlaunch import UsageError
from rknnlaunch.npu import HostRoot
from rknpu_device_plugin.exporter._exporter import Exporter, main, parse_settings
from rknpu_device_plugin.telemetry._nfd import LABEL_NAMESPACE, parse_feature_text

NS = LABEL_NAMESPACE


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RKNPU_EXPORTER_INTERVAL", "5")
    monkeypatch.setenv("RKNPU_EXPORTER_TEXTFILE_DIR", "/var/lib/node_exporter")
    monkeypatch.setenv("RKNPU_EXPORTER_LOG_LEVEL", "DEBUG")
    from_env = parse_settings([])
    assert from_env.interval == 5.0
    assert from_env.textfile_dir == Path("/var/lib/node_exporter")
    assert from_env.log_level == "debug"
    assert from_env.expiry_seconds() == 600.0
    flagged = parse_settings(["--interval", "120", "--nfd-expiry", "0"])
    assert flagged.interval == 120.0
    assert flagged.expiry_seconds() is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "nothing to do"),
        (["--once", "--metrics-address", ":9102"], "--once"),
        (["--textfile-dir", "/tmp/x", "--soc", "rk9999"], "unknown SoC"),
        (["--textfile-dir", "/tmp/x", "--interval", "0"], "interval"),
        (["--textfile-dir", "/tmp/x", "--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_settings_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("RKNPU_EXPORTER_"):
            monkeypatch.delenv(name)
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_settings(argv)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_once_writes_both_files(host_factory: Callable[[str], HostRoot], tmp_path: Path) -> None:
    host = host_factory("rk3588-drm")
    nfd, textfile = tmp_path / "features.d", tmp_path / "textfile"
    argv = [
        "--once",
        "--host-root",
        str(host.root),
        "--nfd-dir",
        str(nfd),
        "--textfile-dir",
        str(textfile),
        "--pod-resources-socket",
        "",
    ]
    assert main(argv) == 0
    feature_text = (nfd / "rknpu").read_text()
    assert "+expiry-time" not in feature_text  # one-shot labels do not expire
    assert parse_feature_text(feature_text)[f"{NS}/soc"] == "rk3588"
    names = {family.name for family in text_string_to_metric_families((textfile / "rknpu.prom").read_text())}
    assert {"rknpu_discovered", "rknpu_core_load_ratio", "rknpu_frequency_hertz", "rknpu_info"} <= names
    assert "rknpu_pod_resources_up" not in names  # attribution off with an empty socket


def test_once_without_npu_fails_and_drops_the_labels(
    host_factory: Callable[[str], HostRoot], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = host_factory("no-npu")
    nfd = tmp_path / "features.d"
    nfd.mkdir()
    (nfd / "rknpu").write_text(f"{NS}/present=true\n")  # left from when the NPU was there
    assert main(["--once", "--host-root", str(host.root), "--nfd-dir", str(nfd)]) == 1
    assert not (nfd / "rknpu").exists()
    err = capsys.readouterr().err
    assert "no Rockchip NPU found" in err and "fix:" in err


def test_unknown_soc_names_the_exporters_soc_flag(
    host_factory: Callable[[str], HostRoot], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fakehost import device_tree

    host = host_factory("rk3588-drm")
    device_tree(host.root, b"acme,board\0acme,soc9\0")
    assert main(["--once", "--host-root", str(host.root), "--textfile-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    # The shared model's fix names the SDK's RKNN_NPU_SOC; the exporter's knob is --soc.
    assert "acme,soc9" in err and "RKNPU_EXPORTER_SOC" in err and "RKNN_NPU_SOC" not in err


def test_periodic_labels_expire(host_factory: Callable[[str], HostRoot], tmp_path: Path) -> None:
    host = host_factory("rk3576")
    now = datetime(2026, 11, 30, 2, 0, tzinfo=timezone.utc)
    settings = parse_settings(
        [
            "--host-root",
            str(host.root),
            "--nfd-dir",
            str(tmp_path),
            "--interval",
            "120",
            "--pod-resources-socket",
            "",
        ]
    )
    exporter = Exporter(settings, now=lambda: now)
    try:
        exporter.write_outputs()
    finally:
        exporter.close()
    expected = (now + timedelta(seconds=1200)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"# +expiry-time={expected}" in (tmp_path / "rknpu").read_text()


@contextlib.contextmanager
def _serving_process(argv: list[str], env: dict[str, str]) -> Iterator[tuple[Child[str], str]]:
    """Run ``python argv`` until it logs its metrics URL; yield (child, URL); kill it if still alive."""
    child = Child([sys.executable, *argv], parse=str, env=env)
    try:
        line = child.wait_line(lambda text: "serving metrics on http://" in text)
        match = re.search(r"serving metrics on (http://\S+)", line)
        assert match is not None
        yield child, match.group(1)
    finally:
        if child.poll() is None:
            child.process.kill()
        child.wait()


def test_exporter_process_serves_and_writes(
    host_factory: Callable[[str], HostRoot], tmp_path: Path, pod_resources: PodResourcesServer
) -> None:
    host = host_factory("rk3588-drm")
    pod_resources.fake.set([Assignment("vision", "yolo", "infer", ["npu-core-1"])])
    nfd, textfile = tmp_path / "features.d", tmp_path / "textfile"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKNPU_EXPORTER_")}
    env["RKNPU_EXPORTER_POD_RESOURCES_SOCKET"] = pod_resources.socket_path
    argv = [
        "-m",
        "rknpu_device_plugin.exporter._exporter",
        "--host-root",
        str(host.root),
        "--metrics-address",
        "127.0.0.1:0",
        "--nfd-dir",
        str(nfd),
        "--textfile-dir",
        str(textfile),
        "--interval",
        "0.2",
    ]
    with _serving_process(argv, env) as (proc, url):
        with urllib.request.urlopen(url, timeout=5) as response:
            page = response.read().decode()
        families = {f.name: f for f in text_string_to_metric_families(page)}
        [held] = families["rknpu_core_allocated"].samples
        assert held.labels == {"core": "1", "pod": "yolo", "namespace": "vision", "container": "infer"}
        assert "process_cpu_seconds" in families

        files = (nfd / "rknpu", textfile / "rknpu.prom")
        assert eventually(lambda: all(path.exists() for path in files), bool), "the files"
        assert parse_feature_text((nfd / "rknpu").read_text())[f"{NS}/cores"] == "3"
        # The textfile follows the driver from one interval to the next.
        load = host.root / "sys/kernel/debug/rknpu/load"
        load.write_text("NPU load:  Core0: 0%, Core1:  42%, Core2: 0%,\n")
        shown = eventually(lambda: (textfile / "rknpu.prom").read_text(), lambda text: "0.42" in text)
        assert 'rknpu_core_load_ratio{core="1"} 0.42' in shown, "the textfile to show the new load"

        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0


def test_plugin_process_serves_its_metrics(
    host_factory: Callable[[str], HostRoot], tmp_path: Path, pod_resources: PodResourcesServer
) -> None:
    """The device plugin's --metrics-address wiring (contract in CONTEXT.md), end to end."""
    host = host_factory("rk3576")
    plugin_dir = tmp_path / "device-plugins"
    plugin_dir.mkdir()
    pod_resources.fake.set([Assignment("vision", "yolo", "infer", ["npu-core-0"])])
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKNPU_PLUGIN_")}
    argv = [
        "-m",
        "rknpu_device_plugin",
        "--host-root",
        str(host.root),
        "--device-plugin-dir",
        str(plugin_dir),
        "--metrics-address",
        "127.0.0.1:0",
        "--pod-resources-socket",
        pod_resources.socket_path,
    ]
    with _serving_process(argv, env) as (proc, url):

        def page() -> dict[str, list[Sample]]:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
            return {f.name: f.samples for f in text_string_to_metric_families(text)}

        # Health arrives from the plugin's first scan, just after the server starts.
        families = eventually(page, lambda found: len(found.get("rknpu_device_healthy", [])) == 2)
        health = {s.labels["device"]: s.value for s in families["rknpu_device_healthy"]}
        assert health == {"npu-core-0": 1.0, "npu-core-1": 1.0}
        [held] = families["rknpu_core_allocated"]
        assert held.labels["pod"] == "yolo"
        assert "rknpu_registrations" in families and "rknpu_core_load_ratio" in families
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0


class _Trickler:
    """A scrape client that sends its request one byte every 0.5 s (and never finishes)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.cut = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self) -> None:
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"y" * 1000
        for byte in request:
            try:
                self.sock.sendall(bytes([byte]))
            except OSError:
                break
            if self._stop.wait(0.5):
                return
        self.cut.set()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.mark.parametrize("command", ["exporter", "plugin"])
def test_sigterm_ends_the_process_whatever_a_scrape_client_does_and_every_line_is_json(
    command: str, host_factory: Callable[[str], HostRoot], tmp_path: Path
) -> None:
    host = host_factory("rk3588-drm")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKNPU_")}
    common = ["--host-root", str(host.root), "--metrics-address", "127.0.0.1:0", "--log-format", "json"]
    if command == "exporter":
        argv = ["-m", "rknpu_device_plugin.exporter._exporter", *common, "--pod-resources-socket", ""]
    else:
        (tmp_path / "dp").mkdir()
        argv = ["-m", "rknpu_device_plugin", *common, "--device-plugin-dir", str(tmp_path / "dp")]
        argv += ["--pod-resources-socket", ""]
    proc = Child([sys.executable, *argv], parse=str, env=env)
    try:
        line = proc.wait_line(lambda text: "serving metrics on http://" in text)
        match = re.search(r"serving metrics on (http://\S+)", str(json.loads(line)["msg"]))
        assert match is not None
        url = match.group(1)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with urllib.request.urlopen(url, timeout=5) as response:
            assert "Server" not in response.headers  # no "WSGIServer/0.2 CPython/3.x" banner
        trickler = _Trickler(port)
        stalled = socket.create_connection(("127.0.0.1", port))  # connects, never sends
        try:
            # The trickler is cut at the request deadline although it never stalls a full second.
            assert trickler.cut.wait(PATIENCE)
            trickler2 = _Trickler(port)
            proc.signal(signal.SIGTERM)
            # The benchmark measures the exit time (< 1 s); here, that it exits at all, loaded or not.
            assert proc.wait(timeout=30) == 0
            trickler2.close()
        finally:
            trickler.close()
            stalled.close()
    finally:
        if proc.poll() is None:
            proc.process.kill()
        proc.wait()  # its output drained: every line is read
    seen: list[dict[str, object]] = [
        json.loads(text) for text in proc.lines
    ]  # every line is JSON, or this fails
    assert any("went away" in str(entry["msg"]) for entry in seen), seen
    assert not [entry for entry in seen if entry["level"] == "error"], seen
