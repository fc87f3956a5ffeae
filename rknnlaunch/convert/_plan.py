"""Pure decisions of `rknnlaunch convert`: input size, the float16 head tail, the toolkit's
quantisation config edit, calibration hashing and the summary of the toolkit's log."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import ModelError, UsageError
from ..npu import SOCS, soc_by_name


@dataclass(frozen=True)
class GraphNode:
    """One node of an ONNX graph, as far as the tail search needs it."""

    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def check_target(target: str) -> str:
    """The toolkit's target name for ``target`` (`UsageError` listing the SoCs we know otherwise)."""
    soc = soc_by_name(target.strip().lower())
    if soc is None:
        known = ", ".join(s.name for s in SOCS)
        raise UsageError(f"unknown target SoC {target!r}", f"pass --target one of: {known}")
    return soc.name


def input_size(
    shape: Sequence[int | str | None], given: tuple[int, int] | None, name: str = "images"
) -> tuple[int, int]:
    """(width, height) of an NCHW image input; ``given`` (``--input-size``) wins.

    A dynamic height/width without ``--input-size`` is a `UsageError` saying which to give.
    """
    if len(shape) != 4:
        raise ModelError(
            f"the ONNX input {name!r} has shape {list(shape)}, not an NCHW image [1, 3, H, W]",
            "export a YOLO detection model with one image input (ultralytics: model.export(format='onnx'))",
        )
    if shape[1] not in (3, None) and not isinstance(shape[1], str):
        raise ModelError(
            f"the ONNX input {name!r} has {shape[1]} channels; convert takes RGB models (3 channels)",
            "export the model with 3 input channels",
        )
    if given is not None:
        return given
    height, width = shape[2], shape[3]
    if not (isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0):
        raise UsageError(
            f"the ONNX input {name!r} has a dynamic size {list(shape)}",
            "pass the size it was trained for, e.g. --input-size 640 (or 640x384 for width x height)",
        )
    return width, height


def parse_size(text: str) -> tuple[int, int]:
    """``640`` -> (640, 640); ``640x384`` -> (640, 384) (width x height); multiples of 32."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX,]\s*(\d+))?\s*", text)
    if not match:
        raise UsageError(f"--input-size {text!r} is not a size", "write 640 or 640x384 (width x height)")
    width = int(match.group(1))
    height = int(match.group(2) or width)
    if not (32 <= width <= 4096 and 32 <= height <= 4096) or width % 32 or height % 32:
        raise UsageError(
            f"--input-size {text!r}: YOLO sizes are multiples of 32 between 32 and 4096",
            "e.g. --input-size 640",
        )
    return width, height


def float_tail(nodes: Sequence[GraphNode], output: str) -> tuple[str, ...]:
    """Tensors to keep in float16 so an int8 build of a single-output YOLO head still sees scores.

    In the Ultralytics head one ``Split`` separates the box logits (DFL) from the class logits
    (``Sigmoid``); everything from that Split to ``output`` (DFL softmax, box arithmetic, sigmoid,
    the final Concat) is kept in float16, so boxes (0-640 px) and scores (0-1) no longer share one
    int8 scale. Returns the Split's and its descendants' output tensors, in graph order. Raises
    `ModelError` when the graph has no such Split (then only --fp16 is safe).
    """
    consumers: dict[str, list[int]] = {}
    for index, node in enumerate(nodes):
        for tensor in node.inputs:
            consumers.setdefault(tensor, []).append(index)
    producer = {tensor: index for index, node in enumerate(nodes) for tensor in node.outputs}
    if output not in producer:
        raise ModelError(f"the graph has no node producing {output!r}", "pass a YOLO detection ONNX")
    ancestors = _ancestors(nodes, producer, output)
    split = None
    for index in sorted(ancestors):
        node = nodes[index]
        if node.op_type != "Split":
            continue
        feeds_sigmoid = any(
            nodes[c].op_type == "Sigmoid" for tensor in node.outputs for c in consumers.get(tensor, [])
        )
        if feeds_sigmoid:
            split = index  # the last such Split before the output
    if split is None:
        raise ModelError(
            "cannot find the YOLO head's box/score Split in the graph, so an int8 build would give boxes "
            "and scores one shared int8 scale (every score 0)",
            "convert with --fp16, or export the rknn_model_zoo layout (separate box/score outputs)",
        )
    keep: set[int] = set()
    frontier = [split]
    while frontier:
        index = frontier.pop()
        if index in keep or index not in ancestors:
            continue
        keep.add(index)
        for tensor in nodes[index].outputs:
            frontier.extend(consumers.get(tensor, []))
    return tuple(tensor for index in sorted(keep) for tensor in nodes[index].outputs)


def _ancestors(nodes: Sequence[GraphNode], producer: dict[str, int], output: str) -> set[int]:
    """Indices of the nodes ``output`` depends on (itself included)."""
    seen: set[int] = set()
    frontier = [producer[output]]
    while frontier:
        index = frontier.pop()
        if index in seen:
            continue
        seen.add(index)
        frontier.extend(producer[t] for t in nodes[index].inputs if t in producer)
    return seen


def with_float_layers(config_text: str, tensors: Iterable[str]) -> str:
    """The toolkit's ``*.quantization.cfg`` (YAML) with ``tensors`` listed as float16 under
    ``custom_quantize_layers`` (what ``hybrid_quantization_step1(custom_hybrid=...)`` writes)."""
    lines = config_text.splitlines()
    block = ["custom_quantize_layers:"] + [f"    {_yaml_key(t)}: float16" for t in tensors]
    for index, line in enumerate(lines):
        if line.startswith("custom_quantize_layers:"):
            end = index + 1
            while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
                end += 1
            return "\n".join(lines[:index] + block + lines[end:]) + "\n"
    return "\n".join(block + lines) + "\n"


def _yaml_key(tensor: str) -> str:
    """Tensor names as YAML keys: plain unless they hold characters YAML would read otherwise."""
    if re.fullmatch(r"[A-Za-z0-9_/.\-]+", tensor) and not tensor.startswith("-"):
        return tensor
    return "'" + tensor.replace("'", "''") + "'"


def calibration_hash(files: Sequence[Path]) -> str:
    """sha256 over the calibration images' names and bytes, in the order given (sorted by caller)."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


