#!/usr/bin/env bash
# The one host preparation for the real-thing checks and the arm64 images: .ci/run runs it once
# before any background job starts; images/arm64-root.sh and images/build.sh run its parts when
# run alone. Idempotent and safe when several copies run at once (docs/develop.md#host-setup).
#
# usage: images/prepare-host.sh [PART ...]     (no parts: all of them, in this order)
#   packages    the Debian packages of the real-thing checks and the images (root + apt-get only;
#               elsewhere it says what it cannot install and goes on)
#   binfmt      binfmt_misc mounted and qemu-aarch64 registered (arm64 binaries run under qemu)
#   containers  podman/buildah as root: the containers.conf ulimit line (default_ulimits = [])
#
# Every part runs under one flock, and "already done" counts as done: a binfmt_misc that another
# copy mounted between our check and our mount, or a registration that appeared meanwhile, is
# success, not "already mounted" / "File exists" under set -e (the race of issue 28).
#
# environment (settable roots, so tests can run it against a private binfmt_misc in an unshared
# user and mount namespace without touching the machine's own):
#   RKNNLAUNCH_PROCFS           procfs root (default /proc)
#   RKNNLAUNCH_BINFMT_CONF      the registration to write (default /usr/lib/binfmt.d/qemu-aarch64.conf)
#   RKNNLAUNCH_CONTAINERS_CONF  containers.conf to edit (default /etc/containers/containers.conf)
#   RKNNLAUNCH_HOST_LOCK        the lock file (default /run/lock/rknnlaunch-prepare-host.lock; "none"
#                               only in tests: it shows the already-done rule holds without the lock)
set -euo pipefail

die() {
  echo "prepare-host: $*" >&2
  exit 1
}

procfs=${RKNNLAUNCH_PROCFS:-/proc}
binfmt_conf=${RKNNLAUNCH_BINFMT_CONF:-/usr/lib/binfmt.d/qemu-aarch64.conf}
containers_conf=${RKNNLAUNCH_CONTAINERS_CONF:-/etc/containers/containers.conf}
lock=${RKNNLAUNCH_HOST_LOCK:-/run/lock/rknnlaunch-prepare-host.lock}
# runc, busybox-static: tests/plugin/test_plugin_runc.py; qemu-user-static, debootstrap: the arm64
# roots; podman, buildah, gcc-aarch64-linux-gnu, binutils: the images (the cross compiler builds
# the simulated librknnrt stand-in); python3-venv: .ci/run's venvs (Debian's python3 has no venv
# module without it); gstreamer1.0-rtsp, gir1.2-gst-rtsp-server-1.0, python3-gi and the plugin sets:
# the RTSP server tests/streams/rtsp_server.py runs with Debian's python3; chromium: the headless
# browser that screenshots `watch --view` (tests/streams/test_streams_view.py).
packages=(runc busybox-static qemu-user-static debootstrap podman buildah gcc-aarch64-linux-gnu binutils python3-venv gstreamer1.0-rtsp gir1.2-gst-rtsp-server-1.0 python3-gi gstreamer1.0-plugins-good gstreamer1.0-plugins-bad chromium)

parts=("$@")
[ "${#parts[@]}" -gt 0 ] || parts=(packages binfmt containers)
for part in "${parts[@]}"; do
  case "$part" in
    packages | binfmt | containers) ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) die "unknown part '$part'; fix: one or more of packages, binfmt, containers" ;;
  esac
done

if [ "$lock" != none ]; then
  mkdir -p "$(dirname "$lock")" 2>/dev/null || true
  exec 7>"$lock" || die "cannot open the lock $lock; fix: run as root, or set RKNNLAUNCH_HOST_LOCK to a writable path"
  flock 7
fi

prepare_packages() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "prepare-host: not root or no apt-get: cannot install ${packages[*]}; the real-thing step will say what skipped"
    return 0
  fi
  local missing=() package
  for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    echo "prepare-host: packages already installed"
    return 0
  fi
  echo "prepare-host: apt-get install ${missing[*]}"
  apt-get -o DPkg::Lock::Timeout=600 update -qq || die "apt-get update failed; fix: check the machine's Debian mirror and network"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed (run it by hand to see why)"
}

