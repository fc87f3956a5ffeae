"""images/: the librknnrt fetch refuses anything but the pinned bytes; pins, labels and entrypoints agree."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import rknnlaunch

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
RUNTIME = IMAGES / "runtime" / "Dockerfile"
PLUGIN = IMAGES / "plugin" / "Dockerfile"
DRA = IMAGES / "dra-driver" / "Dockerfile"
SAMPLE_APP = REPO / "samples" / "app" / "Dockerfile"


def _load_fetch() -> ModuleType:
    spec = importlib.util.spec_from_file_location("images_fetch_librknnrt", IMAGES / "fetch_librknnrt.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fetch = _load_fetch()


def _fake_runtime(version: str = "2.3.2") -> bytes:
    # The shape of the real file where it matters: ELF magic, and the embedded version string.
    banner = f"librknnrt version: {version} (429f97ae6b@2025-04-09T09:09:27)\0"
    return b"\x7fELF" + b"\0" * 4000 + banner.encode()


def _serve(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "mirror" / "librknnrt.so"
    path.parent.mkdir()
    path.write_bytes(data)
    return path.as_uri()


# --- fetch_librknnrt.py ---------------------------------------------------------------------------


def test_fetch_accepts_the_pinned_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _fake_runtime()
    out = tmp_path / "usr" / "lib" / "librknnrt.so"
    argv = ["--version", "2.3.2", "--sha256", hashlib.sha256(data).hexdigest().upper(),
            "--url", _serve(tmp_path, data), "--out", str(out)]  # fmt: skip
    assert fetch.main(argv) == 0
    assert out.read_bytes() == data
    assert out.stat().st_mode & 0o777 == 0o644
    assert "librknnrt 2.3.2" in capsys.readouterr().out
    assert [p.name for p in out.parent.iterdir()] == ["librknnrt.so"]  # no temp file left


def test_fetch_fails_on_a_sha256_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _fake_runtime()
    out = tmp_path / "librknnrt.so"
    argv = ["--version", "2.3.2", "--sha256", "0" * 64, "--url", _serve(tmp_path, data), "--out", str(out)]
    assert fetch.main(argv) == 1
    err = capsys.readouterr().err
    assert "sha256 mismatch" in err and hashlib.sha256(data).hexdigest() in err and "fix:" in err
    assert not out.exists()


def test_fetch_fails_when_the_file_reports_another_version(tmp_path: Path) -> None:
    data = _fake_runtime("2.3.0")
    with pytest.raises(fetch.FetchError, match=r"reports librknnrt version '2\.3\.0', not '2\.3\.2'"):
        fetch.fetch(_serve(tmp_path, data), "2.3.2", hashlib.sha256(data).hexdigest(), str(tmp_path / "o"))


def test_fetch_rejects_malformed_pins_and_dead_urls(tmp_path: Path) -> None:
    with pytest.raises(fetch.FetchError, match="not 64 lower-case hex digits"):
        fetch.fetch("file:///nonexistent", "2.3.2", "abc", str(tmp_path / "o"))
    with pytest.raises(fetch.FetchError, match="cannot download"):
        fetch.fetch((tmp_path / "absent.so").as_uri(), "2.3.2", "a" * 64, str(tmp_path / "o"))


def test_default_url_is_rockchips_aarch64_runtime_at_the_version_tag() -> None:
    url = fetch.DEFAULT_URL_TEMPLATE.format(version="2.3.2")
    assert url.endswith("/v2.3.2/rknpu2/runtime/Linux/librknn_api/aarch64/librknnrt.so")
    assert "rknn-toolkit2" in url
    assert fetch.embedded_version(b"xx librknnrt version: 2.5.0 (abc)") == "2.5.0"
    assert fetch.embedded_version(b"no version") is None


# --- Dockerfiles, pins and labels agree -----------------------------------------------------------


def _arg_defaults(dockerfile: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in re.findall(r"^ARG (\w+)=(\S*)", dockerfile.read_text(), re.MULTILINE):
        found.setdefault(name, []).append(value)
    return found


def _constraint(name: str) -> str:
    match = re.search(rf"^{re.escape(name)}==(\S+)", (IMAGES / "constraints.txt").read_text(), re.MULTILINE)
    assert match, f"images/constraints.txt pins no {name}"
    return match.group(1)


def test_runtime_pins_agree_everywhere() -> None:
    args = _arg_defaults(RUNTIME)
    # Declared in the fetch stage and again for the labels: the two must never drift.
    assert len(set(args["RKNNRT_VERSION"])) == 1 and len(set(args["RKNNRT_SHA256"])) == 1
    version, sha = args["RKNNRT_VERSION"][0], args["RKNNRT_SHA256"][0]
    assert re.fullmatch(r"[0-9a-f]{64}", sha)
    # librknnrt and rknn-toolkit-lite2 are a matched pair.
    assert args["RKNN_TOOLKIT_LITE2_VERSION"] == [_constraint("rknn-toolkit-lite2")] == [version]
    readme = (IMAGES / "README.md").read_text()
    assert f"`{sha}`" in readme and f"`{version}`" in readme


@pytest.mark.parametrize("dockerfile", [RUNTIME, PLUGIN, DRA], ids=["runtime", "plugin", "dra-driver"])
def test_version_label_is_the_package_version(dockerfile: Path) -> None:
    assert _arg_defaults(dockerfile)["RKNNLAUNCH_VERSION"] == [rknnlaunch.__version__]


@pytest.mark.parametrize("dockerfile", [RUNTIME, PLUGIN, DRA], ids=["runtime", "plugin", "dra-driver"])
def test_images_install_through_the_one_script(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    assert "pip install" not in text, "pip lines belong in images/install-python.sh (CI installs them)"
    image = dockerfile.parent.name
    assert f"sh /src/images/install-python.sh {image} /src" in text


def test_runtime_image_contract() -> None:
    text = RUNTIME.read_text()
    assert 'ENTRYPOINT ["rknnlaunch", "run", "--"]' in text
    assert "/usr/lib/librknnrt.so" in text
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and not users[-1].startswith(("root", "0")), "the runtime image must default to non-root"
    for label in (
        "io.rknnlaunch.librknnrt.version",
        "io.rknnlaunch.librknnrt.sha256",
        "io.rknnlaunch.rknn-toolkit-lite2.version",
        "org.opencontainers.image.version",
    ):
        assert label in text


def test_plugin_image_contract() -> None:
    text = PLUGIN.read_text()
    assert 'ENTRYPOINT ["rknpu-device-plugin"]' in text
    assert "install-python.sh plugin" in text and "librknnrt" not in text


def test_dra_driver_image_contract() -> None:
    """The DRA driver's image: its entrypoint, the plugin's base and install script, no numpy, no
    OpenCV, no runtime; deploy/dra/ runs that image."""
    text = DRA.read_text()
    assert 'ENTRYPOINT ["rknpu-dra-driver"]' in text and "librknnrt" not in text
    assert "install-python.sh dra-driver" in text and "'numpy', 'cv2', 'onnxruntime'" in text
    assert _arg_defaults(DRA)["PYTHON_IMAGE"] == _arg_defaults(PLUGIN)["PYTHON_IMAGE"]
    assert (IMAGES / "dra-driver/Dockerfile.dockerignore").read_text() == (
        IMAGES / "plugin/Dockerfile.dockerignore"
    ).read_text()
    kustomization = (REPO / "deploy/dra/kustomization.yaml").read_text()
    daemonset = (REPO / "deploy/dra/daemonset.yaml").read_text()
    image = re.search(r"image: (\S+):(\S+)", daemonset)
    assert image is not None and image.group(1).endswith("/rknpu-dra-driver")
    assert f"name: {image.group(1)}" in kustomization and f"newTag: {rknnlaunch.__version__}" in kustomization
    build = (IMAGES / "build.sh").read_text()
    assert "dra-driver) repo=rknpu-dra-driver" in build


def test_dra_driver_install_drops_numpy_only(tmp_path: Path) -> None:
    """install-python.sh dra-driver: pyproject's requirements minus numpy, plus the dra extra
    expanded (a fake `python -m pip` records what it is asked to install)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "pip.log"
    (bin_dir / "python").write_text(
        f'#!/bin/sh\nif [ "$1" = -m ]; then shift 2; echo "$@" >>{log}; for a in "$@"; do\n'
        f'  case "$prev" in -r) cat "$a" >>{log} ;; esac; prev=$a; done; exit 0; fi\n'
        f'if [ "$1" = -c ]; then echo {tmp_path / "site"}; exit 0; fi\n'  # the venv's site-packages
        f'exec {sys.executable} "$@"\n'
    )
    (tmp_path / "site/kubernetes/aio").mkdir(parents=True)
    (bin_dir / "python").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    subprocess.run(["sh", str(IMAGES / "install-python.sh"), "dra-driver", str(REPO)], check=True, env=env)
    asked = log.read_text()
    assert "numpy" not in asked and "opencv" not in asked and "onnxruntime" not in asked
    for needed in ("pydantic", "grpcio", "protobuf", "prometheus-client", "kubernetes>=37"):
        assert needed in asked
    assert f"--no-deps {REPO}" in asked
    # the client's asyncio half and the aiohttp stack only it imports are removed
    assert (
        not (tmp_path / "site/kubernetes/aio").exists() and "uninstall --yes" in asked and "aiohttp " in asked
    )


