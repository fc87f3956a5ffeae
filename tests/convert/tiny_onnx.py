"""A tiny YOLOv8-shaped ONNX written with the `onnx` package (our own graph, no trained weights): one
``images`` input [1, 3, S, S] and one Ultralytics table [1, 4 + nc, anchors] (strides 8/16/32), with
the metadata Ultralytics' exporter writes (``names`` as a Python dict literal, ``imgsz``, ``task``,
``stride``). Enough for `convert` to read, plan and build; not a detector."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def write_yolov8_onnx(path: Path, names: Sequence[str], size: int = 64, seed: int = 0) -> Path:
    """A [1, 3, size, size] -> [1, 4 + len(names), anchors] model at ``path`` (opset 12)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    channels = 4 + len(names)
    rng = np.random.default_rng(seed)
    nodes, inits, branches = [], [], []
    for stride in (8, 16, 32):
        weight = (rng.normal(0, 0.01, (channels, 3, stride, stride))).astype(np.float32)
        inits.append(numpy_helper.from_array(weight, f"w{stride}"))
        nodes.append(
            helper.make_node(
                "Conv",
                ["images", f"w{stride}"],
                [f"c{stride}"],
                kernel_shape=[stride, stride],
                strides=[stride, stride],
            )
        )
        inits.append(numpy_helper.from_array(np.array([1, channels, -1], np.int64), f"s{stride}"))
        nodes.append(helper.make_node("Reshape", [f"c{stride}", f"s{stride}"], [f"r{stride}"]))
        branches.append(f"r{stride}")
    nodes.append(helper.make_node("Concat", branches, ["cat"], axis=2))
    nodes.append(helper.make_node("Sigmoid", ["cat"], ["output0"]))
    anchors = sum((size // s) ** 2 for s in (8, 16, 32))
    graph = helper.make_graph(
        nodes,
        "tiny-yolov8",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, channels, anchors])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], producer_name="pytorch")
    model.ir_version = 7  # what onnxruntime and rknn-toolkit2's onnx<=1.18 both read
    metadata = {
        "names": repr(dict(enumerate(names))),
        "imgsz": f"[{size}, {size}]",
        "task": "detect",
        "stride": "32",
    }
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
