"""Prints how close `Pool` and `Detector` get to a simulated RK3588's limit (issue 11's targets).

Usage: python benchmarks/pool_bench.py [--frames N] [--repeat N] [--only multi-input]

The simulated NPU (tests/sdk/rknnlite_fake.py, `SimulatedNpu`) runs YOLOv8n at the published
13.6 ms per frame per core (73.5 FPS), one job per core at a time, across threads and processes;
``gil`` is the share of each inference call that holds the GIL (the binding's conversions). The
ideal on three cores is 3 x 73.5 = 220 FPS. "detect" cases letterbox a real 1280x720 frame and
decode real rknn_model_zoo YOLOv8 outputs inside the workers. Figures are ratios within this run,
so a loaded machine shifts them less than absolute times; each is the median of ``--repeat`` runs
(threads and processes alternating), because this machine's neighbours move single runs by 10 %.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "sdk"), str(ROOT / "tests" / "bench")]

SINGLE_CORE_MS = 1000.0 / 73.5
IDEAL_FPS = 3 * 73.5


def _setup(folder: Path) -> tuple[Path, Any]:
    from bench_fakes import write_rknn

    from fakehost import make_host
    from rknnlaunch.settings._env import load_settings

    host = make_host("rk3588-drm", folder / "host")
    model = write_rknn(folder / "yolov8n.rknn")
    return model, load_settings({"RKNNLAUNCH_ROOT": str(host.root)})


def _sim(folder: Path, **kwargs: Any) -> Any:
    from rknnlite_fake import SimulatedNpu

    locks = Path(tempfile.mkdtemp(dir=folder))
    return SimulatedNpu(str(locks), **kwargs)


def _fps(run: Any, frames: int) -> float:
    run(min(frames // 5, 30))  # warm-up: every context has run
    start = time.perf_counter()
    run(frames)
    return frames / (time.perf_counter() - start)


def infer_case(folder: Path, frames: int, workers: str, gil_ms: float, per_core: int = 1) -> float:
    import numpy as np

    import rknnlaunch

    model, settings = _setup_cached(folder)
    sim = _sim(folder, single_core_ms=SINGLE_CORE_MS, gil_ms=gil_ms)
    frame = np.zeros((640, 640, 3), np.uint8)
    with rknnlaunch.Pool(
        model,
        settings=settings,
        rknnlite=sim,
        workers=workers,  # type: ignore[arg-type]
        contexts_per_core=per_core,
    ) as pool:

        def run(count: int) -> None:
            for _ in pool.map(frame for _ in range(count)):
                pass

        return _fps(run, frames)


def detect_case(folder: Path, frames: int, workers: str, gil_ms: float, per_core: int = 1) -> float:
    import rknnlaunch
    from rknnlaunch.cli._bench import synthetic_frame

    model, settings = _setup_cached(folder)
    sim = _sim(folder, single_core_ms=SINGLE_CORE_MS, gil_ms=gil_ms, outputs="yolo", output_shapes=())
    image = synthetic_frame(1280, 720)
    with rknnlaunch.Detector(
        model,
        settings=settings,
        rknnlite=sim,
        workers=workers,  # type: ignore[arg-type]
        contexts_per_core=per_core,
    ) as detector:

        def run(count: int) -> None:
            for result in detector.stream(image for _ in range(count)):
                assert len(result.detections) == 2

        return _fps(run, frames)


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes so far (all their threads)."""
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def dispatch_overhead_us(folder: Path, workers: str, frames: int) -> tuple[float, float]:
    """What a one-context pool adds per frame over calling the runtime directly, on a zero-cost NPU,
    frames pipelined (2 in flight) as a pool runs them: (CPU us, wall-clock us). CPU counts this
    process and the worker process; it is what the pool costs, and what a loaded machine distorts
    least (wall clock also waits for a CPU)."""
    import numpy as np

    import rknnlaunch

    model, settings = _setup_cached(folder)
    sim = _sim(folder, single_core_ms=0.0)
    frame = np.zeros((640, 640, 3), np.uint8)
    me = [os.getpid()]
    with rknnlaunch.open(model, cores=[0], settings=settings, rknnlite=sim) as runtime:
        for _ in range(50):
            runtime.infer(frame)
        cpu, start = _cpu_seconds(me), time.perf_counter()
        for _ in range(frames):
            runtime.infer(frame)
        direct_wall = (time.perf_counter() - start) / frames
        direct_cpu = (_cpu_seconds(me) - cpu) / frames
    with rknnlaunch.Pool(model, cores=[1], settings=settings, rknnlite=sim, workers=workers) as pool:  # type: ignore[arg-type]
        pids = me + list(getattr(pool._workers, "pids", ()))
        for _ in pool.map(frame for _ in range(50)):
            pass
        cpu, start = _cpu_seconds(pids), time.perf_counter()
        for _ in pool.map(frame for _ in range(frames)):
            pass
        pooled_wall = (time.perf_counter() - start) / frames
        pooled_cpu = (_cpu_seconds(pids) - cpu) / frames
    return max(pooled_cpu - direct_cpu, 0.0) * 1e6, max(pooled_wall - direct_wall, 0.0) * 1e6


