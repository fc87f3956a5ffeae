#!/usr/bin/env bash
# The one way to build the images (docs/images.md; CI and the demo call it): runtime, plugin,
# plugin-probe and dra-driver, for linux/arm64 by default, with docker buildx, buildah or podman,
# whichever works.
#
# usage: images/build.sh [options] [runtime|plugin|plugin-probe|dra-driver ...]    (no names: all four)
#   --platform P               linux/arm64 (default) or linux/amd64 (plugin only makes sense there)
#   --engine E                 docker | buildah | podman (default: the first that works, in that order)
#   --base debootstrap         no registry: make PYTHON_IMAGE locally (images/base.sh, Debian bookworm
#                              arm64 + Debian's python3.11) instead of pulling python:3.11-slim-bookworm
#   --librknnrt-standin sim    no access to Rockchip's repository (and no NPU to run it on): take the
#                              simulated librknnrt (tests/kit/librknnrt_sim) with its own pins; the
#                              image says so (label io.rknnlaunch.librknnrt.standin, `rknnlaunch doctor`)
#   --probe-models DIR         plugin-probe: take these probe models (images/probe/make_probe_model.py
#                              --out DIR, run on the host) instead of building them in an amd64 stage
#   --wheels DIR               no package index reachable: install from these pinned arm64 wheels
#                              (images/arm64-root.sh caches them in $RKNNLAUNCH_CI_CACHE/arm64/bookworm/wheels)
#   --prefix P                 tag prefix, e.g. registry.example.com/ (default: none)
#   --version V                image tag (default: the package version)
# environment: PYTHON_IMAGE, RKNNRT_VERSION, RKNNRT_SHA256, RKNNRT_URL (the Dockerfiles' build args).
#
# Each image gets the label io.rknnlaunch.inputs (sha256 of everything that builds it); an image
# already tagged with the same inputs is not built again (layer caches cover partial changes). The
# last lines are `built|cached TAG` per image. Any missing prerequisite stops with one line naming
# the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
die() {
  echo "images/build.sh: $*" >&2
  exit 1
}

platform=linux/arm64
engine=
base=
standin=
probe_models=
wheels=
prefix=
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' rknnlaunch/_version.py)
names=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --platform) platform=$2; shift 2 ;;
    --engine) engine=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --librknnrt-standin) standin=$2; shift 2 ;;
    --probe-models) probe_models=$2; shift 2 ;;
    --wheels) wheels=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    runtime | plugin | plugin-probe | dra-driver) names+=("$1"); shift ;;
    *) die "unknown argument '$1' (see images/build.sh --help)" ;;
  esac
done
[ "${#names[@]}" -gt 0 ] || names=(runtime plugin plugin-probe dra-driver)
[ -n "$version" ] || die "cannot read the package version from rknnlaunch/_version.py; fix: pass --version"
case "$base" in "" | debootstrap) ;; *) die "--base '$base' is unknown; fix: --base debootstrap" ;; esac
case "$standin" in "" | sim) ;; *) die "--librknnrt-standin '$standin' is unknown; fix: --librknnrt-standin sim" ;; esac

# --- the engine ------------------------------------------------------------------------------------
engine_works() {
  case "$1" in
    docker) command -v docker >/dev/null && docker buildx version >/dev/null 2>&1 && docker info >/dev/null 2>&1 ;;
    buildah) command -v buildah >/dev/null && buildah version >/dev/null 2>&1 ;;
    podman) command -v podman >/dev/null && podman version >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}
if [ -n "$engine" ]; then
  engine_works "$engine" || die "the engine '$engine' does not work here; fix: install it (docker with buildx and a running daemon, buildah, or podman), or drop --engine"
else
  for candidate in docker buildah podman; do
    if engine_works "$candidate"; then engine=$candidate; break; fi
  done
  [ -n "$engine" ] || die "no container engine works here (docker buildx with a daemon, buildah, podman); fix: apt-get install buildah podman"
fi

