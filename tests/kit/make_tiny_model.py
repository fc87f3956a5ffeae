"""Build tests/kit/models/tiny-rk3588.rknn: a tiny ONNX graph of our own with seeded random weights,
converted by the real rknn-toolkit2 (so the file is what the toolkit writes, not a hand-built one).

Graph: x 1x3x32x32 float -> Conv 3x3 (3 -> 8, pad 1) -> Relu -> Conv 1x1 (8 -> 6) -> Reshape ->
y 1x6x1024: the shape of an Ultralytics YOLOv8 head with 2 classes ([1, 4+nc, N]), so `rknnlaunch
bench` and the SDK's decode run on it as on a real detector (the boxes it finds mean nothing).
Weights: numpy's default_rng(20261201), so a rebuild gives the same graph. Nothing third-party
goes in; the committed .rknn is ours to commit. Rebuild (x86_64, rknn-toolkit2 installed):

    PYTHONPATH=. /work/venvs/toolkit2/bin/python tests/kit/make_tiny_model.py --out tests/kit/models
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

INPUT_SHAPE = (1, 3, 32, 32)
HIDDEN = 8
OUTPUTS = 6
SEED = 20261201
TARGET = "rk3588"
REPO = Path(__file__).resolve().parents[2]


def tiny_onnx_bytes() -> bytes:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    w1 = (rng.standard_normal((HIDDEN, INPUT_SHAPE[1], 3, 3)) * 0.2).astype(np.float32)
    b1 = (rng.standard_normal(HIDDEN) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((OUTPUTS, HIDDEN, 1, 1)) * 0.3).astype(np.float32)
    b2 = (rng.standard_normal(OUTPUTS) * 0.05).astype(np.float32)
    anchors = INPUT_SHAPE[2] * INPUT_SHAPE[3]
    shape = np.array([1, OUTPUTS, anchors], dtype=np.int64)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"]),
            helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[1, 1]),
            helper.make_node("Reshape", ["c2", "shape"], ["y"]),
        ],
        "rknnlaunch_tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, OUTPUTS, anchors])],
        initializer=[
            numpy_helper.from_array(array, name)
            for array, name in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (shape, "shape"))
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="rknnlaunch")
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    onnx_path = args.out / "tiny.onnx"
    onnx_path.write_bytes(tiny_onnx_bytes())
    # The probe builder's convert (fp16, mean 0 / std 255): one conversion recipe in the project.
    spec = importlib.util.spec_from_file_location(
        "make_probe_model", REPO / "images/probe/make_probe_model.py"
    )
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    probe.convert(onnx_path, TARGET, args.out / f"tiny-{TARGET}.rknn")
    print(f"wrote {onnx_path} and tiny-{TARGET}.rknn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
