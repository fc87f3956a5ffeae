"""Stream-test fixtures: clips made by PyAV at test time (cached for the session, never committed)
and a `Detector` on the simulated RK3588 NPU (tests/sdk/rknnlite_fake.py's `SimulatedNpu`)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("av", reason="PyAV is the video extra: pip install -e '.[dev]' brings it")
pytest.importorskip("cv2", reason="the clips are made from a photo read by OpenCV (vision extra)")

from bench.bench_fakes import write_rknn
from sdk.rknnlite_fake import SimulatedNpu
from streams.videos import make_video

from rknnlaunch import Detector
from rknnlaunch.npu import HostRoot
from rknnlaunch.settings import NpuSettings
from rknnlaunch.settings._env import load_settings

ClipMaker = Callable[..., Path]


@pytest.fixture(scope="session")
def clip(tmp_path_factory: pytest.TempPathFactory) -> ClipMaker:
    """``clip(codec, (w, h), frames, fps, gop=None, suffix=".mp4")``: a panned-photo clip, made once."""
    folder = tmp_path_factory.mktemp("clips")
    made: dict[tuple[Any, ...], Path] = {}

    def make(
        codec: str = "h264",
        size: tuple[int, int] = (320, 180),
        frames: int = 25,
        fps: int = 25,
        gop: int | None = None,
        suffix: str = ".mp4",
    ) -> Path:
        key = (codec, size, frames, fps, gop, suffix)
        if key not in made:
            name = f"{codec}-{size[0]}x{size[1]}-{frames}f-{fps}fps-gop{gop}{suffix}"
            made[key] = make_video(folder / name, codec, size, frames, fps, gop)
        return made[key]

    return make


@pytest.fixture
def npu(host_factory: Callable[[str], HostRoot], tmp_path: Path) -> tuple[Path, NpuSettings, SimulatedNpu]:
    """(model, settings, rknnlite factory): a YOLO .rknn on a fixture RK3588 with the simulated NPU
    (2 ms a frame per core unless a test makes its own `SimulatedNpu`)."""
    host = host_factory("rk3588-drm")
    model = write_rknn(tmp_path / "yolov8n.rknn")
    locks = tmp_path / "npu"
    locks.mkdir()
    sim = SimulatedNpu(str(locks), single_core_ms=2.0, outputs="yolo", output_shapes=())
    return model, load_settings({"RKNNLAUNCH_ROOT": str(host.root)}), sim


@pytest.fixture
def detector_factory(npu: tuple[Path, NpuSettings, SimulatedNpu]) -> Iterator[Callable[..., Detector]]:
    """``detector_factory(single_core_ms=2.0, cores=None)``: a started `Detector` on the simulated NPU."""
    model, settings, sim = npu
    opened: list[Detector] = []

    def open_detector(single_core_ms: float = 2.0, cores: list[int] | None = None) -> Detector:
        factory = SimulatedNpu(sim.lock_dir, single_core_ms=single_core_ms, outputs="yolo", output_shapes=())
        detector = Detector(model, cores=cores, settings=settings, rknnlite=factory)  # type: ignore[arg-type]
        opened.append(detector)
        return detector

    yield open_detector
    for detector in opened:
        detector.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