# --- the toolkit's log ------------------------------------------------------------------------

_REGTASK = "REGTASK: The bit width of field value exceeds the limit"
_ERROR = re.compile(r"^E\s+(?:RKNN:\s*(?:\[[^\]]*\]\s*)?)?(?P<text>.*)$")
_WARN = re.compile(r"^W\s+(?P<text>.*)$")
_PROGRESS = re.compile(r"\d+/\d+ \[|it/s\]|s/it\]|\|\s*\d+/\d+")


@dataclass(frozen=True)
class LogSummary:
    """What the toolkit said, reduced to what a user needs."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    regtask_lines: int = 0
    notes: tuple[str, ...] = field(default=())
    """What `convert` changed in the ONNX before the toolkit loaded it (opset, head rewrite)."""

    def describe(self) -> list[str]:
        out = [f"prepared for rknn-toolkit2: {note}" for note in self.notes]
        if self.regtask_lines:
            out.append(
                f"{self.regtask_lines} x 'E RKNN: {_REGTASK}' from the compiler: a known message for "
                "YOLOv8 heads (open upstream report), harmless: validate checks the result"
            )
        out += [f"toolkit warning: {w}" for w in self.warnings]
        out += [f"toolkit error: {e}" for e in self.errors]
        return out


def summarise_log(lines: Iterable[str]) -> LogSummary:
    """Group the toolkit's log lines (colour codes already stripped): the known-harmless REGTASK
    lines are counted, not shown; progress bars dropped; errors and warnings kept once each."""
    errors: list[str] = []
    warnings: list[str] = []
    regtask = 0
    for raw in lines:
        for line in raw.split("\r"):
            line = line.strip()
            if not line or _PROGRESS.search(line):
                continue
            if _REGTASK in line:
                regtask += 1
                continue
            error = _ERROR.match(line)
            if error:
                text = error.group("text").strip()
                if (
                    text
                    and not text.startswith(("rknn-toolkit2 version", "Traceback"))
                    and not text.endswith("Traceback (most recent call last):")  # "E build: Traceback"
                    and text not in errors
                ):
                    errors.append(text)
                continue
            warn = _WARN.match(line)
            if warn:
                text = warn.group("text").strip()
                if text and "temperate env" not in text and text not in warnings:
                    warnings.append(text)
    return LogSummary(tuple(errors[:20]), tuple(warnings[:20]), regtask)


_TOOLKIT_FRAME = re.compile(r"in (rknn\.api\.(?:rules\.\w+|graph_optimizer\.\w+)\.\w+)")


def toolkit_frame(text: str) -> str | None:
    """The innermost rknn-toolkit2 graph-optimiser function a traceback text names (the toolkit's
    ValueError carries its traceback: ``File "rknn/api/rules/conv.py", line 4860, in
    rknn.api.rules.conv._p_seperate_conv_rs_split``), or None."""
    frames = _TOOLKIT_FRAME.findall(text)
    return frames[-1] if frames else None


_DISABLE_RULE = re.compile(r"disable_rules=\[\s*'(?P<rule>\w+)'\s*\]")


def disableable_rule(lines: Iterable[str]) -> str | None:
    """The optimiser rule the toolkit's log suggests disabling after it failed, or None (2.5.0:
    "W hybrid_quantization_step1: You can add disable_rules=['fuse_...'] in rknn.config() to
    temporarily disable the error rule!")."""
    for line in lines:
        match = _DISABLE_RULE.search(line)
        if match:
            return match.group("rule")
    return None


def fix_for(summary: LogSummary, stage: str, frame: str | None = None) -> str:
    """The fix for a failed toolkit stage, from what it logged (``frame``: the optimiser function
    that raised, from `toolkit_frame`)."""
    if frame is not None:
        return (
            f"rknn-toolkit2's graph optimiser fails on a pattern in this graph ({frame}); re-export the "
            "ONNX with opset 12-19 and simplify=True (ultralytics: model.export(format='onnx', opset=12, "
            "simplify=True)) and, if it persists, report the model to rknn-toolkit2 with that name"
        )
    text = " ".join(summary.errors).lower()
    if "dataset" in text or ("quantiz" in text and "image" in text):
        return (
            "check the calibration images (--quant-images): readable JPEG/PNG files of the scenes "
            "the model sees"
        )
    if "opset" in text or "not support" in text or "unsupported" in text:
        return (
            "re-export the ONNX with opset 12-19 and simplify=True (ultralytics: "
            "model.export(format='onnx', opset=12, simplify=True)), or convert with --fp16"
        )
    if "input" in text and ("shape" in text or "size" in text):
        return "give the input size the model was trained for with --input-size (e.g. 640)"
    if stage == "load":
        return "check that the file is a valid ONNX export of a YOLO detection model"
    return "rerun with --verbose to see the whole toolkit log, or try --fp16"
