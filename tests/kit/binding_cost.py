"""What one RKNNLite.inference() call costs the calling process: CPU time, and how much of the call
holds the GIL (the figure that decides threads or processes on a board).

usage: python binding_cost.py --model M.rknn [--fake LOCK_DIR] [-n 40]
  real:  rknnlite.api.RKNNLite (on a board, or on tests/kit/librknnrt_sim under qemu)
  fake:  tests/sdk/rknnlite_fake.SimulatedNpu (the x86 stand-in the unit tests use)
Prints one JSON line: cpu_ms_per_call (thread CPU time inside the call), wall_ms_per_call, and
gil_share: 1 - (what a counting thread got done during the calls) / (what it gets done alone).
Under qemu every figure is inflated; compare shares, not milliseconds. Numbers only, no thresholds.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any


def counter(stop: threading.Event, counts: list[int]) -> None:
    n = 0
    while not stop.is_set():
        for _ in range(200):  # short slices: the GIL is released between bytecodes every 5 ms
            n += 1
    counts.append(n)


def counting_rate(seconds: float) -> float:
    """Iterations per second a counting thread gets while this thread sleeps (GIL free)."""
    stop, counts = threading.Event(), []  # type: ignore[var-annotated]
    thread = threading.Thread(target=counter, args=(stop, counts))
    started = time.monotonic()
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    return counts[0] / (time.monotonic() - started)


def open_lite(model: str, fake: str | None) -> Any:
    if fake:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))
        from rknnlite_fake import SimulatedNpu

        lite = SimulatedNpu(lock_dir=fake, single_core_ms=1000.0 / 73.5)()
        lite.npu.runtime_version = "2.5.0"  # as the C simulator reports: the tiny model is toolkit2 2.5.0's
    else:
        from rknnlite.api import RKNNLite

        lite = RKNNLite()
    if lite.load_rknn(model) != 0 or lite.init_runtime(core_mask=1) != 0:
        raise SystemExit(f"binding_cost: cannot open {model}")
    return lite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--fake", metavar="LOCK_DIR", help="measure the x86 fake instead")
    parser.add_argument("--shape", default="1,32,32,3", help="NHWC uint8 input shape")
    parser.add_argument("-n", type=int, default=40)
    args = parser.parse_args(argv)
    import numpy as np

    frame = np.full(tuple(int(d) for d in args.shape.split(",")), 42, np.uint8)
    lite = open_lite(args.model, args.fake)
    try:
        lite.inference(inputs=[frame])  # warm-up
        cpu = 0.0
        stop, counts = threading.Event(), []  # type: ignore[var-annotated]
        thread = threading.Thread(target=counter, args=(stop, counts))
        thread.start()
        started = time.monotonic()
        for _ in range(args.n):
            before = time.thread_time()
            lite.inference(inputs=[frame])
            cpu += time.thread_time() - before
        wall = time.monotonic() - started
        stop.set()
        thread.join()
    finally:
        lite.release()
    alone = counting_rate(wall)
    share = max(0.0, 1.0 - counts[0] / max(alone * wall, 1.0))
    print(
        json.dumps(
            {
                "binding": "fake" if args.fake else "real",
                "calls": args.n,
                "cpu_ms_per_call": round(cpu * 1000 / args.n, 3),
                "wall_ms_per_call": round(wall * 1000 / args.n, 3),
                "gil_share": round(share, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
