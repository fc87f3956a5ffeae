#!/usr/bin/env bash
# The images' Python layer on emulated arm64, without Docker: run this after changing
# images/constraints.txt or install-python.sh (CI only resolves the arm64 set; this installs and
# runs it).
#
# It builds (once) a Debian bookworm arm64 root filesystem with Python 3.11 (debootstrap +
# qemu-user-static), downloads the pinned arm64 wheels with THIS machine's pip, then inside the
# arm64 root runs images/install-python.sh exactly as the Dockerfiles do (offline, from those
# wheels) and the Dockerfiles' smoke tests: rknn-toolkit-lite2 imports and constructs, OpenCV
# imports, `rknnlaunch run --no-check -- CMD` execs, `rknnlaunch doctor` reports, and the plugin
# starts without OpenCV/onnxruntime. librknnrt.so itself is not fetched here.
#
# Needs root, `apt-get install qemu-user-static debootstrap`, and binfmt_misc (registered here if
# missing). First run ~6 min (debootstrap under emulation), then ~2 min. Not part of CI.
# usage: images/verify-arm64.sh [ROOTFS_DIR]     (default /var/tmp/rknnlaunch-arm64, reused)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
root=${1:-/var/tmp/rknnlaunch-arm64}
py=${PYTHON:-python3}

die() {
  echo "verify-arm64: $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot)"
command -v qemu-aarch64-static >/dev/null || die "apt-get install qemu-user-static"
command -v debootstrap >/dev/null || die "apt-get install debootstrap"

# arm64 binaries run through qemu via binfmt_misc (F flag: works inside the chroot).
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  cat /usr/lib/binfmt.d/qemu-aarch64.conf >/proc/sys/fs/binfmt_misc/register
fi

if [ ! -x "$root/usr/bin/python3.11" ]; then
  echo "== debootstrap bookworm arm64 into $root (slow: second stage runs emulated)"
  # python3-distutils named explicitly: debootstrap does not resolve the virtual
  # python3.11-distutils that python3.11-venv depends on.
  debootstrap --arch=arm64 --variant=minbase \
    --include=python3.11,python3.11-venv,python3-distutils,ca-certificates \
    bookworm "$root" http://deb.debian.org/debian
fi

mounted=""
cleanup() { [ -z "$mounted" ] || umount "$root/proc" || true; }
trap cleanup EXIT
if ! mountpoint -q "$root/proc"; then
  mount -t proc proc "$root/proc"
  mounted=1
fi

echo "== arm64 cp311 wheels for every pin in images/constraints.txt (+ the build backend)"
rm -rf "$root/wheels" "$root/src"
mkdir -p "$root/wheels" "$root/src/images"
grep -E '^[A-Za-z0-9_.-]+==' images/constraints.txt >"$root/wheels/requirements.txt"
"$py" -m pip download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
  --python-version 3.11 --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
  -d "$root/wheels" -r "$root/wheels/requirements.txt" 'setuptools>=69' wheel

# The same files the Dockerfiles COPY into /src.
cp -r pyproject.toml README.md rknnlaunch plugin "$root/src/"
cp images/install-python.sh images/constraints.txt "$root/src/images/"
find "$root/src" -name __pycache__ -prune -exec rm -rf {} +

in_root() { # a clean environment: no host pip settings leak in; pip is offline, fed by /wheels
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels \
    PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"
}

for image in runtime plugin; do
  echo "== install-python.sh $image (arm64, $(in_root uname -m))"
  in_root /bin/sh -c "rm -rf /opt/$image && python3.11 -m venv /opt/$image \
    && PATH=/opt/$image/bin:\$PATH sh /src/images/install-python.sh $image /src" | tail -n 1
done

echo "== runtime: the Dockerfile's smoke test and the entrypoint"
in_root /bin/sh -ec '
  export PATH=/opt/runtime/bin:$PATH
  python -c "import cv2, numpy, rknnlaunch; from rknnlite.api import RKNNLite; RKNNLite(); print(\"rknnlite ok; cv2\", cv2.__version__, \"numpy\", numpy.__version__)"
  rknnlaunch --version
  rknnlaunch run --no-check -- python -c "print(\"entrypoint exec ok\")"
  python -c "import importlib.util as u, sys; sys.exit(1 if u.find_spec(\"grpc\") else 0)"
  rknnlaunch doctor && exit 1 || echo "(doctor fails here as it should: no NPU, no librknnrt.so)"'

echo "== plugin: no OpenCV/onnxruntime, the entrypoint starts"
in_root /bin/sh -ec '
  export PATH=/opt/plugin/bin:$PATH
  python -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in (\"cv2\", \"onnxruntime\")))"
  rknpu-device-plugin --help >/dev/null
  rknpu-exporter --help >/dev/null
  rknpu-device-plugin --device-plugin-dir /tmp/dp --fail-on-init-error && exit 1 || echo "(plugin exits 1 here as it should: no NPU)"'
echo "verify-arm64: ok"
