#!/usr/bin/env bash
# The images' Python layer on emulated arm64, without Docker: run this after changing
# images/constraints.txt or install-python.sh (CI's real-thing step covers the same root too).
#
# images/arm64-root.sh (the one recipe: CI and tests/sdk/test_sdk_arm64_chroot.py use it too) builds
# or reuses the cached Debian bookworm arm64 root (Python 3.11, debootstrap + qemu-user-static) and
# the pinned arm64 wheels, copies it to WORK_DIR and runs images/install-python.sh in it exactly as
# the Dockerfiles do (offline, from those wheels). Then the Dockerfiles' smoke tests run in it:
# rknn-toolkit-lite2 imports and constructs, OpenCV imports, `rknnlaunch run --no-check -- CMD` execs,
# `rknnlaunch doctor` reports, and the plugin starts without OpenCV/onnxruntime. librknnrt.so itself
# is not fetched here.
#
# Needs root, `apt-get install qemu-user-static debootstrap`, and binfmt_misc (registered if missing).
# First run ~6-10 min (debootstrap under emulation, cached in ${RKNNLAUNCH_CI_CACHE:-/var/cache/rknnlaunch-ci}),
# then ~2-4 min.
# usage: images/verify-arm64.sh [WORK_DIR]     (default /var/tmp/rknnlaunch-arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/var/tmp/rknnlaunch-arm64}

root=$(bash images/arm64-root.sh bookworm "$work" | tail -n 1)

in_root() { # a clean environment: no host pip settings leak in
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

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
  mkdir -p /tmp/dp  # the kubelet folder: the plugin never creates it
  rknpu-device-plugin --device-plugin-dir /tmp/dp --fail-on-init-error && exit 1 || echo "(plugin exits 1 here as it should: no NPU)"'
echo "verify-arm64: ok"
