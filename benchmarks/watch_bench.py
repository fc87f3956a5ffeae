"""Prints how many 720p25 H.264 streams `rknnlaunch.streams.Watcher` sustains here, beside the two
bounds (issue 34's first targets): the decode bound (this machine's PyAV decode + BGR conversion of
the same clip, unpaced, per stream at 25 FPS) and the NPU bound (the simulated RK3588 of
benchmarks/pool_bench.py: YOLOv8n at 13.6 ms a frame per core, 3 cores = 220 FPS).

Usage: python benchmarks/watch_bench.py [--seconds S] [--max-streams N]

Each step watches N copies of one clip (a real photo panned across 1280x720, made by PyAV with
libx264 now; never committed), each paced at its 25 FPS as a camera sends it, on the simulated NPU,
for S seconds, and prints per-stream FPS (min / max), drops and p99 latency from arrival to result.
A count is sustained when every stream gets >= 90 % of 25 FPS and p99 <= 3 frame intervals. Both
bounds are measured in the same run; a loaded machine moves the decode bound, so compare ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "sdk"), str(ROOT / "tests" / "bench")]

FPS = 25
SINGLE_CORE_MS = 1000.0 / 73.5
NPU_FPS = 3 * 73.5
WARM_UP_S = 1.0


def percentile(values: list[float], percent: float) -> float:
    if not values:
        return float("inf")
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * percent // 100) - 1)]


def decode_fps(clip: Path, seconds: float = 5.0) -> float:
    """Frames a second one thread decodes and converts to BGR, unpaced (the clip looped)."""
    import av

    frames, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        with av.open(str(clip)) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_type = "AUTO"
            for frame in container.decode(stream):
                frame.to_ndarray(format="bgr24")
                frames += 1
    return frames / (time.perf_counter() - started)


def watch_step(clip: Path, count: int, seconds: float, folder: Path) -> dict[str, Any]:
    from bench_fakes import write_rknn
    from rknnlite_fake import SimulatedNpu

    from fakehost import make_host
    from rknnlaunch import Detector
    from rknnlaunch.settings._env import load_settings
    from rknnlaunch.streams import Source, StreamResult, Watcher

    step = Path(tempfile.mkdtemp(dir=folder))
    host = make_host("rk3588-drm", step / "host")
    model = write_rknn(step / "yolov8n.rknn")
    locks = step / "npu"
    locks.mkdir()
    sim = SimulatedNpu(str(locks), single_core_ms=SINGLE_CORE_MS, outputs="yolo", output_shapes=())
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    sources = [Source(str(clip), name=f"cam{i}", loop=True) for i in range(count)]
    latencies: dict[str, list[float]] = {f"cam{i}": [] for i in range(count)}
    with (
        Detector(model, settings=settings, rknnlite=sim) as detector,
        Watcher(sources, detector, keep_images=False) as watcher,
    ):
        warm = time.monotonic() + WARM_UP_S  # the contexts' first frames and the decoders' start aside
        for item in watcher.results(duration=WARM_UP_S + seconds):
            if isinstance(item, StreamResult) and item.arrival >= warm:
                latencies[item.stream].append(item.latency_ms)
        stats = watcher.stats()
    fps = [len(values) / seconds for values in latencies.values()]
    p99 = [percentile(values, 99) for values in latencies.values()]
    dropped = sum(s.dropped for s in stats.values())
    decoded = sum(s.decoded for s in stats.values())
    return {
        "min_fps": min(fps),
        "max_fps": max(fps),
        "p99_ms": max(p99),
        "drop_share": dropped / decoded if decoded else 0.0,
        "sustained": min(fps) >= 0.9 * FPS and max(p99) <= 3 * 1000 / FPS,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per step (8)")
    parser.add_argument("--max-streams", type=int, default=8, help="the last count tried (8)")
    args = parser.parse_args()
    from streams.videos import make_video

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        clip = make_video(folder / "720p25.mp4", "h264", (1280, 720), frames=10 * FPS, fps=FPS)
        decode = decode_fps(clip)
        decode_bound = decode / FPS
        npu_bound = NPU_FPS / FPS
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        print(
            f"decode bound: {decode:.0f} FPS, one decoder (FFmpeg threads auto) -> {decode_bound:.1f} streams"
        )
        print(f"NPU bound:    {NPU_FPS:.0f} FPS on 3 simulated cores -> {npu_bound:.1f} streams")
        print(
            f"{'streams':>7} {'min FPS':>8} {'max FPS':>8} {'max/min':>7} {'p99 ms':>7} "
            f"{'dropped':>7}  sustained"
        )
        sustained = 0
        for count in range(1, args.max_streams + 1):
            row = watch_step(clip, count, args.seconds, folder)
            ratio = row["max_fps"] / row["min_fps"] if row["min_fps"] else float("inf")
            print(
                f"{count:>7} {row['min_fps']:>8.1f} {row['max_fps']:>8.1f} {ratio:>7.2f} "
                f"{row['p99_ms']:>7.0f} "
                f"{row['drop_share']:>6.0%}  {'yes' if row['sustained'] else 'no'}",
                flush=True,
            )
            if row["sustained"]:
                sustained = count
        print(
            f"sustained: {sustained} streams; "
            f"min(NPU bound, decode bound) = {min(npu_bound, decode_bound):.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
