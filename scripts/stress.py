"""Runs the whole default test suite N times per Python under a second CPU load (a busy-loop
process per core), then prints each failing test id with how many runs it failed in.

Usage: python scripts/stress.py [--runs N] [--python PYTHON ...] [--burners K] [--logs DIR] [-- PYTEST ARGS]

  --python   an interpreter with the project installed (a venv's bin/python); repeat for each
             Python. Default: every one of .venv/bin/python and .venv310/bin/python that exists.
  --burners  busy-loop processes beside the suite (default: one per core), the load a cold CI
             run's image builds put on the suite.

The venvs are this checkout's (installed from it, editable): nothing is added to PYTHONPATH, which
would make the checkout's folders importable and fail tests/test_import_footprint.py. Exit status:
0 when every run passed, 1 otherwise. Each run's output is kept in --logs.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PYTHONS = (REPO / ".venv" / "bin" / "python", REPO / ".venv310" / "bin" / "python")
# pytest's short summary (-ra, the project's addopts): "FAILED tests/x.py::test_y - reason".
SUMMARY = re.compile(r"^(FAILED|ERROR) (\S+)")
BURN = "while True: pass"


def failures_in(output: str) -> list[str]:
    """The test ids a run's short summary names as failed or in error."""
    found = []
    for line in output.splitlines():
        match = SUMMARY.match(line)
        if match:
            found.append(match.group(2) if match.group(1) == "FAILED" else f"{match.group(2)} (error)")
    return found


def run_suite(
    python: Path, pytest_args: list[str], log: Path, timeout: float
) -> tuple[int | None, list[str], float]:
    """One run of the suite: (exit status or None on timeout, failing ids, seconds)."""
    began = time.monotonic()
    with log.open("w") as out:
        try:
            code: int | None = subprocess.run(
                [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    failed = failures_in(log.read_text(errors="replace"))
    if code is None:
        failed.append(f"<the run did not finish within {timeout:.0f} s>")
    elif code != 0 and not failed:
        failed.append(f"<pytest exited {code} naming no test>")
    return code, failed, time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="runs per Python (default 20)")
    parser.add_argument("--python", action="append", type=Path, default=[], help="an interpreter (repeat)")
    parser.add_argument(
        "--burners", type=int, default=os.cpu_count() or 1, help="busy loops (default: cores)"
    )
    parser.add_argument(
        "--logs", type=Path, default=None, help="where each run's output goes (default: a temp dir)"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds one run may take (default 3600)"
    )
    parser.add_argument(
        "pytest_args", nargs="*", help="after --: passed to pytest (default: the default suite)"
    )
    args = parser.parse_args(argv)
    pythons = args.python or [p for p in DEFAULT_PYTHONS if p.exists()]
    if not pythons:
        parser.error("no interpreter: pass --python VENV/bin/python (none of .venv, .venv310 exists)")
    for python in pythons:
        if not python.exists():
            parser.error(f"--python {python}: no such file; fix: pass a venv's bin/python")
    logs = args.logs or Path(tempfile.mkdtemp(prefix="rknnlaunch-stress-"))
    logs.mkdir(parents=True, exist_ok=True)
    counts: dict[Path, collections.Counter[str]] = {python: collections.Counter() for python in pythons}
    done: collections.Counter[Path] = collections.Counter()
    burners = [
        subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.DEVNULL) for _ in range(args.burners)
    ]
    print(f"stress: {args.runs} run(s) x {len(pythons)} Python(s), {len(burners)} burner(s); logs in {logs}")
    try:
        for run in range(1, args.runs + 1):
            for index, python in enumerate(pythons):  # interleaved: a slow hour hits every Python
                log = logs / f"run{run:03d}-py{index}.log"
                code, failed, seconds = run_suite(python, args.pytest_args, log, args.timeout)
                done[python] += 1
                counts[python].update(failed)
                verdict = "pass" if code == 0 else f"FAIL ({len(failed)}: {', '.join(failed)})"
                print(f"run {run}/{args.runs} {python}: {seconds:.0f} s, {verdict}", flush=True)
    except KeyboardInterrupt:
        print("stress: interrupted; the counts so far:")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    total = 0
    for python in pythons:
        version = subprocess.run(
            [str(python), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        failing_runs = sum(counts[python].values())
        total += failing_runs
        print(f"\n{python} (Python {version}): {done[python]} run(s), failures: {failing_runs}")
        for test_id, count in counts[python].most_common():
            print(f"  {count:3d}  {test_id}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
