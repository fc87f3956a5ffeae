"""images/demo.sh before any trial: bad arguments and a Python that cannot run the trial each get
one line naming the cause (the import error itself, never discarded) and a fix line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "images/demo.sh"


def _demo(*args: str, python: str = "python3") -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHON": python}
    return subprocess.run(["bash", str(DEMO), *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize(
    ("args", "needle"),
    [(("--bogus",), "unknown argument '--bogus'"), (("--sample", "x.yaml"), "--sample goes with --dra")],
)
def test_bad_arguments_name_the_fix(args: tuple[str, ...], needle: str) -> None:
    done = _demo(*args)
    assert done.returncode == 2 and needle in done.stderr and "fix:" in done.stderr


def _python_failing_with(tmp_path: Path, error: str) -> str:
    fake = tmp_path / "python"
    fake.write_text(
        f"#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho \"{error}\" >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    return str(fake)


# One install brings everything, --dra too (issue 32: the old hints took three rounds, [plugin],
# [dra], [dev], and left out --no-warn-conflicts).
ONE_INSTALL = "pip install --no-warn-conflicts -e '.[demo]'"


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        ("ModuleNotFoundError: No module named 'grpc'", ONE_INSTALL),
        ("ModuleNotFoundError: No module named 'kubernetes'", ONE_INSTALL),
        ("ModuleNotFoundError: No module named 'celpy'", ONE_INSTALL),
        ("ImportError: cannot import name 'x' from 'google.protobuf'", "the import error above"),
    ],
)
def test_a_python_that_cannot_import_is_shown_with_its_error(tmp_path: Path, error: str, fix: str) -> None:
    done = _demo("--dra", python=_python_failing_with(tmp_path, error))
    assert done.returncode == 2, done.stderr
    first, second = done.stderr.strip().splitlines()[-2:]
    assert first.endswith(error) and second.startswith("fix: ") and fix in second


def test_help_shows_the_variants() -> None:
    done = _demo("--help")
    assert done.returncode == 0 and all(
        flag in done.stdout for flag in ("--processes", "--containers", "--dra")
    )


def _tool(bin_dir: Path, name: str, body: str) -> None:
    (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / name).chmod(0o755)


def test_the_default_never_starts_the_image_build_unasked(tmp_path: Path) -> None:
    """As root with podman, runc and buildah but no images, the default runs plain processes and
    names --containers for the images (a first try takes seconds, not a 15-30 min build)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _tool(bin_dir, "id", "echo 0")  # root, as far as the script can tell
    # podman works, but no image exists yet
    _tool(bin_dir, "podman", f'echo "podman $*" >>{log}; [ "$1" = version ] && exit 0; exit 1')
    _tool(bin_dir, "buildah", f'echo "buildah $*" >>{log}; exit 0')
    # the Python imports everything; what it is asked to run is recorded
    _tool(bin_dir, "python", f'[ "$1" = -c ] && exit 0; echo "python $*" >>{log}; exit 0')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(bin_dir / "python")}
    done = subprocess.run(["bash", str(DEMO)], capture_output=True, text=True, timeout=60, env=env)
    calls = log.read_text()
    assert done.returncode == 0, done.stderr
    assert "plain processes" in done.stderr, done.stderr
    if Path("/usr/sbin/runc").exists():  # else the reason is the missing runc, also processes
        assert "--containers builds them" in done.stderr, done.stderr
    assert "python tests/system/assembled.py --processes" in calls
    assert "buildah" not in calls and "build.sh" not in done.stderr


def _fake_python3(bin_dir: Path, log: Path) -> None:
    """A python3 whose ``-m venv DIR`` makes DIR/bin/python: a Python that imports everything once
    its venv was installed into, and records what it is asked to run."""
    venv_python = (
        "#!/bin/sh\n"
        f'echo "venv-python $*" >>{log}\n'
        'here=$(dirname "$0")\n'
        'if [ "$1" = -c ]; then [ -f "$here/../installed" ]; exit $?; fi\n'
        'case "$*" in *"-e .[demo]"*) touch "$here/../installed" ;; esac\n'
        "exit 0\n"
    )
    _tool(
        bin_dir,
        "python3",
        f'echo "python3 $*" >>{log}\n'
        '[ "$1" = --version ] && { echo "Python 3.11.0"; exit 0; }\n'
        'if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin"; cat >"$3/bin/python" <<\'EOF\'\n'
        f"{venv_python}EOF\n"
        'chmod +x "$3/bin/python"; exit 0; fi\n'
        "exit 1",
    )


def test_without_python_the_demo_makes_its_own_venv_once_then_reuses_it(tmp_path: Path) -> None:
    """Issue 32: nothing to install by hand. The first run makes the venv with exactly the demo extra
    (quiet, no conflict warnings) and runs the trial with it; the second run reuses it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _fake_python3(bin_dir, log)
    venv = tmp_path / "demo-venv"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RKNNLAUNCH_DEMO_VENV": str(venv)}
    first = subprocess.run(["bash", str(DEMO), "--dra"], capture_output=True, text=True, timeout=60, env=env)
    assert first.returncode == 0, first.stderr
    assert f"making the demo's venv {venv}" in first.stderr
    calls = log.read_text()
    assert f"python3 -m venv {venv}" in calls
    assert "venv-python -m pip install -qq --no-warn-conflicts -e .[demo]" in calls
    assert "venv-python tests/system/dra_trial.py" in calls and (venv / ".demo-stamp").is_file()
    log.write_text("")
    again = subprocess.run(
        ["bash", str(DEMO), "--processes", "--keep"], capture_output=True, text=True, timeout=60, env=env
    )
    assert again.returncode == 0, again.stderr
    calls = log.read_text()
    assert "making the demo's venv" not in again.stderr and "pip install" not in calls
    assert "venv-python tests/system/assembled.py --processes --keep" in calls


def test_the_demo_extra_has_what_the_trials_import() -> None:
    """The `demo` extra is the trial's whole install: the DRA stack (the plugin's with it), headless
    OpenCV for the workload's letterbox and cel-python for the scheduler's CEL."""
    import sys

    tomllib = pytest.importorskip(
        "tomllib" if sys.version_info >= (3, 11) else "tomli"
    )  # as test_images_build
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["demo"] == ["rknnlaunch[dra,vision]", "cel-python>=0.5"]
    assert "rknnlaunch[plugin]" in extras["dra"]