image_label() { # TAG LABEL -> the label's value ("" when the image or the label is missing)
  case "$engine" in
    docker) docker image inspect --format "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true ;;
    *) buildah inspect --type image --format "{{index .Docker.Config.Labels \"$2\"}}" "$1" 2>/dev/null || true ;;
  esac
}
image_exists() {
  case "$engine" in
    docker) docker image inspect "$1" >/dev/null 2>&1 ;;
    *) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
  esac
}

# --- the host: arm64 RUN steps run under qemu (binfmt_misc), and podman/buildah as root need the
# --- containers.conf ulimit line; the one host helper does both (locked, idempotent)
if [ "$platform" = linux/arm64 ] && [ "$engine" != docker ] && [ "$(id -u)" = 0 ]; then
  bash images/prepare-host.sh binfmt containers >&2 || die "cannot prepare the host for arm64 builds (see above)"
fi

# --- the base --------------------------------------------------------------------------------------
if [ "$base" = debootstrap ]; then
  [ "$platform" = linux/arm64 ] || die "--base debootstrap makes an arm64 base only; fix: --platform linux/arm64"
  [ "$engine" != docker ] || die "--base debootstrap needs buildah; fix: --engine buildah (apt-get install buildah)"
  PYTHON_IMAGE=$(bash images/base.sh | tail -n 1)
fi
PYTHON_IMAGE=${PYTHON_IMAGE:-python:3.11-slim-bookworm}
if ! image_exists "$PYTHON_IMAGE"; then
  echo "images/build.sh: pulling the base $PYTHON_IMAGE" >&2
  case "$engine" in
    docker) docker pull --platform "$platform" "$PYTHON_IMAGE" >/dev/null 2>&1 ;;
    *) timeout 300 buildah pull --platform "$platform" "$PYTHON_IMAGE" >/dev/null 2>&1 ;;
  esac || die "the base image $PYTHON_IMAGE is not here and cannot be pulled; fix: images/build.sh --base debootstrap (no registry needed), or set PYTHON_IMAGE to an image you have"
fi
base_id=$(case "$engine" in docker) docker image inspect --format '{{.Id}}' "$PYTHON_IMAGE" ;; *) buildah inspect --type image --format '{{.FromImageID}}' "$PYTHON_IMAGE" ;; esac)

# --- librknnrt: the pinned download, or the explicit stand-in --------------------------------------
dockerfile_arg() { sed -n "s/^ARG $1=\(.*\)/\1/p" images/runtime/Dockerfile | head -n 1; }
RKNNRT_VERSION=${RKNNRT_VERSION:-$(dockerfile_arg RKNNRT_VERSION)}
RKNNRT_SHA256=${RKNNRT_SHA256:-$(dockerfile_arg RKNNRT_SHA256)}
RKNNRT_URL=${RKNNRT_URL:-}
rknnrt_args=()
rm -f images/standin/librknnrt.so
if [ -n "$standin" ]; then
  sim_dir=$(bash tests/kit/librknnrt_sim/build.sh | tail -n 1)
  cp "$sim_dir/aarch64/librknnrt.so" images/standin/librknnrt.so
  standin_version=$(strings images/standin/librknnrt.so | sed -n 's/^librknnrt version: \([0-9.]*\) (simulated.*/\1/p' | head -n 1)
  [ -n "$standin_version" ] || die "the stand-in has no simulated version line; fix: rebuild it with tests/kit/librknnrt_sim/build.sh"
  rknnrt_args=(--build-arg "RKNNRT_VERSION=$standin_version"
    --build-arg "RKNNRT_SHA256=$(sha256sum images/standin/librknnrt.so | cut -d' ' -f1)"
    --build-arg RKNNRT_STANDIN=/standin/librknnrt.so)
  echo "images/build.sh: librknnrt = STAND-IN (simulated $standin_version, tests/kit/librknnrt_sim), not Rockchip's runtime" >&2
