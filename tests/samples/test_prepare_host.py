"""images/prepare-host.sh: the host setup is idempotent and race-free (issue 28: two arm64 root builds
on a fresh VM both mounted binfmt_misc, and the loser died with "already mounted").

The race is played for real: each test runs in an unshared user and mount namespace (Linux >= 6.7
gives such a namespace its own binfmt_misc instance), against a private procfs root where
binfmt_misc is not mounted, so the machine's own registrations are never touched.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PREPARE_HOST = REPO / "images" / "prepare-host.sh"
# A registration of our own (not qemu's): the F flag opens the interpreter at registration, as qemu's does.
TEST_REGISTRATION = ":rknnlaunch-test:M::RKNNTEST::/bin/sh:F\n"
UNSHARE = ["unshare", "--user", "--map-root-user", "--mount"]


def _unshare_works() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare (util-linux)"
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"unprivileged user namespaces are off here: {probe.stderr.strip()}"
    return None


pytestmark = pytest.mark.skipif(_unshare_works() is not None, reason=str(_unshare_works()))


@functools.cache
def _own_binfmt_misc() -> str | None:
    """None when a user namespace gets a binfmt_misc of its own (Linux >= 6.7), else why not: the
    probe mounts one on a temporary folder in an unshared user and mount namespace (gone with it)."""
    if _unshare_works() is not None:
        return _unshare_works()
    with tempfile.TemporaryDirectory(prefix="binfmt-probe-") as folder:
        probe = subprocess.run(
            [*UNSHARE, "mount", "-t", "binfmt_misc", "binfmt_misc", folder],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    if probe.returncode != 0:
        return (
            f"this kernel ({platform.release()}) gives a user namespace no binfmt_misc of its own "
            f"(Linux >= 6.7 does): mounting one in `{' '.join(UNSHARE)}` failed: {probe.stderr.strip()}"
        )
    return None


# The tests that mount binfmt_misc in their namespace; the others only need the namespace.
needs_own_binfmt_misc = pytest.mark.skipif(_own_binfmt_misc() is not None, reason=str(_own_binfmt_misc()))


def _host(tmp_path: Path, name: str) -> dict[str, str]:
    """A fresh fake host: a procfs root with an empty, unmounted binfmt_misc folder."""
    root = tmp_path / name
    (root / "proc" / "sys" / "fs" / "binfmt_misc").mkdir(parents=True)
    conf = root / "binfmt.conf"
    conf.write_text("# as /usr/lib/binfmt.d files carry a comment\n" + TEST_REGISTRATION)
    return {
        "RKNNLAUNCH_PROCFS": str(root / "proc"),
        "RKNNLAUNCH_BINFMT_CONF": str(conf),
        "RKNNLAUNCH_CONTAINERS_CONF": str(root / "etc" / "containers" / "containers.conf"),
        "RKNNLAUNCH_HOST_LOCK": str(root / "prepare-host.lock"),
    }


def _in_namespace(script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _exports(env: dict[str, str]) -> str:
    return " ".join(f"{key}='{value}'" for key, value in env.items())


@needs_own_binfmt_misc
@pytest.mark.parametrize("lock", ["flock", "no lock"])
def test_two_setups_side_by_side_on_an_unregistered_host_both_succeed_20_times(
    tmp_path: Path, lock: str
) -> None:
    # Without the lock the already-done rule alone must hold: the loser of the mount race sees
    # "already mounted", the loser of the registration "File exists", and both count as done.
    rounds = []
    for round_number in range(20):
        env = _host(tmp_path, f"round{round_number}")
        if lock == "no lock":
            env["RKNNLAUNCH_HOST_LOCK"] = "none"
        log = tmp_path / f"round{round_number}"
        rounds.append(
            f"{_exports(env)} bash {PREPARE_HOST} binfmt containers >{log}/a.log 2>&1 & a=$!\n"
            f"{_exports(env)} bash {PREPARE_HOST} binfmt containers >{log}/b.log 2>&1 & b=$!\n"
            f"wait $a; echo round{round_number} a=$?; wait $b; echo round{round_number} b=$?\n"
            f"cat {env['RKNNLAUNCH_PROCFS']}/sys/fs/binfmt_misc/rknnlaunch-test | head -n 1\n"
        )
    done = _in_namespace("".join(rounds))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    failed = [line for line in lines if line.startswith("round") and not line.endswith("=0")]
    errors = [path.read_text() for path in tmp_path.glob("round*/*.log") if "fix:" in path.read_text()]
    assert not failed, (failed, errors)
    assert lines.count("enabled") == 20, done.stdout
    for round_number in range(20):
        conf = Path(_host_conf(tmp_path, round_number)).read_text()
        assert conf.count("default_ulimits = []") == 1, conf


def _host_conf(tmp_path: Path, round_number: int) -> str:
    return str(tmp_path / f"round{round_number}" / "etc" / "containers" / "containers.conf")


@needs_own_binfmt_misc
def test_a_second_run_finds_everything_done(tmp_path: Path) -> None:
    env = _host(tmp_path, "host")
    run = f"{_exports(env)} bash {PREPARE_HOST} binfmt containers"
    done = _in_namespace(f"{run} && {run}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("rknnlaunch-test registered") == 2
    assert "already sets default_ulimits" in done.stdout


def _containers_part(tmp_path: Path, text: str) -> str:
    """containers.conf holding ``text`` after the containers part ran on it (fake-root paths)."""
    env = _host(tmp_path, "host")
    conf = Path(env["RKNNLAUNCH_CONTAINERS_CONF"])
    conf.parent.mkdir(parents=True)
    conf.write_text(text)
    done = subprocess.run(
        ["bash", str(PREPARE_HOST), "containers"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return conf.read_text()


def test_containers_conf_keeps_an_existing_section(tmp_path: Path) -> None:
    text = _containers_part(
        tmp_path, '[engine]\nevents_logger = "file"\n\n[containers]\nlog_driver = "k8s-file"\n'
    )
    assert text.count("[containers]") == 1
    assert text.index("default_ulimits = []") > text.index("[containers]") > text.index("[engine]")


@pytest.mark.parametrize(
    "existing",
    [
        'default_ulimits = ["nofile=1024:1024"]\n',
        '  default_ulimits=[ "nofile=1024:1024", "nproc=64:64" ]\n',
        'default_ulimits = [\n  "nofile=1024:1024",\n  "nproc=64:64",\n]\n',
    ],
    ids=["one-line", "spaced", "multi-line"],
)
def test_containers_conf_replaces_another_default_ulimits_instead_of_adding_a_second(
    tmp_path: Path, existing: str
) -> None:
    text = _containers_part(tmp_path, f'[containers]\nlog_driver = "k8s-file"\n{existing}netns = "host"\n')
    assert text == '[containers]\nlog_driver = "k8s-file"\ndefault_ulimits = []\nnetns = "host"\n', text


def test_containers_conf_leaves_a_commented_default_ulimits_alone(tmp_path: Path) -> None:
    text = _containers_part(tmp_path, '[containers]\n# default_ulimits = [\n#  "nofile=1280:2560",\n# ]\n')
    assert text.count("\ndefault_ulimits = []") == 1, text
    assert '#  "nofile=1280:2560",' in text


def test_the_packages_include_python3_venv() -> None:
    # .ci/run makes venvs with the machine's python3; on Debian that needs python3-venv
    packages = next(line for line in PREPARE_HOST.read_text().splitlines() if line.startswith("packages=("))
    assert "python3-venv" in packages.removeprefix("packages=(").removesuffix(")").split()


def test_the_packages_include_chromium_for_the_live_views_screenshot() -> None:
    packages = next(line for line in PREPARE_HOST.read_text().splitlines() if line.startswith("packages=("))
    assert "chromium" in packages.removeprefix("packages=(").removesuffix(")").split()


def test_a_missing_registration_file_names_the_package(tmp_path: Path) -> None:
    env = _host(tmp_path, "host")
    env["RKNNLAUNCH_BINFMT_CONF"] = str(tmp_path / "nope.conf")
    done = _in_namespace(f"{_exports(env)} bash {PREPARE_HOST} binfmt")
    assert done.returncode == 1
    assert "fix: apt-get install qemu-user-static" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unknown_part_is_refused_with_the_parts(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(PREPARE_HOST), "binfmat"], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "unknown part 'binfmat'; fix: one or more of packages, binfmt, containers" in done.stderr


@pytest.mark.parametrize("script", ["arm64-root.sh", "build.sh"])
def test_the_image_scripts_call_the_one_helper(script: str) -> None:
    # When run alone they prepare the host through the same helper, never a mount of their own.
    text = (REPO / "images" / script).read_text()
    assert "images/prepare-host.sh" in text
    assert "mount -t binfmt_misc" not in text
