"""Prints the SDK's own start-up overheads: import time, `rknnlaunch run` start-up.

Usage: python benchmarks/sdk_bench.py   (no NPU needed). Pool and Detector dispatch per frame,
over calling the runtime directly, is benchmarks/pool_bench.py's.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "sdk")]  # fixtures: fakehost, doctor helpers


def _median_seconds(command: list[str], runs: int = 7, env: dict[str, str] | None = None) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=env)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _preflight_seconds(python: str) -> float:
    """`rknnlaunch run -- true` with the preflight on, against a fixture RK3588 that passes it."""
    import os

    from test_sdk_doctor import add_librknnrt, regular_file_nodes

    from fakehost import make_host, write

    with tempfile.TemporaryDirectory() as folder:
        host = make_host("rk3588-drm", Path(folder) / "host")
        add_librknnrt(host)
        regular_file_nodes(host)
        site = Path(folder) / "site"
        write(
            site, "rknn_toolkit_lite2-2.3.2.dist-info/METADATA", "Name: rknn-toolkit-lite2\nVersion: 2.3.2\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RKNN_NPU_", "RKNNLAUNCH_"))}
        env.update({"RKNNLAUNCH_ROOT": str(host.root), "PYTHONPATH": str(site)})
        return _median_seconds([python, "-m", "rknnlaunch", "run", "--", "true"], env=env)


def main() -> None:
    python = sys.executable
    bare = _median_seconds([python, "-c", "pass"])
    imported = _median_seconds([python, "-c", "import rknnlaunch"])
    opened = _median_seconds([python, "-c", "import rknnlaunch; rknnlaunch.open"])
    launched = _median_seconds([python, "-m", "rknnlaunch", "run", "--no-check", "--", "true"])
    print(f"python start-up                    {bare * 1000:7.1f} ms")
    print(f"+ import rknnlaunch                {(imported - bare) * 1000:7.1f} ms")
    print(f"+ rknnlaunch.open (runtime, numpy) {(opened - bare) * 1000:7.1f} ms")
    print(f"rknnlaunch run --no-check -- true  {launched * 1000:7.1f} ms (total, to exec; target <= 180)")
    checked = _preflight_seconds(python)
    print(f"rknnlaunch run -- true (preflight)  {checked * 1000:7.1f} ms (fixture RK3588; target <= 250)")
    print(f"run --no-check / python start-up    {launched / bare:7.2f} x")


if __name__ == "__main__":
    main()
