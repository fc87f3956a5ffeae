#!/bin/sh
# The one place the images' pip install lines live.
#
# images/runtime/Dockerfile and images/plugin/Dockerfile run this script; .ci/checks/dockerfiles.sh
# runs it too, into a fresh venv, so CI installs exactly what the images install. It installs into
# whatever `python` is first on PATH (the image's /opt/rknnlaunch venv, or CI's fresh venv).
#
# usage: install-python.sh runtime|plugin|plugin-probe SOURCE_DIR
#   runtime       rknnlaunch with the npu + vision extras (the workload base image)
#   plugin        rknnlaunch with the plugin extra only (the device plugin DaemonSet image)
#   plugin-probe  the plugin extra + npu (rknn-toolkit-lite2) for the plugin's functional probe
# SOURCE_DIR is the repository checkout (pyproject.toml, rknnlaunch/, plugin/, images/constraints.txt).
set -eu

if [ "$#" -ne 2 ]; then
  echo "usage: $0 runtime|plugin|plugin-probe SOURCE_DIR" >&2
  exit 2
fi
image=$1
src=$2

case "$image" in
  runtime) extras=npu,vision ;;
  plugin) extras=plugin ;;
  plugin-probe) extras=plugin,npu ;;
  *)
    echo "$0: unknown image '$image' (expected runtime, plugin or plugin-probe)" >&2
    exit 2
    ;;
esac

# --no-cache-dir keeps pip's download cache out of the image layer; the constraints pin every
# version. On x86_64 the npu extra's environment marker skips rknn-toolkit-lite2 (arm64 only).
python -m pip install --no-cache-dir --disable-pip-version-check \
  --constraint "$src/images/constraints.txt" \
  "$src[$extras]"