def test_constraints_pin_every_dependency_the_images_install() -> None:
    # tomllib is 3.11+; on 3.10 the same parser ships as tomli (dev extra)
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in ("npu", "vision", "video", "plugin", "dra"):
        wanted += project["optional-dependencies"][extra]
    pinned = {
        re.split(r"==", line)[0].strip().lower().replace("_", "-")
        for line in (IMAGES / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    }
    names = {re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower().replace("_", "-") for req in wanted}
    names.discard("rknnlaunch")  # the dra extra names the plugin extra as rknnlaunch[plugin]
    assert names - pinned == set(), "add these to images/constraints.txt (with arm64 + x86_64 wheels)"


def test_sample_app_builds_from_the_runtime_image() -> None:
    text = SAMPLE_APP.read_text()
    assert re.search(r"^FROM \$\{BASE_IMAGE\}", text, re.MULTILINE)
    assert "ARG BASE_IMAGE=" in text and "rknnlaunch-runtime" in text
    assert not re.search(r"^ENTRYPOINT", text, re.MULTILINE), "keep the base ENTRYPOINT"
    assert 'CMD ["python", "/app/detect.py"]' in text


# --- the explicit stand-in (images/build.sh --librknnrt-standin sim) --------------------------------


def _standin(tmp_path: Path, banner: str) -> tuple[Path, str]:
    path = tmp_path / "standin" / "librknnrt.so"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"\x7fELF" + b"\0" * 100 + banner.encode() + b"\0")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_simulated_standin_is_taken_under_its_own_pins_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, digest = _standin(
        tmp_path, "librknnrt version: 2.5.0 (simulated: rknnlaunch tests/kit/librknnrt_sim)"
    )
    out = tmp_path / "out" / "librknnrt.so"
    argv = ["--version", "2.5.0", "--sha256", digest, "--standin", str(path), "--out", str(out)]
    assert fetch.main(argv) == 0
    assert out.read_bytes() == path.read_bytes()
    assert "STAND-IN" in capsys.readouterr().out
    wrong_pin = ["--version", "2.5.0", "--sha256", "0" * 64, "--standin", str(path), "--out", str(out)]
    assert fetch.main(wrong_pin) == 1


