"""`rknnlaunch watch`: JSON lines, summaries, exit codes, checks before decoding, masked passwords in
every output, Ctrl-C (clips made by PyAV at test time; the simulated NPU, or the CPU backend)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from awaiting import sigint_as_in_a_terminal
from bench.bench_fakes import write_rknn
from sdk.rknnlite_fake import SimulatedNpu
from streams.conftest import ClipMaker, free_port
from streams.rtsp import RtspServer, missing_gstreamer

from rknnlaunch import Detector, RknnLaunchError
from rknnlaunch._entry import exit_code_for
from rknnlaunch.cli import _watch
from rknnlaunch.cli._main import build_parser, main
from rknnlaunch.cli._watch import execute
from rknnlaunch.npu import HostRoot
from rknnlaunch.settings import NpuSettings
from rknnlaunch.settings._env import load_settings

Npu = tuple[Path, NpuSettings, SimulatedNpu]


def watch(
    npu: Npu, *argv: str, environ: dict[str, str] | None = None, credentials: str | None = None
) -> tuple[int, str, str]:
    model, settings, sim = npu
    args = build_parser("watch").parse_args(["watch", "--model", str(model), *argv])
    out, err = io.StringIO(), io.StringIO()
    code = execute(args, settings, sim, out, err, environ or {}, credentials)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


def rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_results_events_and_a_summary_per_stream(npu: Npu, clip: ClipMaker) -> None:
    a, b = clip("h264", (320, 180), frames=25), clip("hevc", (320, 180), frames=10)
    code, out, err = watch(npu, str(a), str(b), "--name", "door", "--rate", "5")
    assert code == 0
    lines = rows(out)
    events = [r for r in lines if "event" in r]
    results = [r for r in lines if "frame" in r]
    summaries = {r["stream"]: r["summary"] for r in lines if "summary" in r}
    assert {(e["stream"], e["event"]) for e in events} >= {("door", "live"), (b.stem, "ended")}
    assert all(set(e) == {"stream", "event", "reason"} for e in events)
    assert results and all(
        set(r) == {"stream", "frame", "pts", "latency_ms", "dropped", "detections"} for r in results
    )
    detection = results[0]["detections"][0]
    assert set(detection) == {"class", "score", "box"} and isinstance(detection["class"], str)
    assert len(detection["box"]) == 4
    assert set(summaries) == {"door", b.stem}
    for figures in summaries.values():
        assert {"decoded", "detected", "dropped", "reconnects", "fps", "p50_ms", "p99_ms"} <= set(figures)
    assert summaries["door"]["decoded"] == 25 and 4 <= summaries["door"]["detected"] <= 6
    assert summaries["door"]["detected"] == len([r for r in results if r["stream"] == "door"])
    assert "rknnlaunch watch: stream door" in err and "software h264 decode" in err


def test_out_takes_the_lines_and_stdout_the_summary(npu: Npu, clip: ClipMaker, tmp_path: Path) -> None:
    target = tmp_path / "detections.jsonl"
    code, out, _ = watch(npu, str(clip("h264", (320, 180), frames=10)), "--out", str(target))
    assert code == 0
    assert all("summary" in r for r in rows(out)) and len(rows(out)) == 1
    written = rows(target.read_text())
    assert any("frame" in r for r in written) and any(r.get("event") == "ended" for r in written)


class OpenedDetectors:
    """Stands in for `Detector` in the watch command: opens the real one, keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []
        self.sizes: list[int] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Detector:
        self.asked.append(kwargs)
        detector = Detector(*args, **kwargs)
        self.sizes.append(detector.size)
        return detector


@pytest.mark.parametrize(("argv", "per_core", "contexts"), [([], 2, 6), (["--contexts-per-core", "1"], 1, 3)])
def test_two_contexts_per_core_unless_told(
    npu: Npu,
    clip: ClipMaker,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    per_core: int,
    contexts: int,
) -> None:
    # Many streams keep a core busy only when one context infers while the other's frame is
    # prepared on the CPU (docs/streams.md, "In flight"): 2 per core on the fixture's 3 cores.
    opened = OpenedDetectors()
    monkeypatch.setattr(_watch, "Detector", opened)
    code, _, _ = watch(npu, str(clip("h264", (320, 180), frames=5)), *argv)
    assert code == 0
    assert [asked["contexts_per_core"] for asked in opened.asked] == [per_core]
    assert opened.sizes == [contexts]


