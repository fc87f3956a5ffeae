#!/usr/bin/env bash
# Try the whole chain without a board or a cluster, in one command, on a simulated RK3588 NPU: a
# fake host tree, a kubelet stub, the device plugin (or, with --dra, the DRA driver and a fake
# API server) handing two NPU cores to a workload, and that workload's `rknnlaunch doctor` and
# `rknnlaunch bench` on exactly those cores of the simulated librknnrt (tests/kit/librknnrt_sim),
# with the mask and the per-core FPS it measured.
#
# usage: images/demo.sh [--processes | --containers | --dra [--sample FILE]] [--keep]
#   (default)      containers when podman works as root and the images are already built, else
#                  plain processes (never a 15-30 min build unasked); the line before the trial
#                  says which and why
#   --processes    plain processes on this machine: the bench goes through tests/kit/rknnlite_sim
#                  (rknn-toolkit-lite2's Python surface over ctypes) to the x86_64 simulated librknnrt
#   --containers   the plugin and the workload in the arm64 images under emulation, the workload
#                  through the real rknn-toolkit-lite2 on the simulated librknnrt (images missing:
#                  built first with images/build.sh --base debootstrap --librknnrt-standin sim,
#                  ~15-30 min the first time); stops with the reason where that cannot run
#   --dra          the DRA driver, a fake API server and a kubelet stub, plain processes: a sample
#                  claim of deploy/dra/samples (--sample, default two-rk3588-cores.yaml) allocated,
#                  prepared, and the workload run with the claim's CDI spec
#   --keep         keep the trial's temp folder (its bench report, logs) and say where it is
# Everything is written under one temp folder (removed at the end unless --keep), never under
# /var/lib/kubelet.
# Needs: python3 with venv, and gcc (the simulator is compiled on first use). The first run makes the
# demo's own venv, .demo-venv in this checkout, with exactly what it needs (pip install -e '.[demo]':
# the plugin, the DRA driver, OpenCV headless, cel-python; about a minute), later runs reuse it (made
# again when pyproject.toml or the Python changes). PYTHON=/path/to/python uses that interpreter
# instead, as it is. What it shows and why: docs/images.md ("A local trial").
set -euo pipefail
cd "$(dirname "$0")/.."
mode=auto
extra=()
keep=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --processes) mode=processes; shift ;;
    --containers) mode=containers; shift ;;
    --dra) mode=dra; shift ;;
    --sample) [ "$#" -ge 2 ] || { echo "images/demo.sh: --sample needs a file name; fix: --sample two-rk3588-cores.yaml" >&2; exit 2; }
      extra+=(--sample "$2"); shift 2 ;;
    --keep) keep=(--keep); shift ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "images/demo.sh: unknown argument '$1'; fix: images/demo.sh --help" >&2; exit 2 ;;
  esac
done
[ "${#extra[@]}" -eq 0 ] || [ "$mode" = dra ] || { echo "images/demo.sh: --sample goes with --dra; fix: images/demo.sh --dra --sample FILE" >&2; exit 2; }

# --- the Python: the demo's own venv (made once, then reused), or $PYTHON as given ------------------------
modules="numpy, pydantic_settings, cv2, grpc, google.protobuf, inotify_simple, prometheus_client, rknnlaunch, rknpu_device_plugin"
[ "$mode" != dra ] || modules="$modules, kubernetes, yaml, celpy, rknpu_dra_driver"
if [ -n "${PYTHON:-}" ]; then
  py=$PYTHON
  command -v "$py" >/dev/null || { echo "images/demo.sh: no '$py' on PATH; fix: PYTHON=/path/to/python images/demo.sh, or unset PYTHON (the demo makes its own venv)" >&2; exit 2; }
  fix="$py -m pip install --no-warn-conflicts -e '.[demo]' (everything the trial needs, --dra too), or unset PYTHON (the demo makes its own venv)"