def test_a_real_runtime_is_never_taken_as_a_standin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, digest = _standin(tmp_path, "librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)")
    argv = ["--version", "2.3.2", "--sha256", digest, "--standin", str(path), "--out", str(tmp_path / "o.so")]
    assert fetch.main(argv) == 1
    assert "does not say it is simulated" in capsys.readouterr().err


@pytest.mark.parametrize(
    "dockerfile", [RUNTIME, IMAGES / "plugin-probe" / "Dockerfile"], ids=["runtime", "probe"]
)
def test_the_images_label_a_standin(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    assert 'io.rknnlaunch.librknnrt.standin="${RKNNRT_STANDIN}"' in text
    assert '--standin "${RKNNRT_STANDIN}"' in text


# --- images/build.sh: bad input stops with one line naming the fix ----------------------------------


def _build(tmp_path: Path, *args: str, path: str = "/usr/bin:/bin") -> tuple[int, list[str]]:
    done = subprocess.run(
        ["bash", str(IMAGES / "build.sh"), *args],
        capture_output=True,
        text=True,
        env={"PATH": path, "HOME": str(tmp_path)},
        check=False,
    )
    return done.returncode, done.stderr.strip().splitlines()


def test_build_without_an_engine_names_the_fix(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # only what the script needs before it looks for an engine
    bin_dir.mkdir()
    for tool in ("bash", "sed", "dirname", "cat", "head"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    code, lines = _build(tmp_path, path=str(bin_dir))
    assert code == 1 and len(lines) == 1, lines
    assert "no container engine works here" in lines[0] and "fix: apt-get install buildah podman" in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--base", "alpine"), "fix: --base debootstrap"),
        (("--librknnrt-standin", "real"), "fix: --librknnrt-standin sim"),
        (("--engine", "nerdctl"), "does not work here; fix:"),
        (("bogus",), "unknown argument 'bogus'"),
    ],
)
def test_build_rejects_bad_arguments_in_one_line(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    code, lines = _build(tmp_path, *args)
    assert code == 1 and len(lines) == 1 and needle in lines[0], lines