def _frame_us(pool: Any, frame: Any, frames: int) -> float:
    """Wall-clock microseconds per frame through ``pool``, frames pipelined as `map` runs them."""
    for _ in pool.map(frame for _ in range(50)):
        pass
    start = time.perf_counter()
    for _ in pool.map(frame for _ in range(frames)):
        pass
    return (time.perf_counter() - start) / frames * 1e6


def multi_input_ratios(folder: Path, frames: int, repeat: int) -> list[tuple[str, float, float, float]]:
    """Dispatch cost of a 3-input frame through process workers against a 1-input frame of the
    same bytes, on a zero-cost NPU: (case, single us, multi us, ratio), medians of interleaved runs."""
    import numpy as np
    from rknnfile_builder import write_rknn as write_model

    import rknnlaunch

    _, settings = _setup_cached(folder)
    cases = [
        ("3 x int64 [1, 32] (BERT-sized) vs 1 x int64 [1, 96]", "int64", 32),
        ("3 x float32 [1, 102400] vs 1 x float32 [1, 307200]", "float32", 102400),
    ]
    found = []
    for label, dtype, length in cases:
        single = write_model(
            folder / f"single-{dtype}.rknn", inputs=(("x", (1, 3 * length), dtype),), outputs=(("y", (1, 8)),)
        )
        multi = write_model(
            folder / f"multi-{dtype}.rknn",
            inputs=tuple((f"x{i}", (1, length), dtype) for i in range(3)),
            outputs=(("y", (1, 8)),),
        )
        one = np.ones((1, 3 * length), dtype)
        three = [np.ones((1, length), dtype) for _ in range(3)]
        sim = _sim(folder, single_core_ms=0.0)
        samples: dict[str, list[float]] = {"single": [], "multi": []}
        with (
            rknnlaunch.Pool(
                single, cores=[0], settings=settings, rknnlite=sim, workers="process"
            ) as pool_one,
            rknnlaunch.Pool(
                multi, cores=[1], settings=settings, rknnlite=sim, workers="process"
            ) as pool_three,
        ):
            for _ in range(repeat):  # interleaved: the machine's load shifts both alike
                samples["single"].append(_frame_us(pool_one, one, frames))
                samples["multi"].append(_frame_us(pool_three, three, frames))
        single_us, multi_us = statistics.median(samples["single"]), statistics.median(samples["multi"])
        found.append((label, single_us, multi_us, multi_us / single_us))
    return found


_CACHE: dict[Path, tuple[Path, Any]] = {}


def _setup_cached(folder: Path) -> tuple[Path, Any]:
    if folder not in _CACHE:
        _CACHE[folder] = _setup(folder)
    return _CACHE[folder]


STARTUP = """
import sys, time
start = time.perf_counter()
sys.path[:0] = {paths!r}
import rknnlaunch
from rknnlite_fake import SimulatedNpu
from rknnlaunch.settings._env import load_settings
if __name__ == "__main__":
    settings = load_settings({{"RKNNLAUNCH_ROOT": {root!r}}})
    sim = SimulatedNpu({locks!r})
    with rknnlaunch.Pool({model!r}, settings=settings, rknnlite=sim, workers="process") as pool:
        print(time.perf_counter() - start, pool.size)
"""