prepare_binfmt() {
  local dir=$procfs/sys/fs/binfmt_misc name err line
  [ -r "$binfmt_conf" ] || die "no binfmt registration at $binfmt_conf; fix: apt-get install qemu-user-static"
  # The registration's name is its first field: ":qemu-aarch64:M::...".
  name=$(grep -v '^#' "$binfmt_conf" | grep -m1 '^:' | cut -d: -f2)
  [ -n "$name" ] || die "$binfmt_conf holds no ':name:type:...' registration line; fix: reinstall qemu-user-static"
  if [ ! -e "$dir/register" ]; then
    [ -d "$dir" ] || die "$dir does not exist (no binfmt_misc support in this kernel?); fix: modprobe binfmt_misc"
    if ! err=$(mount -t binfmt_misc binfmt_misc "$dir" 2>&1); then
      # mounted by someone else between our check and our mount: that is done, not a failure
      [ -e "$dir/register" ] || die "cannot mount binfmt_misc on $dir: $err; fix: run as root (or in a user namespace of your own)"
    fi
  fi
  if [ ! -e "$dir/$name" ]; then
    line=$(grep -v '^#' "$binfmt_conf" | grep -m1 '^:')
    # registered by someone else meanwhile: the kernel answers EEXIST ("File exists"), which is done
    if ! err=$({ printf '%s\n' "$line" >"$dir/register"; } 2>&1); then
      [ -e "$dir/$name" ] || die "cannot register $name in $dir/register: $err; fix: apt-get install qemu-user-static (its interpreter must exist)"
    fi
  fi
  if ! grep -qx enabled "$dir/$name"; then
    echo 1 >"$dir/$name" 2>/dev/null || true
    grep -qx enabled "$dir/$name" || die "$dir/$name is registered but disabled; fix: echo 1 > $dir/$name"
  fi
  echo "prepare-host: binfmt_misc: $name registered ($dir)"
}

prepare_containers() {
  # podman/buildah as root in a VM: the default nofile ulimit (1048576) exceeds the hard limit some
  # machines have (20000 seen), so containers get none set by default.
  local content edited
  # One read decides and feeds the edit (no second look that another copy may have changed).
  content=$(cat "$containers_conf" 2>/dev/null || true)
  if grep -qs '^[[:space:]]*default_ulimits[[:space:]]*=[[:space:]]*\[[[:space:]]*\][[:space:]]*$' <<<"$content"; then
    echo "prepare-host: $containers_conf already sets default_ulimits = []"
    return 0
  fi
  mkdir -p "$(dirname "$containers_conf")" || die "cannot create $(dirname "$containers_conf"); fix: run as root"
  # The whole new file, then one rename: a reader never sees half a file, and two copies that both
  # found the line missing each write the same complete file (one line, never two).
  edited=$(mktemp "$containers_conf.XXXXXX") || die "cannot write beside $containers_conf; fix: run as root"
  if grep -qs '^[[:space:]]*default_ulimits[[:space:]]*=' <<<"$content"; then
    # another value (e.g. ["nofile=1024:1024"], maybe over several lines): replaced, never a second
    # default_ulimits key (TOML refuses a duplicate, and podman with it)
    awk '
      skipping { if (index($0, "]")) skipping = 0; next }
      /^[[:space:]]*default_ulimits[[:space:]]*=/ {
        print "default_ulimits = []"
        if (!index($0, "]")) skipping = 1
        next
      }
      { print }
    ' <<<"$content" >"$edited"
  elif grep -qs '^\[containers\]' <<<"$content"; then
    sed 's/^\[containers\]/[containers]\ndefault_ulimits = []/' <<<"$content" >"$edited"
  else
    { [ -z "$content" ] || printf '%s\n' "$content"; printf '[containers]\ndefault_ulimits = []\n'; } >"$edited"
  fi || die "cannot edit $containers_conf; fix: run as root"
  chmod 0644 "$edited"
  mv -f "$edited" "$containers_conf" || die "cannot replace $containers_conf; fix: run as root"
  echo "prepare-host: $containers_conf: default_ulimits = []"
}

for part in "${parts[@]}"; do
  "prepare_$part"
done
