#!/bin/sh
# The one place the images' pip install lines live.
#
# images/runtime/Dockerfile, images/plugin/Dockerfile and images/dra-driver/Dockerfile run this
# script; .ci/checks/dockerfiles.sh runs it too, into a fresh venv, so CI installs exactly what the
# images install. It installs into whatever `python` is first on PATH (the image's /opt/rknnlaunch
# venv, or CI's fresh venv).
#
# usage: install-python.sh runtime|plugin|plugin-probe|dra-driver SOURCE_DIR
#   runtime       rknnlaunch with the npu + vision + video extras (the workload base image)
#   plugin        rknnlaunch with the plugin extra only (the device plugin DaemonSet image)
#   plugin-probe  the plugin extra + npu (rknn-toolkit-lite2) for the plugin's functional probe
#   dra-driver    the DRA driver's image: rknnlaunch's requirements except numpy (the driver never
#                 imports it: tests/test_import_footprint.py) and the dra extra, then rknnlaunch
#                 itself with --no-deps; the kubernetes client's unused asyncio half removed
# SOURCE_DIR is the repository checkout (pyproject.toml, rknnlaunch/, plugin/, images/constraints.txt).
set -eu

if [ "$#" -ne 2 ]; then
  echo "usage: $0 runtime|plugin|plugin-probe|dra-driver SOURCE_DIR" >&2
  exit 2
fi
image=$1
src=$2

case "$image" in
  runtime) extras=npu,vision,video ;;
  plugin) extras=plugin ;;
  plugin-probe) extras=plugin,npu ;;
  dra-driver) extras=dra ;;
  *)
    echo "$0: unknown image '$image' (expected runtime, plugin, plugin-probe or dra-driver)" >&2
    exit 2
    ;;
esac

# --no-cache-dir keeps pip's download cache out of the image layer; the constraints pin every
# version. On x86_64 the npu extra's environment marker skips rknn-toolkit-lite2 (arm64 only).
pip_install() {
  python -m pip install --no-cache-dir --disable-pip-version-check \
    --constraint "$src/images/constraints.txt" "$@"
}

if [ "$image" = dra-driver ]; then
  # The requirements as pyproject.toml declares them (read there, not copied here), numpy dropped,
  # the extra expanded through its rknnlaunch[...] references.
  requirements=$(python - "$src/pyproject.toml" "$extras" <<'PY'
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11 (a 3.10 host, Ubuntu 22.04's): pip vendors the same parser
    from pip._vendor import tomli as tomllib

with open(sys.argv[1], "rb") as file:
    project = tomllib.load(file)["project"]
extras = project["optional-dependencies"]


def expand(name):
    for requirement in extras[name]:
        if requirement.startswith("rknnlaunch["):
            inner = requirement[len("rknnlaunch["):requirement.index("]")]
            for item in inner.split(","):
                yield from expand(item.strip())
        else:
            yield requirement


wanted = [r for r in project["dependencies"] if not r.startswith("numpy")] + list(expand(sys.argv[2]))
print("\n".join(dict.fromkeys(wanted)))
PY
)
  printf '%s\n' "$requirements" >"${TMPDIR:-/tmp}/dra-requirements.txt"
  pip_install -r "${TMPDIR:-/tmp}/dra-requirements.txt"
  rm -f "${TMPDIR:-/tmp}/dra-requirements.txt"
  pip_install --no-deps "$src"
  # The client's asyncio twin (kubernetes.aio, 68 MB of the image's 126 MB of client) and the
  # aiohttp stack only it imports: the driver uses the synchronous client (nothing outside
  # kubernetes/aio imports aiohttp; `import kubernetes` does not load it).
  site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -rf "$site/kubernetes/aio"
  python -m pip uninstall --yes --disable-pip-version-check \
    aiohttp aiohttp-retry aiosignal aiohappyeyeballs frozenlist multidict propcache yarl
  exit 0
fi
pip_install "$src[$extras]"
