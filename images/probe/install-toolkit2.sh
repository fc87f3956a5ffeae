#!/bin/sh
# Install rknn-toolkit2 VERSION (x86_64 Linux only) into the python first on PATH, for
# make_probe_model.py at image build (images/plugin-probe/Dockerfile, stage probe-models).
#   usage: install-toolkit2.sh VERSION     (the image passes its librknnrt version: a model needs a
#                                          runtime at least as new as the toolkit that built it)
# Checked with 2.3.2 and 2.5.0 (x86_64, Python 3.11, torch 2.13.0+cpu, numpy 2.2).
#
# Not `pip install rknn-toolkit2`: its metadata asks for torch<=2.4 (pip would pull a CUDA build of
# several GB), numpy<=1.26 and protobuf<=4.25. It runs on the CPU build of torch, so: CPU torch
# first, the toolkit without its declared dependencies, then the rest of what it imports.
# onnx <= 1.18 (1.19 removed onnx.mapping, which the toolkit uses), protobuf < 7 (onnx 1.18),
# setuptools < 81 (the toolkit imports pkg_resources).
set -eu

if [ "$#" -ne 1 ]; then
  echo "usage: $0 RKNN_TOOLKIT2_VERSION (e.g. 2.3.2)" >&2
  exit 2
fi
version=$1

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "$0: rknn-toolkit2 has wheels for x86_64 Linux only (this is $(uname -s)-$(uname -m))" >&2
  exit 2
fi
python -m pip install --no-cache-dir --disable-pip-version-check 'torch==2.13.0+cpu' \
  --extra-index-url https://download.pytorch.org/whl/cpu
python -m pip install --no-cache-dir --disable-pip-version-check --no-deps "rknn-toolkit2==$version"
python -m pip install --no-cache-dir --disable-pip-version-check \
  'onnx>=1.16.1,<=1.18.0' 'protobuf>=4.21.6,<7' 'onnxruntime>=1.17' 'psutil>=5.9' \
  'ruamel.yaml>=0.17.21' 'scipy>=1.9.3' 'tqdm>=4.64.1' 'fast-histogram>=0.11' 'setuptools<81' \
  'opencv-python-headless>=4.8'
python -c 'from rknn.api import RKNN; import importlib.metadata as m; print("rknn-toolkit2", m.version("rknn-toolkit2"))'
