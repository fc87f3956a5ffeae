#!/usr/bin/env bash
# Install Rockchip's compiler, rknn-toolkit2 2.5.0 (x86_64 Linux, Python 3.11), into the ACTIVE venv,
# for `rknnlaunch convert` / `validate` and the slow tests (pytest -m slow tests/convert).
#
# Use a venv of its own (CI: a second venv): the toolkit's onnx (<= 1.18) needs protobuf < 7, and the
# device plugin's generated gRPC stubs need protobuf >= 7, so the two cannot share one environment.
#   python3.11 -m venv .venv-toolkit && . .venv-toolkit/bin/activate
#   pip install -e '.[cpu,vision,dev]' && bash scripts/install-toolkit2.sh
#
# Why not `pip install rknn-toolkit2`: its metadata asks for torch<=2.4 (pip would pull a CUDA build
# of several GB), numpy<=1.26 and protobuf<=4.25. It imports torch but runs on the CPU build, and
# numpy 2 works for load_onnx/build/simulator, so: the CPU torch first, the toolkit without its
# dependencies, then the rest of its requirements. Idempotent; pip's cache makes a rerun fast.
set -euo pipefail

if [ -z "${VIRTUAL_ENV:-}" ]; then
  echo "install-toolkit2.sh: activate the venv to install into first (see the comment at the top)" >&2
  exit 2
fi
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "install-toolkit2.sh: rknn-toolkit2 has wheels for x86_64 Linux only (this is $(uname -s)-$(uname -m));" \
    "on the board use rknn-toolkit-lite2 (pip install 'rknnlaunch[npu]')" >&2
  exit 2
fi
case "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" in
  3.8 | 3.9 | 3.10 | 3.11 | 3.12) ;;
  *)
    echo "install-toolkit2.sh: rknn-toolkit2 2.5.0 has wheels for Python 3.8-3.12; use python3.11" >&2
    exit 2
    ;;
esac

pip() { python -m pip "$@"; }

# 1. torch, CPU build (never the default CUDA wheel). The +cpu local version comes from PyTorch's CPU
#    index; a wheel already on disk (pip --find-links) is used first.
if ! python -c 'import torch' 2>/dev/null; then
  pip install -q 'torch==2.13.0+cpu' --extra-index-url https://download.pytorch.org/whl/cpu \
    || pip install -q 'torch==2.13.0' --extra-index-url https://download.pytorch.org/whl/cpu
fi
# 2. the toolkit itself, without its (conflicting) declared dependencies
pip install -q --no-deps 'rknn-toolkit2==2.5.0'
# 3. what it needs besides torch. onnx <= 1.18 (1.19 removed onnx.mapping, which the toolkit uses);
#    protobuf < 7 (onnx 1.18 reads FieldDescriptor.label, gone in protobuf 7); setuptools < 81 (it
#    imports pkg_resources); numpy < 2.3 (with numpy 2.4 its build of YOLO11's attention block fails,
#    "only 0-dimensional arrays can be converted to Python scalars"; 2.2 builds it). opencv: the
#    headless build ([vision]) serves the toolkit's `import cv2`.
pip install -q 'onnx>=1.16.1,<=1.18.0' 'protobuf>=4.21.6,<7' 'onnxruntime>=1.17' 'psutil>=5.9' \
  'ruamel.yaml>=0.17.21' 'scipy>=1.9.3' 'tqdm>=4.64.1' 'fast-histogram>=0.11' 'setuptools<81' 'numpy<2.3'
python -c 'import cv2' 2>/dev/null || pip install -q 'opencv-python-headless>=4.8'
python -c 'from rknn.api import RKNN; import importlib.metadata as m; print("rknn-toolkit2", m.version("rknn-toolkit2"), "ready")'
