"""Download Rockchip's librknnrt.so at image build time and refuse anything but the pinned bytes.

Used by images/runtime/Dockerfile (standard library only: it runs in a bare python image). The
file is accepted only when its sha256 equals the pinned digest AND its embedded version string
(`librknnrt version: X.Y.Z (...)`) names the pinned version, so a wrong tag, a moved tag or a
truncated download fails the build with a message saying which pin to fix.

`--standin FILE` (build arg RKNNRT_STANDIN; images/build.sh --librknnrt-standin sim) takes a local
file instead of the download, for builds that cannot reach Rockchip's repository and need no real
NPU (CI, the local demo): the same two pins apply to it (build.sh passes the stand-in's own), and
the file must say in its version line that it is simulated, so a stand-in is never mistaken for
Rockchip's runtime (the image's label and `rknnlaunch doctor` say so too).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
import urllib.request
from collections.abc import Sequence

# Rockchip's rknn-toolkit2 repository, one folder per runtime build; {version} is the git tag.
DEFAULT_URL_TEMPLATE = (
    "https://github.com/airockchip/rknn-toolkit2/raw/v{version}/"
    "rknpu2/runtime/Linux/librknn_api/aarch64/librknnrt.so"
)
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_VERSION_RE = re.compile(rb"librknnrt version: ([0-9]+(?:\.[0-9]+)+)")
_MAX_BYTES = 64 * 1024 * 1024  # the 2.x runtime is ~7.7 MB; anything near this is not it


class FetchError(Exception):
    """The download failed or its bytes are not the pinned runtime."""


def embedded_version(data: bytes) -> str | None:
    """The version librknnrt reports about itself (`librknnrt version: 2.3.2 (...)`), if present."""
    match = _VERSION_RE.search(data)
    return match.group(1).decode("ascii") if match else None


def verify(data: bytes, version: str, sha256: str, source: str) -> None:
    """Raise FetchError unless `data` has the pinned digest and names the pinned version."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise FetchError(
            f"sha256 mismatch for {source}: got {digest} ({len(data)} bytes), pinned {sha256}.\n"
            "  fix: if you meant to change the runtime, set both --build-arg RKNNRT_VERSION and "
            "--build-arg RKNNRT_SHA256 (sha256sum of the file you reviewed); otherwise the "
            "download was tampered with or truncated: do not use it."
        )
    found = embedded_version(data)
    if found != version:
        raise FetchError(
            f"{source} has the pinned sha256 but reports librknnrt version {found!r}, "
            f"not {version!r}.\n  fix: set RKNNRT_VERSION to the version this file reports."
        )


def download(url: str, timeout: float = 120.0) -> bytes:
    """The body at `url` (https or file), bounded in size."""
    try:
        # Any scheme urllib knows (https, file for tests/mirrors): the sha256 pin decides, not the URL.
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data: bytes = response.read(_MAX_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise FetchError(
            f"cannot download {url}: {exc}\n  fix: check the build's network access, or pass "
            "--build-arg RKNNRT_URL=<mirror of the same file> (the sha256 pin still applies)"
        ) from exc
    if len(data) > _MAX_BYTES:
        raise FetchError(f"{url} is larger than {_MAX_BYTES} bytes: not a librknnrt.so")
    return data


def fetch(url: str, version: str, sha256: str, out: str) -> str:
    """Download, verify and atomically write the runtime to `out`; returns the version found."""
    if not _SHA256_RE.fullmatch(sha256):
        raise FetchError(f"RKNNRT_SHA256 {sha256!r} is not 64 lower-case hex digits")
    data = download(url)
    verify(data, version, sha256, url)
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".librknnrt-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return version


STANDIN_MARKER = b"(simulated"
"""What a stand-in's version line must carry (tests/kit/librknnrt_sim writes `(simulated: ...)`)."""


def take_standin(path: str, version: str, sha256: str, out: str) -> str:
    """Verify the local stand-in at `path` against both pins and its simulated marker; write `out`."""
    if not _SHA256_RE.fullmatch(sha256):
        raise FetchError(f"RKNNRT_SHA256 {sha256!r} is not 64 lower-case hex digits")
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise FetchError(
            f"cannot read the stand-in {path}: {exc.strerror or exc}\n  fix: build it with "
            "tests/kit/librknnrt_sim/build.sh (images/build.sh --librknnrt-standin sim does)"
        ) from exc
    verify(data, version, sha256, path)
    if STANDIN_MARKER not in data:
        raise FetchError(
            f"the stand-in {path} does not say it is simulated (no {STANDIN_MARKER.decode()} in its "
            "version line)\n  fix: a real librknnrt goes through the download (RKNNRT_URL for a "
            "mirror), never through RKNNRT_STANDIN"
        )
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    with open(out, "wb") as handle:
        handle.write(data)
    os.chmod(out, 0o644)
    return version


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True, help="pinned runtime version, e.g. 2.3.2")
    parser.add_argument("--sha256", required=True, help="pinned sha256 of librknnrt.so")
    parser.add_argument("--url", default="", help="override the download URL (default: Rockchip's repo)")
    parser.add_argument("--out", required=True, help="where to write the verified file")
    parser.add_argument("--standin", default="", help="a simulated librknnrt to take instead (tests, demo)")
    args = parser.parse_args(argv)
    url = args.url or DEFAULT_URL_TEMPLATE.format(version=args.version)
    try:
        if args.standin:
            take_standin(args.standin, args.version, args.sha256.lower(), args.out)
            print(
                f"fetch_librknnrt: {args.out}: STAND-IN {args.standin} (simulated librknnrt "
                f"{args.version}, sha256 {args.sha256.lower()}), not Rockchip's runtime"
            )
            return 0
        fetch(url, args.version, args.sha256.lower(), args.out)
    except FetchError as exc:
        print(f"fetch_librknnrt: error: {exc}", file=sys.stderr)
        return 1
    print(f"fetch_librknnrt: {args.out}: librknnrt {args.version}, sha256 {args.sha256.lower()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
