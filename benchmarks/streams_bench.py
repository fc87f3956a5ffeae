"""Prints issue 34's stream targets beside their figures, measured in one run (not timed tests).

Usage: python benchmarks/streams_bench.py [--step-seconds S] [--soak-minutes M] [--contexts-per-core N]
       [--only PART]

- Simulated RK3588 (pool_bench's `SimulatedNpu`: YOLOv8n 13.6 ms per core, 3 cores) with real
  H.264 720p25 decode by PyAV here. The NPU bound (3 x 1000/13.6 FPS / 25) and the decode bound
  (PyAV decode + BGR conversion FPS of the same clip, with the threads a stream's decoder uses, / 25)
  are both measured in this run; `rknnlaunch bench --streams`' ramp finds the streams sustained.
- At twice that count: every stream's FPS (max/min) and p99 latency arrival -> result.
- A stream from GStreamer's RTSP server (tests/streams/rtsp.py's `RtspServer`), the server stopped 10 s and
  started again: when that stream's results resume, and the other streams' FPS meanwhile.
- A soak with 8 streams (``--soak-minutes``; the target is 30): VmRSS and /proc/self/fd sampled.

The machine is shared: each figure is printed with the 1-minute load average measured beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))

from pool_bench import SINGLE_CORE_MS, _setup, _sim  # noqa: E402  (the simulated NPU, one place)

RATE = 25
SIZE = (1280, 720)
NPU_CORES = 3


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}/{os.cpu_count()} CPUs"


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def open_detector(folder: Path, workers: str, contexts_per_core: int) -> Any:
    import rknnlaunch

    model, settings = _setup(folder)
    sim = _sim(folder, single_core_ms=SINGLE_CORE_MS, outputs="yolo", output_shapes=())
    return rknnlaunch.Detector(
        model,
        settings=settings,
        rknnlite=sim,
        workers=workers,  # type: ignore[arg-type]  # argparse's choices: "thread" or "process"
        contexts_per_core=contexts_per_core,
    )


def make_clip(folder: Path, name: str, size: tuple[int, int], seconds: float) -> Any:
    from rknnlaunch.bench._video import make_video, probe_video

    path = make_video(folder / name, "h264", size, frames=int(seconds * RATE), fps=RATE)
    return probe_video(path)


def decode_fps(path: Path, repeat: int = 3) -> tuple[float, float]:
    """(decode only, decode + BGR conversion) FPS of ``path``: one decoder with the settings a stream's
    reader uses (`software_context`: FFmpeg's frame and slice threads), median of ``repeat`` passes."""
    import av

    from rknnlaunch.streams._decode import software_context

    plain: list[float] = []
    converted: list[float] = []
    for convert in (False, True) * repeat:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            context = software_context(stream)
            count, start = 0, time.perf_counter()
            for packet in container.demux(stream):
                for frame in context.decode(packet):
                    if convert:
                        frame.to_ndarray(format="bgr24")
                    count += 1
            fps = count / (time.perf_counter() - start)
        (converted if convert else plain).append(fps)
    return statistics.median(plain), statistics.median(converted)


# --- 1 and 2: the ramp, and twice its count ----------------------------------------------------------


def sustained_part(detector: Any, clip: Any, step_seconds: float) -> tuple[int, float]:
    from rknnlaunch.bench._streams import StreamRamp, run_ramp

    npu_bound = NPU_CORES * (1000.0 / SINGLE_CORE_MS) / RATE
    before = decode_fps(clip.path)
    print(
        f"decode bound before the ramp: {before[0]:.0f} FPS decode only, {before[1]:.0f} FPS decode + "
        f"BGR conversion ({load()})",
        flush=True,
    )
    ramp = StreamRamp(
        clip,
        float(RATE),
        3000.0 / RATE,
        f"simulated RK3588, 3 cores, {detector.size} contexts",
        max_streams=24,
        contexts=detector.size,
    )
    run_ramp(
        detector,
        ramp,
        step_seconds,
        on_step=lambda step: print("  " + step.line(ramp.rate, ramp.bound_ms), flush=True),
    )
    after = decode_fps(clip.path)
    print(
        f"decode bound after the ramp: {after[0]:.0f} FPS decode only, {after[1]:.0f} FPS decode + "
        f"BGR conversion ({load()})",
        flush=True,
    )
    decode_only = statistics.mean([before[0], after[0]]) / RATE
    decode_bound = statistics.mean([before[1], after[1]]) / RATE
    bound = min(npu_bound, decode_bound)
    sustained = ramp.sustained
    print(ramp.figure())
    print(
        f"[1] bounds: NPU {npu_bound:.2f} streams (3 x {1000 / SINGLE_CORE_MS:.1f} FPS / {RATE}); decode "
        f"{decode_bound:.2f} streams with BGR conversion (a stream's reader converts every frame a "
        f"core takes), {decode_only:.2f} decode only"
    )
    ratio = sustained / bound if bound else 0.0
    print(
        f"[1] TARGET streams sustained >= 90 % of min(NPU bound, decode bound): {sustained} of "
        f"{bound:.2f} = {ratio:.0%} -> {verdict(ratio >= 0.9)} "
        f"(of the whole streams within the bound, {max(int(bound), 1)}: "
        f"{sustained / max(int(bound), 1):.0%}; {load()})",
        flush=True,
    )
    return sustained, bound


def twice_part(detector: Any, clip: Any, count: int, step_seconds: float) -> None:
    from rknnlaunch.bench._streams import measure_step

    step = measure_step(detector, clip, count, None, step_seconds)
    print("  " + step.line(float(RATE), 3000.0 / RATE))
    spread = step.max_fps / step.min_fps if step.min_fps else float("inf")
    p99 = step.worst_p99_ms
    bound = 3000.0 / RATE
    every = all(s.results > 0 for s in step.streams)
    ok = every and spread <= 1.5 and p99 is not None and p99 <= bound
    print(
        f"[2] TARGET at twice the sustained count ({count} streams) every stream gets results, max/min FPS "
        f"<= 1.5, p99 <= {bound:.0f} ms: every stream {'yes' if every else 'NO'}, FPS {step.min_fps:.1f}.."
        f"{step.max_fps:.1f} = {spread:.2f}x, worst p99 {p99 if p99 is None else round(p99)} ms -> "
        f"{verdict(ok)} ({load()})",
        flush=True,
    )


# --- 3: an RTSP server stopped and started again --------------------------------------------------------


def rtsp_part(detector: Any, clip: Any, rtsp_clip: Path, others: int, outage: float = 10.0) -> None:
    from streams.conftest import free_port
    from streams.rtsp import PACKAGES, RtspServer, missing_gstreamer

    from rknnlaunch.streams import Source, StreamEvent, StreamResult, Watcher

    why = missing_gstreamer()
    if why is not None:
        print(f"[3] NOT MEASURED: GStreamer's RTSP server is not usable ({why}): apt-get install {PACKAGES}")
        return
    server = RtspServer(rtsp_clip, free_port())
    url = server.url()
    sources = [Source(url, name="rtsp")] + [
        Source(str(clip.path), name=f"s{i + 1}", loop=True) for i in range(others)
    ]
    server.start()
    arrivals: dict[str, list[float]] = {source.name or "": [] for source in sources}
    events: list[str] = []
    baseline = 12.0
    try:
        with Watcher(sources, detector, keep_images=False) as watcher:
            start = time.monotonic()
            stopped_at = restarted_at = None
            after = 12.0
            for item in watcher.results(baseline + outage + after + 3):
                now = time.monotonic()
                if isinstance(item, StreamResult):
                    arrivals[item.stream].append(item.arrival)
                elif isinstance(item, StreamEvent) and item.stream == "rtsp":
                    events.append(f"{now - start:6.2f} s {item.event}: {item.reason[:90]}")
                if stopped_at is None and now - start >= baseline:
                    server.stop()
                    stopped_at = time.monotonic()
                elif stopped_at is not None and restarted_at is None and now - stopped_at >= outage:
                    server.start()  # returns once it says it listens
                    restarted_at = time.monotonic()
    finally:
        server.stop()
    for line in events:
        print(f"  rtsp event at {line}")
    assert stopped_at is not None and restarted_at is not None
    resumed = [t for t in arrivals["rtsp"] if t > restarted_at]
    resume_s = resumed[0] - restarted_at if resumed else float("inf")
    before_rtsp = [t for t in arrivals["rtsp"] if t < stopped_at]
    worst = 0.0
    for name, times in arrivals.items():
        if name == "rtsp":
            continue
        fps_before = sum(1 for t in times if start + 2 <= t < stopped_at) / (stopped_at - start - 2)
        end = restarted_at + after
        fps_during = sum(1 for t in times if stopped_at <= t < end) / (end - stopped_at)
        change = abs(fps_during - fps_before) / fps_before if fps_before else float("inf")
        worst = max(worst, change)
        print(f"  {name}: {fps_before:.1f} FPS before the stop, {fps_during:.1f} during the outage and after")
    ok = resume_s <= 3.0 and worst <= 0.10
    print(
        f"[3] TARGET RTSP server stopped {outage:.0f} s and started again: results resume <= 3 s, "
        f"others' FPS within 10 %: rtsp had {len(before_rtsp)} results before the stop, resumed "
        f"{resume_s:.2f} s after the server was listening again; others' worst FPS change "
        f"{worst:.1%} -> {verdict(ok)} ({load()})",
        flush=True,
    )


# --- 4: the soak ---------------------------------------------------------------------------------------


def rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def soak_part(detector: Any, clip: Any, minutes: float, streams: int = 8) -> None:
    from rknnlaunch.streams import Source, StreamResult, Watcher

    sources = [Source(str(clip.path), name=f"s{i + 1}", loop=True) for i in range(streams)]
    seconds = minutes * 60
    settle = min(60.0, seconds / 5)  # caches, pools and allocator arenas fill first: the baseline is after
    samples: list[tuple[float, int, int]] = []
    results = 0
    with Watcher(sources, detector, keep_images=False) as watcher:
        start = time.monotonic()
        next_sample = start + settle
        for item in watcher.results(seconds):
            if isinstance(item, StreamResult):
                results += 1
            now = time.monotonic()
            if next_sample <= now < start + seconds:
                samples.append((now - start, rss_kb(), open_files()))
                # Samples only while every stream is on (at the end they close their files).
                next_sample = now + min(max(seconds / 60, 2.0), 30.0)
                if len(samples) % 10 == 1:
                    print(
                        f"  soak {now - start:7.0f} s: RSS {samples[-1][1] / 1024:.1f} MiB, "
                        f"{samples[-1][2]} fds, {load()}",
                        flush=True,
                    )
        stats = watcher.stats()
    first, last = samples[0], samples[-1]
    growth = (last[1] - first[1]) / first[1]
    half = len(samples) // 2
    fds_first_half = max(s[2] for s in samples[: max(half, 1)])
    fds_second_half = max(s[2] for s in samples[half:])
    fps = [s.fps for s in stats.values()]
    print(
        f"  soak: {results} results over {seconds:.0f} s, per stream {min(fps):.1f}..{max(fps):.1f} FPS, "
        f"reconnects {sum(s.reconnects for s in stats.values())}; RSS {first[1] / 1024:.1f} MiB at "
        f"{first[0]:.0f} s -> {last[1] / 1024:.1f} MiB at {last[0]:.0f} s (peak "
        f"{max(s[1] for s in samples) / 1024:.1f}); fds {first[2]} -> {last[2]} (max first half "
        f"{fds_first_half}, second half {fds_second_half})"
    )
    ok = growth <= 0.05 and fds_second_half <= fds_first_half and last[2] <= first[2]
    print(
        f"[4] TARGET {minutes:g} min with {streams} streams of {clip.shape}: RSS growth <= 5 %, open "
        f"files not growing: RSS {growth:+.1%}, fds {first[2]} -> {last[2]} -> {verdict(ok)}"
        + ("" if minutes >= 30 else " (shorter than the target's 30 min: --soak-minutes 30)")
        + f" ({load()})",
        flush=True,
    )


@contextmanager
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="streams-bench-") as name:
        yield Path(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--step-seconds", type=float, default=10.0, help="measured seconds per ramp step (10)"
    )
    parser.add_argument("--soak-minutes", type=float, default=2.0, help="soak length (2; the target is 30)")
    parser.add_argument(
        "--soak-size",
        default="640x360",
        help="the soak's clip WxH (640x360: 8 streams of 720p outrun 2 CPUs)",
    )
    parser.add_argument("--workers", choices=["thread", "process"], default="thread", help="Detector workers")
    parser.add_argument(
        "--contexts-per-core",
        type=int,
        choices=[1, 2],
        default=2,
        help="Detector contexts per core (2, as `rknnlaunch watch` and `bench --streams` open it: a "
        "core infers one context's frame while the other's is prepared on the CPU)",
    )
    parser.add_argument("--only", choices=["ramp", "rtsp", "soak"], help="run only that part")
    args = parser.parse_args()
    width, _, height = args.soak_size.partition("x")
    with folder() as where:
        print(
            f"simulated RK3588: YOLOv8n {SINGLE_CORE_MS:.1f} ms per core, {NPU_CORES} cores; "
            f"{args.contexts_per_core} context{'' if args.contexts_per_core == 1 else 's'} per core; "
            f"{args.workers} workers; {os.cpu_count()} CPUs, {load()}",
            flush=True,
        )
        detector = open_detector(where, args.workers, args.contexts_per_core)
        with detector:
            sustained = 0
            if args.only in (None, "ramp", "rtsp"):
                clip = make_clip(where, "720p25.mp4", SIZE, 10)
                print(
                    f"clip {clip.shape} {clip.codec}, 10 s, made from matplotlib's photo ({load()})",
                    flush=True,
                )
            if args.only in (None, "ramp"):
                sustained, _ = sustained_part(detector, clip, args.step_seconds)
                twice_part(detector, clip, max(2 * sustained, 2), args.step_seconds)
            if args.only in (None, "rtsp"):
                rtsp_clip = make_clip(where, "rtsp-720p25.mp4", SIZE, 20).path
                rtsp_part(detector, clip, rtsp_clip, max(sustained - 1, 3))
            if args.only in (None, "soak"):
                soak_clip = make_clip(where, "soak.mp4", (int(width), int(height)), 10)
                soak_part(detector, soak_clip, args.soak_minutes)


if __name__ == "__main__":
    main()
