"""`rknnlaunch.Detector` on the simulated NPU: stages in the workers, order, back-pressure, latest-only."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bench.bench_fakes import write_rknn
from sdk.rknnlite_fake import FakeNpu, FakeRKNNLite, SimulatedNpu

import rknnlaunch
from rknnlaunch import Detector, InferenceError, UsageError
from rknnlaunch.npu import HostRoot, soc_by_name
from rknnlaunch.settings._env import load_settings

HostFactory = Callable[[str], HostRoot]
NONE = 251
# What the simulated model sees in 640x640 input pixels, mapped back to a 1280x720 frame.
BOXES = [[200.0, 0.0, 600.0, 520.0], [800.0, 320.0, 920.0, 480.0]]


@pytest.fixture
def setup(host_factory: HostFactory, tmp_path: Path) -> tuple[Path, Any, SimulatedNpu]:
    host = host_factory("rk3588-drm")
    model = write_rknn(tmp_path / "yolov8n.rknn")
    locks = tmp_path / "npu"
    locks.mkdir()
    sim = SimulatedNpu(str(locks), single_core_ms=2.0, outputs="yolo", output_shapes=(), none_value=NONE)
    return model, load_settings({"RKNNLAUNCH_ROOT": str(host.root)}), sim


def camera_frame(value: int = 90) -> np.ndarray:
    return np.full((720, 1280, 3), value, np.uint8)


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_stream_runs_every_stage_in_the_workers_in_order(
    setup: tuple[Path, Any, SimulatedNpu], workers: str
) -> None:
    model, settings, sim = setup
    pulled: list[int] = []

    def frames() -> Iterator[np.ndarray]:
        for index in range(24):
            pulled.append(index)
            yield camera_frame(index)

    with Detector(model, settings=settings, rknnlite=sim, workers=workers) as detector:  # type: ignore[arg-type]
        assert detector.size == 3 and detector.backend == "npu"
        found = detector(camera_frame())
        assert found.boxes.round().tolist() == BOXES and found.class_ids.tolist() == [0, 2]
        results = detector.stream(frames(), in_flight=3)
        first = next(results)
        assert first.index == 0 and len(pulled) == 3  # back-pressure: the source is not read ahead
        rest = list(results)
        assert [r.index for r in [first, *rest]] == list(range(24))
        for result in [first, *rest]:
            assert result.detections.boxes.round().tolist() == BOXES
            t = result.timings
            assert min(t.pre_ms, t.infer_ms, t.post_ms, t.queue_ms) >= 0 and t.infer_ms >= 2.0
            assert t.total_ms >= t.pre_ms + t.infer_ms + t.post_ms
            assert result.context in detector.labels and result.class_count == 80
        with pytest.raises(
            UsageError, match=r"float32 of shape \(720, 1280, 3\); the detector takes a BGR uint8"
        ):
            detector.submit(camera_frame().astype(np.float32))
        with pytest.raises(UsageError, match=r"shape \(720, 1280\)"):
            detector(np.zeros((720, 1280), np.uint8))
        mixed = [camera_frame(1), camera_frame(NONE), camera_frame(2)]
        outcomes = detector.stream(mixed)
        assert next(outcomes).index == 0
        with pytest.raises(InferenceError, match="returned no outputs"):
            next(outcomes)
        assert [r.index for r in detector.stream(mixed[::2])] == [0, 1]  # the detector goes on


class _GatedLite(FakeRKNNLite):
    """Inference waits for ``gate``: frames pile up at the source meanwhile."""

    gate = threading.Event()

    def inference(self, inputs: list[Any], **kwargs: Any) -> Any:
        self.gate.wait()
        return super().inference(inputs)


def test_latest_only_drops_frames_that_would_arrive_late(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    model, settings, _sim = setup
    soc = soc_by_name("rk3588")
    assert soc is not None
    npu = FakeNpu(soc)
    _GatedLite.gate.clear()

    def source() -> Iterator[np.ndarray]:
        for _ in range(10):
            yield camera_frame(0)
        _GatedLite.gate.set()  # every frame has reached the reader: let the NPU finish

    with Detector(model, settings=settings, rknnlite=lambda: _GatedLite(npu), max_contexts=1) as detector:
        results = list(detector.stream(source(), in_flight=1, latest_only=True))
    indices = [r.index for r in results]
    assert indices == sorted(indices) and indices[-1] == 9
    assert len(results) + sum(r.dropped for r in results) == 10 and sum(r.dropped for r in results) > 0


def test_one_context_is_the_latency_path(setup: tuple[Path, Any, SimulatedNpu]) -> None:
    model, settings, sim = setup
    with Detector(model, settings=settings, rknnlite=sim, one_context=True) as detector:
        assert detector.labels == ("NPU rk3588 cores 0,1,2 (mask 7)",)
        assert detector.detect(camera_frame()).context == "NPU rk3588 cores 0,1,2 (mask 7)"
    with pytest.raises(UsageError, match="max_contexts=0"):
        Detector(model, settings=settings, rknnlite=sim, max_contexts=0)
    with pytest.raises(UsageError, match="pad"):
        Detector(model, settings=settings, rknnlite=sim, pad=300)
    assert rknnlaunch.Detector is Detector
