"""The monitoring samples only query metrics we export, and the dashboard is valid Grafana JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from rknnlaunch.npu import SOCS, DeviceNode, NpuInfo
from rknpu_device_plugin.telemetry._collector import NpuReading, npu_families
from rknpu_device_plugin.telemetry._nfd import textfile_text
from rknpu_device_plugin.telemetry._podresources import CoreHolder
from rknpu_device_plugin.telemetry._sink import PluginCounts, plugin_families

MONITORING = Path(__file__).resolve().parents[2] / "samples" / "monitoring"
METRIC = re.compile(r"\brknpu_[a-z_]+\b")


def exported_names() -> set[str]:
    """Every sample name the plugin's page can carry (a reading with everything present)."""
    from prometheus_client import CollectorRegistry

    render = DeviceNode("/dev/dri/renderD129", "render")
    info = NpuInfo(SOCS[0], ("rockchip,rk3588",), 3, "test", "drm", (render,))
    reading = NpuReading(
        info=info,
        load=(0.1, 0.2, 0.3),
        frequency_hz=10**9,
        temperature_celsius=45.0,
        readable={"load": True, "freq": True},
        holders=(CoreHolder(0, "ns", "pod", "c"),),
        pod_resources_up=True,
    )

    class Everything:
        def collect(self) -> list[object]:
            return [
                *npu_families(reading),
                *plugin_families(PluginCounts(health={"npu-core-0": True}, probes={0: (True, 0.2)})),
            ]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Everything())  # type: ignore[arg-type]
    text = textfile_text(registry)
    names = {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    return names | dra_names()


def dra_names() -> set[str]:
    """Every sample name the DRA driver's page can carry (each metric touched once)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from rknpu_dra_driver._metrics import DraMetrics

    metrics = DraMetrics(CollectorRegistry(auto_describe=False))
    metrics.request("prepare", 0.01, "")
    metrics.request("prepare", 0.01, "does not exist")
    metrics.slice_published(repaired=True)
    metrics.api_error("get_claim")
    metrics.collect_health({"npu-core-0": True})
    assert metrics.registry is not None
    text = generate_latest(metrics.registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_dashboard_is_grafana_json_querying_our_metrics() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dashboard["uid"] and dashboard["panels"]
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    assert "rknpu_core_allocated" in used and "rknpu_core_load_ratio" in used
    assert {"rknpu_core_probe_success", "rknpu_temperature_celsius", "rknpu_driver_info"} <= used
    assert used <= exported_names(), used - exported_names()
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_rules_query_our_metrics() -> None:
    text = (MONITORING / "prometheusrule.yaml").read_text()
    exprs = re.findall(r"expr:\s*(.+)", text)
    recorded = set(re.findall(r"record:\s*(\S+)", text))
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    assert exprs and used
    assert "rknpu_core_probe_success" in used and "rknpu_dra_device_healthy" in used
    assert used <= exported_names(), used - exported_names()
    for expr in exprs:
        for name in re.findall(r"\brknpu:[a-z_:]+\b", expr):
            assert name in recorded, name


def test_monitors_keep_our_pod_labels() -> None:
    for name in ("podmonitor.yaml", "servicemonitor.yaml"):
        text = (MONITORING / name).read_text()
        assert "honorLabels: true" in text, name
        assert "port: metrics" in text, name