else
  venv=${RKNNLAUNCH_DEMO_VENV:-$PWD/.demo-venv}
  command -v python3 >/dev/null || { echo "images/demo.sh: no python3 on PATH; fix: install Python 3.10 or later (apt-get install python3 python3-venv)" >&2; exit 2; }
  stamp=$({ python3 --version; cat pyproject.toml; } | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$venv/.demo-stamp" 2>/dev/null)" != "$stamp" ] \
    || ! PYTHONPATH="$PWD:$PWD/plugin" "$venv/bin/python" -c "import $modules" 2>/dev/null; then
    echo "images/demo.sh: making the demo's venv $venv (once; about a minute): pip install -e '.[demo]'" >&2
    rm -rf "$venv"
    err=$(python3 -m venv "$venv" 2>&1) || { echo "images/demo.sh: python3 cannot make a venv: $(printf '%s\n' "$err" | tail -n 1); fix: apt-get install python3-venv (or PYTHON=/path/to/python images/demo.sh)" >&2; exit 2; }
    # --no-warn-conflicts: a pip that finds this checkout's test models installed --no-deps elsewhere
    # says nothing; -qq: pip's progress and build warnings are not the demo's (its errors still show)
    "$venv/bin/python" -m pip install -qq --no-warn-conflicts --upgrade pip >&2 \
      && "$venv/bin/python" -m pip install -qq --no-warn-conflicts -e '.[demo]' >&2 \
      || { echo "images/demo.sh: installing the demo's venv failed (above); fix: check the network to PyPI, then run images/demo.sh again" >&2; exit 2; }
    echo "$stamp" >"$venv/.demo-stamp"
  fi
  py=$venv/bin/python
  fix="rm -rf $venv and run images/demo.sh again (it makes the venv anew)"
fi
if ! err=$(PYTHONPATH="$PWD:$PWD/plugin" "$py" -c "import $modules" 2>&1); then
  echo "images/demo.sh: $py cannot run the trial: $(printf '%s\n' "$err" | tail -n 1)" >&2
  if printf '%s\n' "$err" | grep -q "^ModuleNotFoundError: No module named"; then
    echo "fix: $fix" >&2
  else
    echo "fix: the import error above (run: PYTHONPATH=$PWD:$PWD/plugin $py -c 'import $modules'); $fix" >&2
  fi
  exit 2
fi
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' rknnlaunch/_version.py)

if [ "$mode" = dra ]; then
  echo "images/demo.sh: DRA trial, plain processes: the DRA driver, a fake API server, a kubelet stub" >&2
  exec "$py" tests/system/dra_trial.py "${extra[@]}" "${keep[@]}"
fi

# --- containers or processes, and why -----------------------------------------------------------------
why=
if [ "$mode" = processes ]; then
  why="--processes asked for"
elif [ "$(id -u)" != 0 ]; then
  why="not root (the containers need podman as root)"
elif ! command -v podman >/dev/null; then
  why="podman is not installed (apt-get install podman runc)"
elif ! podman version >/dev/null 2>&1; then
  why="podman is installed but \`podman version\` fails: $(podman version 2>&1 | tail -n 1)"
elif [ ! -x /usr/sbin/runc ]; then
  why="/usr/sbin/runc is missing (apt-get install runc)"
elif { ! podman image exists "rknnlaunch-runtime:$version" || ! podman image exists "rknpu-device-plugin:$version"; } \
  && ! command -v buildah >/dev/null; then
  why="podman works, but the images rknnlaunch-runtime:$version and rknpu-device-plugin:$version are missing and buildah, which builds them, is not installed (apt-get install buildah)"
elif [ "$mode" = auto ] && { ! podman image exists "rknnlaunch-runtime:$version" || ! podman image exists "rknpu-device-plugin:$version"; }; then
  # A first try should take seconds: building the arm64 images takes 15-30 min, so only
  # --containers, asked for, builds them.
  why="the images rknnlaunch-runtime:$version and rknpu-device-plugin:$version are not built yet; images/demo.sh --containers builds them (15-30 min the first time) and runs there"
fi
if [ -n "$why" ]; then
  if [ "$mode" = containers ]; then
    echo "images/demo.sh: --containers cannot run here: $why; fix: run as root with podman, runc and buildah installed, or drop --containers" >&2
    exit 2
  fi
  echo "images/demo.sh: plain processes ($why): the bench runs on the x86_64 simulated librknnrt" >&2
  exec "$py" tests/system/assembled.py --processes "${keep[@]}"
fi
if ! podman image exists "rknnlaunch-runtime:$version" || ! podman image exists "rknpu-device-plugin:$version"; then
  echo "images/demo.sh: building the images first (images/build.sh --base debootstrap --librknnrt-standin sim runtime plugin)" >&2
  bash images/build.sh --base debootstrap --librknnrt-standin sim runtime plugin >&2
fi
echo "images/demo.sh: containers (podman as root): the arm64 images under emulation" >&2
exec "$py" tests/system/assembled.py --image "runtime=localhost/rknnlaunch-runtime:$version" \
  --image "plugin=localhost/rknpu-device-plugin:$version" "${keep[@]}"