else
  # Check the pins on the build machine first: a wrong pin or no network stops here, in one line.
  check=$(mktemp -d)
  if ! out=$(python3 images/fetch_librknnrt.py --version "$RKNNRT_VERSION" --sha256 "$RKNNRT_SHA256" \
    --url "$RKNNRT_URL" --out "$check/librknnrt.so" 2>&1); then
    rm -rf "$check"
    die "librknnrt $RKNNRT_VERSION: $(echo "$out" | head -n 1 | sed 's/^fetch_librknnrt: error: //'); fix: $(echo "$out" | sed -n 's/^ *fix: //p' | head -n 1) (no network and no NPU: --librknnrt-standin sim)"
  fi
  rm -rf "$check"
  rknnrt_args=(--build-arg "RKNNRT_VERSION=$RKNNRT_VERSION" --build-arg "RKNNRT_SHA256=$RKNNRT_SHA256"
    --build-arg "RKNNRT_URL=$RKNNRT_URL")
fi

# --- probe models ------------------------------------------------------------------------------------
rm -f images/probe/prebuilt/probe-*
probe_args=()
if [ -n "$probe_models" ]; then
  [ -s "$probe_models/probe-rk3588.rknn" ] || die "--probe-models $probe_models has no probe-rk3588.rknn; fix: python images/probe/make_probe_model.py --out $probe_models (with rknn-toolkit2)"
  cp "$probe_models"/probe-*.rknn "$probe_models"/probe-expected.json images/probe/prebuilt/
  probe_args=(--build-arg PROBE_MODELS=probe-models-prebuilt)
fi

# --- wheels ----------------------------------------------------------------------------------------
rm -f images/wheels/*.whl
if [ -n "$wheels" ]; then
  ls "$wheels"/*.whl >/dev/null 2>&1 || die "--wheels $wheels holds no .whl files; fix: images/arm64-root.sh bookworm DIR downloads them into \$RKNNLAUNCH_CI_CACHE/arm64/bookworm/wheels"
  cp -l "$wheels"/*.whl images/wheels/ 2>/dev/null || cp "$wheels"/*.whl images/wheels/
fi

# --- build -------------------------------------------------------------------------------------------
inputs_of() { # IMAGE EXTRA... -> sha256 of the files the build sends and of its arguments
  {
    printf '%s\n' "$@" "$PYTHON_IMAGE" "$base_id" "$platform"
    find pyproject.toml README.md rknnlaunch plugin images -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
      ! -path 'images/README.md' ! -path 'images/wheels/*' -print0 | sort -z | xargs -0 sha256sum
    ls images/wheels # pinned files: their names are their versions
  } | sha256sum | cut -d' ' -f1
}
results=()
for name in "${names[@]}"; do
  case "$name" in
    runtime) repo=rknnlaunch-runtime ;;
    plugin) repo=rknpu-device-plugin ;;
    plugin-probe) repo=rknpu-device-plugin-probe ;;
    dra-driver) repo=rknpu-dra-driver ;;
  esac
  tag="$prefix$repo:$version"
  args=(--platform "$platform" -f "images/$name/Dockerfile" -t "$tag"
    --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" --build-arg "RKNNLAUNCH_VERSION=$version")
  case "$name" in plugin | dra-driver) ;; *) args+=("${rknnrt_args[@]}") ;; esac
  [ "$name" != plugin-probe ] || args+=("${probe_args[@]}")
  inputs=$(inputs_of "$name" "${args[@]}")
  if [ "$(image_label "$tag" io.rknnlaunch.inputs)" = "$inputs" ]; then
    results+=("cached $tag")
    continue
  fi
  echo "images/build.sh: building $tag ($engine, $platform)" >&2
  started=$SECONDS
  case "$engine" in
    docker) docker buildx build --load --label "io.rknnlaunch.inputs=$inputs" "${args[@]}" . ;;
    # chroot isolation: no nested namespaces needed (works in a VM or container as root).
    buildah) buildah bud --isolation chroot --layers --pull=false --label "io.rknnlaunch.inputs=$inputs" "${args[@]}" . ;;
    podman) podman build --isolation chroot --layers --pull=false --label "io.rknnlaunch.inputs=$inputs" "${args[@]}" . ;;
  esac >&2 || die "building $tag failed (the engine's output is above); fix: see its last error"
  results+=("built $tag in $((SECONDS - started)) s")
done
rm -f images/standin/librknnrt.so images/probe/prebuilt/probe-* images/wheels/*.whl
printf '%s\n' "${results[@]}"