def startup_seconds(folder: Path) -> float:
    model, settings = _setup_cached(folder)
    locks = tempfile.mkdtemp(dir=folder)
    code = STARTUP.format(paths=sys.path[:3], root=str(settings.root), model=str(model), locks=locks)
    samples = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        samples.append(float(done.stdout.split()[0]))
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=600, help="timed frames per case (600)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the median is shown (3)")
    parser.add_argument("--only", choices=["multi-input"], help="run only that part")
    args = parser.parse_args()
    frames, repeat = args.frames, max(1, args.repeat)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        if args.only == "multi-input":
            for label, single_us, multi_us, ratio in multi_input_ratios(folder, frames, max(repeat, 5)):
                print(f"{label}: {multi_us:.0f} us vs {single_us:.0f} us = {ratio:.2f}x (target <= 1.5x)")
            return
        print(f"simulated RK3588, YOLOv8n {SINGLE_CORE_MS:.1f} ms/core, 3 cores: ideal {IDEAL_FPS:.0f} FPS")
        print(f"{'case':<44} {'threads':>14} {'processes':>16}")
        rows = [
            ("infer only, no GIL share", infer_case, 0.0, 1),
            ("infer only, 3 ms GIL-held per call", infer_case, 3.0, 1),
            ("detect 1280x720 (letterbox+infer+decode)", detect_case, 0.0, 1),
            ("detect, 3 ms GIL-held per call", detect_case, 3.0, 1),
            ("detect, 3 ms GIL, 2 contexts per core", detect_case, 3.0, 2),
        ]
        results: dict[tuple[str, str], float] = {}
        for label, case, gil, per_core in rows:
            runs: dict[str, list[float]] = {"thread": [], "process": []}
            for _ in range(repeat):
                for workers in runs:
                    runs[workers].append(case(folder, frames, workers, gil, per_core))
            cells = []
            for workers, fps_runs in runs.items():
                fps = results[label, workers] = statistics.median(fps_runs)
                cells.append(f"{fps:6.1f} ({fps / IDEAL_FPS:4.0%})")
            print(f"{label:<44} {cells[0]:>14} {cells[1]:>16}", flush=True)
        best = max(results.values()) / IDEAL_FPS
        plain_threads = results[rows[0][0], "thread"] / IDEAL_FPS
        gil_processes = max(results[label, "process"] for label in (rows[3][0], rows[4][0])) / IDEAL_FPS
        print(
            f"best mode {best:.0%} of ideal (target >= 95 %); "
            f"threads, no GIL share {plain_threads:.0%} (>= 90 %)"
        )
        print(
            "processes, 3 ms GIL, letterbox + decode, best of 1 and 2 contexts per core: "
            f"{gil_processes:.0%} (>= 93 %)"
        )
        for workers, target in (("thread", 50), ("process", 300)):
            samples = [dispatch_overhead_us(folder, workers, 3000) for _ in range(repeat)]
            cpu, wall = statistics.median(c for c, _ in samples), statistics.median(w for _, w in samples)
            print(
                f"dispatch overhead per frame, {workers:<7}: CPU {cpu:5.0f} us, wall {wall:5.0f} us "
                f"(target <= {target} us)",
                flush=True,
            )
        for label, single_us, multi_us, ratio in multi_input_ratios(folder, 2000, max(repeat, 5)):
            print(
                f"multi-input dispatch, process workers, {label}: {multi_us:5.0f} us vs {single_us:5.0f} us "
                f"= {ratio:.2f}x (target <= 1.5x)",
                flush=True,
            )
        load = os.getloadavg()[0]
        print(f"import rknnlaunch + Pool start, 3 processes: {startup_seconds(folder):.2f} s (target <= 1 s)")
        print(f"load average during the run: {load:.1f} on {os.cpu_count()} CPUs (ratios shift under load)")


if __name__ == "__main__":
    main()
