#!/usr/bin/env bash
# Build the simulated librknnrt.so (rknnrt_sim.c) for x86_64 and aarch64.
# usage: tests/kit/librknnrt_sim/build.sh [OUT_DIR]   (default: this folder's build/)
#   -> OUT_DIR/x86_64/librknnrt.so (gcc) and OUT_DIR/aarch64/librknnrt.so (aarch64-linux-gnu-gcc,
#      Debian's gcc-aarch64-linux-gnu). SIM_VERSION=X.Y.Z sets the version it reports (default 2.5.0).
# SIM_ARCHS="x86_64" builds one architecture only. Skips the rebuild when the source is older than the output.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build}
flags=(-O2 -shared -fPIC -Wall -Wextra -Werror -std=gnu11 -pthread -DSIM_VERSION="\"${SIM_VERSION:-2.5.0}\"")
for arch in ${SIM_ARCHS:-x86_64 aarch64}; do
  case $arch in
    x86_64) cc=${CC_X86_64:-gcc} ;;
    aarch64) cc=${CC_AARCH64:-aarch64-linux-gnu-gcc} ;;
  esac
  command -v "$cc" >/dev/null || { echo "librknnrt_sim: $cc not found; fix: apt-get install gcc gcc-aarch64-linux-gnu" >&2; exit 1; }
  mkdir -p "$out/$arch"
  target=$out/$arch/librknnrt.so
  if [ ! -e "$target" ] || [ "$here/rknnrt_sim.c" -nt "$target" ] || [ "$0" -nt "$target" ]; then
    "$cc" "${flags[@]}" -o "$target.tmp.$$" "$here/rknnrt_sim.c"
    mv "$target.tmp.$$" "$target" # per-process temp: two test runs may build at once
  fi
done
echo "$out"