def test_a_single_core_npu_gets_its_two_contexts_on_core_0(
    host_factory: Callable[[str], HostRoot], clip: ClipMaker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # RK3566/3568/3562 take only mask 0: the default opens two contexts there, never an error.
    host = host_factory("rk3568")
    model = write_rknn(tmp_path / "yolov8n.rknn", "rk3568")
    (tmp_path / "npu").mkdir()
    sim = SimulatedNpu(
        str(tmp_path / "npu"), soc="rk3568", single_core_ms=2.0, outputs="yolo", output_shapes=()
    )
    opened = OpenedDetectors()
    monkeypatch.setattr(_watch, "Detector", opened)
    code, out, _ = watch(
        (model, load_settings({"RKNNLAUNCH_ROOT": str(host.root)}), sim),
        str(clip("h264", (320, 180), frames=5)),
    )
    assert code == 0 and opened.sizes == [2]
    assert any("frame" in row for row in rows(out))


def test_every_source_failed_exits_1(npu: Npu, tmp_path: Path) -> None:
    with pytest.raises(RknnLaunchError, match="every source failed") as raised:
        watch(npu, str(tmp_path / "a.mp4"), str(tmp_path / "b.mp4"))
    assert exit_code_for(raised.value) == 1


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--rate", "0"], "--rate: rate 0.0 is not a number of frames a second"),
        (["--rate", "-1"], "--rate: rate -1.0 is not"),
        (["--rate", "nan"], "--rate: rate nan is not"),
        (["--duration", "0"], "--duration 0.0 is no time"),
        (["--stall-timeout", "-2"], "--stall-timeout -2.0 is no time"),
        (["--name", "a", "--name", "b"], "2 --name for 1 source(s)"),
        (["--out", "/proc/no/such/folder/x.jsonl"], "--out /proc/no/such/folder/x.jsonl: the folder"),
        (["--out", "/"], "--out / is a folder"),
        (["--credentials-file", "/no/such/netrc"], "credentials file /no/such/netrc does not exist"),
        (["--contexts-per-core", "3"], "argument --contexts-per-core: invalid choice: 3 (choose from 1, 2)"),
        (["--contexts-per-core", "two"], "argument --contexts-per-core: invalid int value: 'two'"),
    ],
)
def test_bad_options_are_one_line_before_anything_opens(
    argv: list[str], said: str, clip: ClipMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["watch", str(clip("h264", (320, 180), frames=10)), "--backend", "cpu", *argv])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    first, *rest = captured.err.splitlines()
    assert first.startswith("rknnlaunch: error: ") and said in first, captured.err
    assert len(rest) == 1 and rest[0].startswith("  fix: ") and "Traceback" not in captured.err


def test_no_password_in_any_output(npu: Npu, clip: ClipMaker, tmp_path: Path) -> None:
    secret, other, from_env, from_file = "Pa55-one", "Pa55-two", "Pa55-env", "Pa55-file"
    credentials = tmp_path / "cameras"
    credentials.write_text(f"machine 127.0.0.1 login viewer password {from_file}\n")
    sources = [
        f"rtsp://admin:{secret}@127.0.0.1:{free_port()}/refused",
        f"rtsps://admin:{other}@127.0.0.1:{free_port()}/tls",
        "rtsp://admin:${CAM_PW}@127.0.0.1:" + str(free_port()) + "/env",
        f"rtsp://127.0.0.1:{free_port()}/netrc",
        str(clip("h264", (320, 180), frames=10)),
    ]
    server = None
    if missing_gstreamer() is None:  # a real 401 and a real 404, when GStreamer is here
        server = RtspServer(
            clip("h264", (320, 180), frames=50, fps=10), free_port(), ("/cam",), "admin", secret
        )
        server.start()
        sources += [server.url("/cam", f"admin:{other}"), server.url("/nope", f"admin:{secret}")]
    target = tmp_path / "out.jsonl"
    try:
        code, out, err = watch(
            npu,
            *sources,
            "--out",
            str(target),
            "--open-timeout",
            "2",
            "--stall-timeout",
            "2",
            environ={"CAM_PW": from_env},
            credentials=str(credentials),
        )
    finally:
        if server is not None:
            server.stop()
    assert code == 0
    everything = out + err + target.read_text()
    assert "admin:***@127.0.0.1" in everything and "401" in everything if server else True
    for password in (secret, other, from_env, from_file):
        assert password not in everything, password


def test_ctrl_c_stops_cleanly_with_the_summary(clip: ClipMaker, tmp_path: Path) -> None:
    # Also the CPU backend under watch's default --contexts-per-core 2: ignored there, no error.
    source = clip("h264", (320, 180), frames=25)
    env = {**os.environ, "RKNNLAUNCH_ROOT": str(tmp_path)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rknnlaunch",
            "watch",
            str(source),
            "--loop",
            "--backend",
            "cpu",
            "--rate",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=sigint_as_in_a_terminal,
    )
    assert process.stdout is not None
    for line in process.stdout:  # wait for the first detection
        if '"frame"' in line:
            break
    process.send_signal(signal.SIGINT)
    rest, errors = process.communicate(timeout=60)
    assert process.returncode == 130, errors
    summary = [json.loads(line) for line in rest.splitlines() if '"summary"' in line]
    assert [s["stream"] for s in summary] == [source.stem] and summary[0]["summary"]["detected"] >= 1
    assert errors.rstrip().endswith("rknnlaunch: interrupted") and "Traceback" not in errors
