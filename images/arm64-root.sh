#!/usr/bin/env bash
# The one recipe for the emulated arm64 roots that the real-thing checks run in: used by .ci/run,
# images/verify-arm64.sh and (through the roots it prints) tests/sdk/test_sdk_arm64_chroot.py.
#
# usage: images/arm64-root.sh bookworm|bullseye WORK_DIR
#        images/arm64-root.sh bookworm --base-only   (the cached debootstrap root only; prints its path:
#        images/base.sh makes the images' local base from it)
#   Builds (or reuses, from the cache) a Debian arm64 root, copies it to WORK_DIR, installs this
#   checkout into it and prints WORK_DIR as the last line. The tests read WORK_DIR/rknnlaunch-root.json.
#
#   bookworm  Python 3.11 (the images' Python): images/install-python.sh runtime and plugin, exactly as
#             the Dockerfiles run them (`python -m venv VENV && sh /src/images/install-python.sh IMAGE
#             /src`, the venv first on PATH), into /opt/runtime and /opt/plugin, offline from the
#             pinned arm64 cp311 wheels of images/constraints.txt.
#   bullseye  Python 3.9: the pre-3.11 pathlib/io behaviour that boards' Python 3.10 shares. rknnlaunch
#             needs Python >= 3.10, so this root gets only the pinned rknn-toolkit-lite2 (cp39 wheel) in
#             /opt/toolkit; the checks load the compatible-file redirect by path, as the `run` shim does.
#
# Cache: ${RKNNLAUNCH_CI_CACHE:-/var/cache/rknnlaunch-ci}/arm64/SUITE/{base,wheels} (outside the clone,
# kept between runs). Each part is built under a temporary name, checked, stamped with the sha256 of
# what built it, and only then renamed into place; a part whose stamp is missing or different, or that
# fails its check, is deleted and rebuilt. One flock per suite serialises builders on the machine.
# Needs root, debootstrap, qemu-user-static (binfmt_misc registered by images/prepare-host.sh), flock, and a
# host Python with pip ($PYTHON, default python3) to download the wheels. First build: debootstrap under
# emulation, ~6-10 min per suite; then the copy + install only (~2-4 min).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

die() {
  echo "arm64-root: $*" >&2
  exit 1
}
[ "$#" -eq 2 ] || die "usage: images/arm64-root.sh bookworm|bullseye WORK_DIR|--base-only"
suite=$1
work=$2
py=${PYTHON:-python3}
cache=${RKNNLAUNCH_CI_CACHE:-/var/cache/rknnlaunch-ci}/arm64/$suite
mirror=${RKNNLAUNCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}

lite_pin=$(grep -E '^rknn-toolkit-lite2==' images/constraints.txt) || die "images/constraints.txt pins no rknn-toolkit-lite2"
case "$suite" in
  bookworm)
    pyver=3.11
    # python3-distutils named explicitly: debootstrap does not resolve the virtual
    # python3.11-distutils that python3.11-venv depends on.
    packages=python3.11,python3.11-venv,python3-distutils,ca-certificates
    # Every pin of the images (and the build backend, for the offline build of rknnlaunch itself).
    requirements=$(grep -E '^[A-Za-z0-9_.-]+==' images/constraints.txt)$'\nsetuptools>=69\nwheel'
    ;;
  bullseye)
    pyver=3.9
    packages=python3.9,python3.9-venv,python3-distutils,ca-certificates
    requirements=$lite_pin
    ;;
  *) die "unknown suite '$suite' (expected bookworm or bullseye)" ;;
esac
[ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot)"
for tool in debootstrap qemu-aarch64-static flock chroot; do
  command -v "$tool" >/dev/null || die "$tool not found; fix: apt-get install debootstrap qemu-user-static util-linux"
done

# arm64 binaries run through qemu via binfmt_misc (F flag: the interpreter works inside the chroot).
# The one host helper (locked, idempotent): two roots built side by side never race on the mount.
bash images/prepare-host.sh binfmt >&2 || die "cannot prepare binfmt_misc for arm64 (see above)"

in_root() { # ROOT CMD...: a clean environment; pip is offline, fed by /wheels
  local root=$1
  shift
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels \
    PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"
}

# Bump when a part's build steps change in a way its inputs below do not show.
recipe_version=1
stamp_of() { # the sha256 of what builds one part (its inputs, not this whole file: edits elsewhere keep the cache)
  printf '%s\n' "$recipe_version" "$@" | sha256sum | cut -d' ' -f1
}

mkdir -p "$cache"
exec 9>"$cache.lock"
flock 9

