""".ci/failures.sh: a failed CI run names, in its last 20 lines, each failed job, the first error line
of its log and the log's path (issue 28: the cause sat hundreds of lines above the end)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "bash",
            "-c",
            f"set -euo pipefail; logs={tmp_path}/logs; mkdir -p $logs; . .ci/failures.sh; {script}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_failed_background_job_is_named_with_its_first_error_and_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "arm64-bookworm.log"
    log.parent.mkdir()
    noise = "\n".join(f"I: Retrieving package {n}" for n in range(500))
    log.write_text(
        f"{noise}\nmount: /proc/sys/fs/binfmt_misc: binfmt_misc already mounted\narm64-root: failed\n"
    )
    done = _run(
        f"for i in $(seq 300); do echo step output $i; done; failed 'arm64 root bookworm' {log}; summary 1",
        tmp_path,
    )
    last = done.stdout.splitlines()[-20:]
    assert "failed: arm64 root bookworm" in last
    assert "  first error: arm64-root: failed" in last
    assert f"  log: {log}" in last
    assert log.exists()  # a failed run keeps its logs


def test_pytest_failures_are_named_by_the_first_failing_test(tmp_path: Path) -> None:
    log = tmp_path / "tests.log"
    log.write_text(
        "tests/test_errors.py ....F\n=== short test summary info ===\nFAILED tests/x.py::test_y - boom\n"
    )
    done = _run(f"failed 'tests on Python 3.10 (pytest exit 1)' {log}; summary 1", tmp_path)
    assert "  first error: FAILED tests/x.py::test_y - boom" in done.stdout.splitlines()


def test_a_step_that_ended_the_run_is_named_when_nothing_else_failed(tmp_path: Path) -> None:
    done = _run("step_name=ruff; summary 1", tmp_path)
    assert done.stdout.splitlines()[-1] == "failed: step: ruff (exit 1; its output is just above)"


def test_a_passing_run_prints_nothing_and_drops_its_logs(tmp_path: Path) -> None:
    done = _run("summary 0; [ ! -e $logs ] && echo gone", tmp_path)
    assert done.stdout == "gone\n"


# What pip prints while building an editable install: a setuptools warning that says "error" long
# before the line that names the cause.
SETUPTOOLS_WARNING = """\
Obtaining file:///work/rknnlaunch
  Installing build dependencies: started
/tmp/pip-build-env/overlay/lib/python3.11/site-packages/setuptools/config/_apply_pyprojecttoml.py:82: \
SetuptoolsDeprecationWarning: `project.license` as a TOML table is deprecated
!!
        Please use a simple string containing a SPDX expression; this will be an error in future.
!!
"""


def _first_error(log: Path, tmp_path: Path) -> str:
    done = _run(f"first_error {log}", tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_first_error_is_our_scripts_die_line_not_a_setuptools_warning(tmp_path: Path) -> None:
    log = tmp_path / "prep.log"
    log.write_text(
        SETUPTOOLS_WARNING
        + "building the images\n"
        + "images/build.sh: no container engine works here (buildah, podman); fix: apt-get install buildah\n"
    )
    assert _first_error(log, tmp_path).startswith("images/build.sh: no container engine works here")


def test_the_first_error_then_prefers_apt_and_error_lines_to_a_warning(tmp_path: Path) -> None:
    log = tmp_path / "prepare-host.log"
    log.write_text(SETUPTOOLS_WARNING + "Reading package lists...\nE: Unable to locate package buildahh\n")
    assert _first_error(log, tmp_path) == "E: Unable to locate package buildahh"
    log.write_text(SETUPTOOLS_WARNING + "  ERROR: No matching distribution found for onnx==9\n")
    assert _first_error(log, tmp_path) == "  ERROR: No matching distribution found for onnx==9"
    log.write_text(SETUPTOOLS_WARNING)  # nothing better: the warning's line is still named
    assert "this will be an error in future" in _first_error(log, tmp_path)


def test_every_die_line_of_the_image_scripts_is_recognised(tmp_path: Path) -> None:
    prefixes = [
        match.group(1)
        for script in sorted((REPO / "images").glob("*.sh"))
        for match in re.finditer(r'die\(\) \{\n\s+echo "([^"$]+: )\$\*" >&2', script.read_text())
    ]
    assert len(prefixes) >= 4, prefixes
    for prefix in prefixes:
        log = tmp_path / "die.log"
        log.write_text(SETUPTOOLS_WARNING + f"{prefix}something broke\n")
        assert _first_error(log, tmp_path) == f"{prefix}something broke", prefix
