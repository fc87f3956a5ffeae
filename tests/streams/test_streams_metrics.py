"""Metrics per stream (`StreamMetrics`, ``watch --metrics-address``), and `rknnlaunch watch --view
--metrics-address` end to end: a scrape during a watch of a PyAV-made clip, and no password of any
source in any output (page, figures, script, frames' headers, metrics, stdout, stderr, --out)."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from streams.conftest import ClipMaker, free_port
from streams.observed import FakeStreams, WatchProcess, get, result_for, stats_for, until

from rknnlaunch.streams import STATES, StreamMetrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return scraped[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def metrics() -> Iterator[tuple[StreamMetrics, FakeStreams, str]]:
    streams = FakeStreams(["door", "yard"])
    with StreamMetrics("127.0.0.1:0", streams) as served:
        yield served, streams, f"http://127.0.0.1:{served.port}/metrics"


def test_every_stream_has_every_series_from_the_first_scrape(
    metrics: tuple[StreamMetrics, FakeStreams, str],
) -> None:
    _, _, url = metrics
    status, headers, body = get(url)
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=")
    scraped = samples(body.decode())
    for stream in ("door", "yard"):
        for name in (
            "frames_decoded_total",
            "frames_detected_total",
            "frames_dropped_total",
            "frames_skipped_total",
            "corrupt_packets_total",
            "reconnects_total",
            "decode_seconds_total",
            "convert_seconds_total",
            "latency_seconds_count",
        ):
            assert value(scraped, f"rknnlaunch_stream_{name}", stream=stream) == 0
        assert [value(scraped, "rknnlaunch_stream_state", stream=stream, state=s) for s in STATES] == [
            1,
            0,
            0,
            0,
            0,
            0,
        ]


def test_the_figures_and_the_latencies_are_scraped(metrics: tuple[StreamMetrics, FakeStreams, str]) -> None:
    served, streams, url = metrics
    streams.figures["door"] = stats_for(
        "door",
        state="live",
        decoder="software h264",
        decoded=100,
        detected=40,
        dropped=55,
        skipped=5,
        reconnects=2,
        corrupt=1,
        decode_ms=4.0,
        convert_ms=1.0,
    )
    image = np.zeros((32, 32, 3), np.uint8)
    for latency in (15.0, 25.0, 400.0):
        served.on_result(result_for("door", image, latency_ms=latency))
    scraped = samples(get(url)[2].decode())
    assert value(scraped, "rknnlaunch_stream_frames_decoded_total", stream="door") == 100
    assert value(scraped, "rknnlaunch_stream_frames_detected_total", stream="door") == 40
    assert value(scraped, "rknnlaunch_stream_frames_dropped_total", stream="door") == 55
    assert value(scraped, "rknnlaunch_stream_frames_skipped_total", stream="door") == 5
    assert value(scraped, "rknnlaunch_stream_reconnects_total", stream="door") == 2
    assert value(scraped, "rknnlaunch_stream_corrupt_packets_total", stream="door") == 1
    assert value(scraped, "rknnlaunch_stream_decode_seconds_total", stream="door") == pytest.approx(0.4)
    assert value(scraped, "rknnlaunch_stream_convert_seconds_total", stream="door") == pytest.approx(0.04)
    assert value(scraped, "rknnlaunch_stream_state", stream="door", state="live") == 1
    assert value(scraped, "rknnlaunch_stream_state", stream="door", state="connecting") == 0
    assert value(scraped, "rknnlaunch_stream_info", stream="door", decoder="software h264") == 1
    assert value(scraped, "rknnlaunch_stream_latency_seconds_count", stream="door") == 3
    assert value(scraped, "rknnlaunch_stream_latency_seconds_bucket", stream="door", le="0.02") == 1
    assert value(scraped, "rknnlaunch_stream_latency_seconds_bucket", stream="door", le="0.5") == 3
    assert value(scraped, "rknnlaunch_stream_latency_seconds_count", stream="yard") == 0


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_metrics_are_read_only(metrics: tuple[StreamMetrics, FakeStreams, str], method: str) -> None:
    assert get(metrics[2], method=method)[0] == 501


# --- `rknnlaunch watch --view --metrics-address` end to end -------------------------------------

LITERAL_PASSWORD = "Zq81xLiteral"
ENV_PASSWORD = "Ev77 s3cret/?"  # percent-encoded when expanded into the URL
FILE_PASSWORD = "Fi55fromTheFile"


def test_watch_serves_metrics_and_view_and_no_password_appears_anywhere(
    clip: ClipMaker, tmp_path: Path
) -> None:
    video = clip("h264", (320, 180), 25, 25)
    closed = free_port()  # nothing listens: these sources reconnect, then fail
    credentials = tmp_path / "cameras.netrc"
    credentials.write_text(f"machine 127.0.0.3 login viewer password {FILE_PASSWORD}\n")
    out = tmp_path / "results.jsonl"
    names = ["video", "literal", "env", "file"]
    args = [
        *(f"--name={name}" for name in names),
        str(video),
        f"rtsp://admin:{LITERAL_PASSWORD}@127.0.0.1:{closed}/live",
        f"rtsp://admin:${{CAM_PASSWORD}}@127.0.0.2:{closed}/live",
        f"rtsp://127.0.0.3:{closed}/live",
        "--loop",
        "--rate=5",
        "--backend=cpu",
        f"--credentials-file={credentials}",
        f"--out={out}",
        "--view=127.0.0.1:0",
        "--metrics-address=127.0.0.1:0",
    ]
    watch = WatchProcess(tmp_path, args, env={**os.environ, "CAM_PASSWORD": ENV_PASSWORD})
    outputs: dict[str, bytes] = {}
    try:
        view = watch.address("live view")
        metrics = watch.address("metrics")

        def scraped_enough() -> dict[Any, float] | None:
            scraped = samples(get(metrics + "/metrics")[2].decode())
            # the histogram sees a result when it is yielded, a moment after the counter counted it
            detected = value(scraped, "rknnlaunch_stream_latency_seconds_count", stream="video")
            failed = [value(scraped, "rknnlaunch_stream_state", stream=n, state="failed") for n in names[1:]]
            return scraped if detected >= 3 and all(failed) else None

        scraped = until(scraped_enough, "3 detections of the clip and the three unreachable cameras failed")
        for path in ("/", "/streams.json", "/view.js", *(f"/frame/{n}.jpg" for n in range(len(names)))):
            status, headers, body = get(view + path)
            assert status == 200, path
            text_part = body if not path.endswith(".jpg") else b""
            outputs[f"view {path}"] = repr(headers).encode() + text_part
        status, headers, body = get(metrics + "/metrics")
        outputs["metrics"] = repr(headers).encode() + body
        watch.process.send_signal(signal.SIGINT)
        assert watch.wait(60) == 130
    finally:
        watch.kill()
    outputs["stdout"] = watch.stdout_path.read_bytes()
    outputs["stderr"] = watch.stderr_path.read_bytes()
    outputs["--out"] = out.read_bytes()

    # the metrics of a real watch
    assert value(scraped, "rknnlaunch_stream_state", stream="video", state="live") == 1
    decoded = value(scraped, "rknnlaunch_stream_frames_decoded_total", stream="video")
    detected = value(scraped, "rknnlaunch_stream_frames_detected_total", stream="video")
    assert decoded >= detected >= 3
    assert value(scraped, "rknnlaunch_stream_latency_seconds_count", stream="video") >= 3
    assert value(scraped, "rknnlaunch_stream_decode_seconds_total", stream="video") > 0
    assert value(scraped, "rknnlaunch_stream_info", stream="video", decoder="software h264") == 1
    for name in names[1:]:
        assert value(scraped, "rknnlaunch_stream_reconnects_total", stream=name) >= 1
    assert {labels for (_, labels) in scraped if labels} and all(
        "://" not in label for (_, labels) in scraped for (_, label) in labels
    )
    # the view shows the sources masked, and the summary came on Ctrl-C
    assert b"rtsp://admin:***@127.0.0.1" in outputs["view /"]
    assert b'"summary"' in outputs["stdout"]
    # no password, as given or percent-encoded, in anything the watch wrote or served
    for password in (LITERAL_PASSWORD, ENV_PASSWORD, FILE_PASSWORD):
        for form in {password, quote(password, safe=""), quote(password)}:
            for where, data in outputs.items():
                assert form.encode() not in data, (form, where)


# --- samples/monitoring: the panels and alerts query what StreamMetrics exports ----------------

MONITORING = Path(__file__).resolve().parents[2] / "samples" / "monitoring"
STREAM_METRIC = re.compile(r"\brknnlaunch_stream_[a-z_]+\b")


def exported_stream_names() -> set[str]:
    streams = FakeStreams(["door"])
    served = StreamMetrics("127.0.0.1:0", streams)
    try:
        served.on_result(result_for("door", np.zeros((8, 8, 3), np.uint8)))
        return {name for (name, _) in samples(served.text().decode())}
    finally:
        served.close()


def test_the_dashboard_has_stream_panels_querying_our_metrics() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name for expr in exprs for name in STREAM_METRIC.findall(expr)}
    assert {
        "rknnlaunch_stream_state",
        "rknnlaunch_stream_frames_detected_total",
        "rknnlaunch_stream_frames_dropped_total",
        "rknnlaunch_stream_latency_seconds_bucket",
        "rknnlaunch_stream_decode_seconds_total",
        "rknnlaunch_stream_reconnects_total",
    } <= used
    assert used <= exported_stream_names(), used - exported_stream_names()
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert "stream" in variables


def test_the_alerts_watch_streams_not_live_and_drops_with_our_metrics() -> None:
    text = (MONITORING / "prometheusrule.yaml").read_text()
    exprs = re.findall(r"expr:\s*(.+)", text)
    used = {name for expr in exprs for name in STREAM_METRIC.findall(expr)}
    assert "RknnlaunchStreamNotLive" in text and "RknnlaunchStreamDropsRising" in text
    assert {"rknnlaunch_stream_state", "rknnlaunch_stream_frames_dropped_total"} <= used
    assert used <= exported_stream_names(), used - exported_stream_names()
