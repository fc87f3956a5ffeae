"""Prints start/end RSS of a long Pool run on the simulated NPU, for threads and for processes.

Usage: python benchmarks/memory_bench.py [--frames 100000] [--cycle-kb 42]

Each simulated inference leaves a reference cycle of ``--cycle-kb`` kB, as the public RKNNLite report
traced its growth to; the pool's workers collect garbage every `GC_EVERY` frames, so RSS must stay
flat. "start" is taken after the first 5,000 frames (allocator warm, collections under way),
"end" after the last.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "sdk")]


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def total_rss_kb(pids: list[int]) -> int:
    return sum(rss_kb(pid) for pid in pids)


def run(workers: str, frames: int, cycle_kb: int, folder: Path) -> None:
    import numpy as np
    from rknnfile_builder import write_rknn
    from rknnlite_fake import SimulatedNpu

    import rknnlaunch
    from fakehost import make_host
    from rknnlaunch.settings._env import load_settings

    host = make_host("rk3588-drm", folder / f"host-{workers}")
    model = write_rknn(folder / f"m-{workers}.rknn", targets=("rk3588",))
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    locks = Path(tempfile.mkdtemp(dir=folder))
    sim = SimulatedNpu(str(locks), single_core_ms=0.0, cycle_kb=cycle_kb)
    frame = np.zeros((640, 640, 3), np.uint8)
    with rknnlaunch.Pool(model, settings=settings, rknnlite=sim, workers=workers) as pool:  # type: ignore[arg-type]
        pids = [os.getpid(), *getattr(pool._workers, "pids", ())]

        def go(count: int) -> None:
            for outputs in pool.map(frame for _ in range(count)):
                del outputs

        go(5000)  # past the first collections: the heap holds at most GC_EVERY frames of garbage
        start = total_rss_kb(pids)
        each = [rss_kb(pid) for pid in pids]
        began = time.perf_counter()
        go(frames)
        elapsed = time.perf_counter() - began
        gc.collect()
        end = total_rss_kb(pids)
        each = [rss_kb(pid) - before for pid, before in zip(pids, each, strict=True)]
    growth = (end - start) * 1024 / frames
    print(
        f"{workers:<8} {frames} frames in {elapsed:5.1f} s: RSS start {start / 1024:7.1f} MB, "
        f"end {end / 1024:7.1f} MB ({len(pids)} processes), growth {growth:+.2f} bytes/frame "
        f"(per process, kB: {', '.join(f'{kb:+d}' for kb in each)})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--cycle-kb", type=int, default=42)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        for workers in ("thread", "process"):
            run(workers, args.frames, args.cycle_kb, Path(name))


if __name__ == "__main__":
    main()
