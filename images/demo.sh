#!/usr/bin/env bash
# Try the whole chain without a board or a cluster, in one command: a simulated RK3588 host tree,
# a stub kubelet, the device plugin registering with it and allocating two NPU cores to a
# workload, and that workload's `rknnlaunch doctor` and `rknnlaunch bench`.
#
# usage: images/demo.sh [--processes]
#   With podman (as root) and the images: the plugin and the workload run in the arm64 images
#   under emulation, the workload on the simulated librknnrt through the real rknn-toolkit-lite2
#   (images missing: built first with images/build.sh --base debootstrap --librknnrt-standin sim,
#   ~15-30 min the first time). Otherwise, or with --processes: plain processes on this machine
#   (the plugin as is; the bench on the CPU backend, since RKNNLite exists for arm64 only).
# Needs a Python with rknnlaunch installed from this checkout: pip install -e '.[dev]' ($PYTHON).
# What it shows and why: docs/images.md ("A local trial").
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
"$py" -c 'import rknnlaunch, grpc, rknpu_device_plugin' 2>/dev/null \
  || { echo "images/demo.sh: $py cannot import rknnlaunch with the plugin; fix: pip install -e '.[dev]' (or set PYTHON)" >&2; exit 1; }
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' rknnlaunch/_version.py)
args=()
if [ "${1:-}" != --processes ] && [ "$(id -u)" = 0 ] && command -v podman >/dev/null && command -v buildah >/dev/null; then
  if ! podman image exists "rknnlaunch-runtime:$version" || ! podman image exists "rknpu-device-plugin:$version"; then
    echo "images/demo.sh: building the images first (images/build.sh --base debootstrap --librknnrt-standin sim runtime plugin)" >&2
    bash images/build.sh --base debootstrap --librknnrt-standin sim runtime plugin >&2
  fi
  args=(--image "runtime=localhost/rknnlaunch-runtime:$version" --image "plugin=localhost/rknpu-device-plugin:$version")
else
  args=(--processes)
  echo "images/demo.sh: no podman as root here: plain processes (the bench runs on the CPU backend)" >&2
fi
exec "$py" tests/system/assembled.py "${args[@]}"
