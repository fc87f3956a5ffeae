#!/usr/bin/env bash
# The images' base for machines that reach no container registry: a local image standing in for
# python:3.11-slim-bookworm, made from the debootstrap root images/arm64-root.sh caches (Debian
# bookworm arm64, minbase + python3.11 + venv + ca-certificates: the same Debian release and
# Python minor version as the official image; Debian's python3.11, not python.org's build).
#
# usage: images/base.sh [TAG]      (default localhost/rknnlaunch-python:3.11-bookworm-debootstrap)
#   Prints TAG as its last line; images/build.sh --base debootstrap calls it and passes TAG as
#   PYTHON_IMAGE. Rebuilt only when the cached root changes (its stamp is the image's label
#   io.rknnlaunch.base.stamp). Needs root, buildah, and what arm64-root.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-localhost/rknnlaunch-python:3.11-bookworm-debootstrap}
die() {
  echo "base.sh: $*" >&2
  exit 1
}
command -v buildah >/dev/null || die "buildah not found; fix: apt-get install buildah (or set PYTHON_IMAGE to a python:3.11-slim-bookworm you can pull)"
root=$(bash images/arm64-root.sh bookworm --base-only | tail -n 1)
stamp=$(cat "$root.stamp") # arm64-root.sh stamps the cached root beside it
if [ "$(buildah inspect --type image --format '{{index .Docker.Config.Labels "io.rknnlaunch.base.stamp"}}' "$tag" 2>/dev/null)" = "$stamp" ]; then
  echo "base.sh: $tag is up to date (root stamp $stamp)" >&2
  echo "$tag"
  exit 0
fi
echo "base.sh: building $tag from $root" >&2
container=$(buildah from --arch arm64 --os linux scratch)
trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
mount=$(buildah mount "$container")
# The root as debootstrap left it, minus what an image never needs (apt lists, docs, logs).
tar -C "$root" --exclude=./var/cache/apt/archives --exclude=./var/lib/apt/lists \
  --exclude=./usr/share/doc --exclude=./usr/share/man --exclude=./var/log -cf - . | tar -C "$mount" -xf -
# python:3.11-slim puts `python` and `python3` on PATH (/usr/local/bin); the Dockerfiles call `python`.
mkdir -p "$mount/usr/local/bin"
ln -sf /usr/bin/python3.11 "$mount/usr/local/bin/python"
ln -sf /usr/bin/python3.11 "$mount/usr/local/bin/python3"
buildah umount "$container" >/dev/null
buildah config --arch arm64 --os linux \
  --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
  --cmd python3 \
  --label io.rknnlaunch.base.stamp="$stamp" \
  --label org.opencontainers.image.description="Debian bookworm arm64 + Debian's python3.11 (debootstrap; stands in for python:3.11-slim-bookworm)" \
  "$container"
buildah commit -q --rm "$container" "$tag" >/dev/null
trap - EXIT
echo "$tag"