# --- base: debootstrap --------------------------------------------------------------------------
base_stamp=$(stamp_of base "$suite" "$packages" "$mirror")
base_ok() {
  [ "$(cat "$cache/base.stamp" 2>/dev/null)" = "$base_stamp" ] && [ -x "$cache/base/usr/bin/python$pyver" ] \
    && in_root "$cache/base" "python$pyver" -c 'import venv, ensurepip, ssl, json, sqlite3' 2>/dev/null
}
if ! base_ok; then
  echo "== arm64 root $suite: debootstrap into the cache (slow: the second stage runs emulated)" >&2
  rm -rf "$cache/base" "$cache/base.partial" "$cache/base.stamp"
  debootstrap --arch=arm64 --variant=minbase --include="$packages" "$suite" "$cache/base.partial" "$mirror" \
    >"$cache/debootstrap.log" 2>&1 || {
    tail -n 30 "$cache/debootstrap.log" >&2
    die "debootstrap $suite failed (log: $cache/debootstrap.log)"
  }
  rm -rf "$cache/base.partial/var/cache/apt/archives/"*.deb
  mv "$cache/base.partial" "$cache/base"
  echo "$base_stamp" >"$cache/base.stamp"
  base_ok || die "the fresh $suite root fails its check (python$pyver with venv, ensurepip, ssl)"
fi
if [ "$work" = --base-only ]; then
  echo "$cache/base"
  exit 0
fi

# --- wheels: the pinned arm64 wheels, downloaded by the host's pip -------------------------------
wheels_stamp=$(stamp_of wheels "$suite" "$pyver" "$requirements")
wheels_ok() {
  [ "$(cat "$cache/wheels.stamp" 2>/dev/null)" = "$wheels_stamp" ] || return 1
  "$py" - "$cache/wheels" <<'EOF'
import pathlib, sys, zipfile
wheels = sorted(pathlib.Path(sys.argv[1]).glob("*.whl"))
if not wheels:
    sys.exit(1)
for wheel in wheels:  # a truncated download has no readable central directory
    zipfile.ZipFile(wheel).namelist()
EOF
}
if ! wheels_ok 2>/dev/null; then
  echo "== arm64 root $suite: download the cp${pyver/./} aarch64 wheels into the cache" >&2
  rm -rf "$cache/wheels" "$cache/wheels.partial" "$cache/wheels.stamp"
  mkdir -p "$cache/wheels.partial"
  printf '%s\n' "$requirements" >"$cache/wheels.partial/requirements.txt"
  "$py" -m pip download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
    --python-version "$pyver" --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
    -d "$cache/wheels.partial" -r "$cache/wheels.partial/requirements.txt" >&2 \
    || die "cannot download the arm64 wheels for $suite"
  mv "$cache/wheels.partial" "$cache/wheels"
  echo "$wheels_stamp" >"$cache/wheels.stamp"
  wheels_ok || die "the downloaded wheels for $suite fail their check"
fi

# --- this run's root: a copy of the cached base (hard links when on one filesystem) --------------
rm -rf "$work"
mkdir -p "$(dirname "$work")"
cp -al "$cache/base" "$work" 2>/dev/null || {
  rm -rf "$work"
  cp -a "$cache/base" "$work"
}
cp -a "$cache/wheels" "$work/wheels"
flock -u 9

# The same files the Dockerfiles COPY into /src.
mkdir -p "$work/src/images"
cp -r pyproject.toml README.md rknnlaunch plugin "$work/src/"
cp images/install-python.sh images/constraints.txt "$work/src/images/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +

python_version=$(in_root "$work" "python$pyver" -c 'import platform; print(platform.python_version())')
if [ "$suite" = bookworm ]; then
  for image in runtime plugin; do
    echo "== arm64 root $suite: install-python.sh $image (emulated)" >&2
    in_root "$work" /bin/sh -c "python$pyver -m venv /opt/$image \
      && PATH=/opt/$image/bin:\$PATH sh /src/images/install-python.sh $image /src" >"$work/install-$image.log" 2>&1 \
      || {
        tail -n 30 "$work/install-$image.log" >&2
        die "install-python.sh $image failed in the $suite root"
      }
  done
  toolkit_python=/opt/runtime/bin/python
  sdk='"/opt/runtime"'
  plugin='"/opt/plugin"'
else
  echo "== arm64 root $suite: $lite_pin into /opt/toolkit (emulated)" >&2
  in_root "$work" /bin/sh -c "python$pyver -m venv /opt/toolkit && /opt/toolkit/bin/python -m pip install '$lite_pin'" \
    >"$work/install-toolkit.log" 2>&1 || {
    tail -n 30 "$work/install-toolkit.log" >&2
    die "installing $lite_pin failed in the $suite root"
  }
  toolkit_python=/opt/toolkit/bin/python
  sdk=null
  plugin=null
fi
toolkit_version=$(in_root "$work" "$toolkit_python" -c \
  'import importlib.metadata as m; print(m.version("rknn-toolkit-lite2"))')
cat >"$work/rknnlaunch-root.json" <<EOF
{"suite": "$suite", "python": "$python_version", "python_command": "python$pyver",
 "toolkit_version": "$toolkit_version", "toolkit_python": "$toolkit_python",
 "sdk_venv": $sdk, "plugin_venv": $plugin}
EOF
echo "== arm64 root $suite ready: Python $python_version, rknn-toolkit-lite2 $toolkit_version" >&2
echo "$work"
