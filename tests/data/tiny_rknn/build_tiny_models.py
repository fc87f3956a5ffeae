"""Build the tiny test models in this folder with Rockchip's rknn-toolkit2 (random weights of our own).

Run with the toolkit's venv (rknn-toolkit2 2.5.0, CPU only; no board needed):

    /work/venvs/toolkit2/bin/python tests/data/tiny_rknn/build_tiny_models.py tests/data/tiny_rknn

Writes, for rk3588:
- ``tiny_image.onnx`` / ``tiny_image_fp16.rknn``: one 3x3 conv, image input ``[1, 3, 16, 16]``
  (NCHW in the graph; the runtime exchanges it NHWC), mean 0 / std 255 folded into the model;
- ``tiny_image_i8.rknn``: the same network quantised (int8) on 4 random images;
- ``tiny_multi.onnx`` / ``tiny_multi.rknn``: two inputs, ``features`` float32 ``[1, 8]`` and
  ``ids`` int64 ``[1, 4]`` (an embedding lookup added to the features), fp16 build.
The weights come from a fixed seed: the files are ours, a few KB each, and safe to commit.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 19


def image_onnx(path: Path) -> None:
    rng = np.random.default_rng(SEED)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    conv = helper.make_node("Conv", ["images", "w", "b"], ["output0"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [conv],
        "tiny_image",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4, 16, 16])],
        [weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def multi_onnx(path: Path) -> None:
    rng = np.random.default_rng(SEED + 1)
    table = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "table")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["looked_up"], axis=0),  # [1, 4, 8]
        helper.make_node("ReduceSum", ["looked_up"], ["pooled"], axes=[1], keepdims=0),  # [1, 8]
        helper.make_node("Add", ["features", "pooled"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_multi",
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4]),
        ],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 8])],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    onnx.save(model, str(path))


def build(onnx_path: Path, out: Path, quantise: bool, image: bool, custom: str) -> None:
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    kwargs = {"mean_values": [[0, 0, 0]], "std_values": [[255, 255, 255]]} if image else {}
    if rknn.config(target_platform="rk3588", custom_string=custom, **kwargs) != 0:
        raise SystemExit("config failed")
    if rknn.load_onnx(model=str(onnx_path)) != 0:
        raise SystemExit(f"load_onnx failed: {onnx_path}")
    dataset = None
    if quantise:
        folder = Path(tempfile.mkdtemp())
        rng = np.random.default_rng(SEED + 2)
        lines = []
        for i in range(4):
            image_file = folder / f"calib{i}.npy"
            np.save(image_file, rng.integers(0, 256, (1, 3, 16, 16), dtype=np.uint8))  # npy: NCHW
            lines.append(str(image_file))
        dataset = folder / "dataset.txt"
        dataset.write_text("\n".join(lines) + "\n")
    if rknn.build(do_quantization=quantise, dataset=str(dataset) if dataset else None) != 0:
        raise SystemExit(f"build failed: {out}")
    if rknn.export_rknn(str(out)) != 0:
        raise SystemExit(f"export failed: {out}")
    rknn.release()


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
    image_onnx(folder / "tiny_image.onnx")
    multi_onnx(folder / "tiny_multi.onnx")
    build(folder / "tiny_image.onnx", folder / "tiny_image_fp16.rknn", False, True, "tiny image fp16")
    build(folder / "tiny_image.onnx", folder / "tiny_image_i8.rknn", True, True, "tiny image int8")
    build(folder / "tiny_multi.onnx", folder / "tiny_multi.rknn", False, False, "tiny multi fp16")


if __name__ == "__main__":
    main()
