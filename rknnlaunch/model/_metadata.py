"""What the CLI needs to know about a YOLO model file: which file (given or the default), metadata,
class names."""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import ModelError
from .._files import require_file

# Their home is ._default; named here too for the callers (tests) that import them from here.
from ._default import INSTALL_DEFAULT_MODEL as INSTALL_DEFAULT_MODEL
from ._default import default_model as default_model


def resolve_model(model: str | os.PathLike[str] | None, what: str = "model file") -> Path:
    """``model`` as an existing readable file (the input rule, ``what`` naming it: ``--model``), or
    the default model, checked, when None."""
    if model is None:
        return default_model()
    return require_file(model, what, "pass the path of an existing .rknn or .onnx file", ModelError)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_metadata(path: Path) -> dict[str, Any]:
    """Format, size, tensors and the exporter's metadata of an .onnx or .rknn file.

    No hash: reading a whole model to hash it is for reports (the bench's JSON adds `sha256`),
    not for every start of `detect` or an app.
    """
    info: dict[str, Any] = {
        "path": str(path),
        "file": path.name,
        "size_bytes": path.stat().st_size,
    }
    if path.suffix.lower() == ".onnx":
        info["format"] = "onnx"
        info.update(_onnx_metadata(path))
    else:
        from ._rknnfile import read_rknn

        rknn = read_rknn(path)
        info["format"] = "rknn"
        info.update({k: v for k, v in rknn.as_dict().items() if k not in ("path", "size")})
    return info


def _onnx_metadata(path: Path) -> dict[str, Any]:
    try:
        import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return {"metadata": {}, "note": "onnxruntime not installed: no tensor metadata"}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ModelError(
            f"onnxruntime cannot load {path}: {exc}", "check that the file is a valid ONNX model"
        ) from None
    meta = session.get_modelmeta()

    def tensors(items: Any) -> list[dict[str, Any]]:
        return [{"name": t.name, "shape": list(t.shape), "dtype": t.type} for t in items]

    return {
        "inputs": tensors(session.get_inputs()),
        "outputs": tensors(session.get_outputs()),
        "producer": meta.producer_name,
        "metadata": dict(meta.custom_metadata_map),
    }


def class_names(metadata: Mapping[str, Any]) -> list[str] | None:
    """Class names from the model's metadata (the ``names`` of `decoder_facts`)."""
    names: list[str] | None = decoder_facts(metadata).get("names")
    return names


# Keys of the exporter's metadata the YOLO decoder understands (docs/yolo.md), and their types.
DECODER_KEYS: dict[str, type | tuple[type, ...]] = {
    "task": str,
    "names": (list, dict),
    "imgsz": (list, int),
    "stride": (int, list),
    "layout": str,
    "kpt_shape": list,
    "anchors": list,
    "end2end": bool,
}
_MAX_LITERAL_CHARS = 1 << 16  # a names dict of thousands of classes fits; a hostile blob does not


def _literal(value: Any) -> Any:
    """A metadata value as exported: Ultralytics writes Python literals as strings ("[640, 640]")."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text in ("True", "False"):  # Ultralytics writes end2end as a Python bool
        return text == "True"
    if not text or len(text) > _MAX_LITERAL_CHARS or text[0] not in "[{(0123456789-":
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def decoder_facts(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The facts a YOLO decoder takes from a model file's metadata (`model_metadata`'s result).

    Reads the facts `rknnlaunch convert` embedded in an .rknn (``facts``, already validated), then
    the exporter's key/value metadata (ONNX ``metadata_props``, or ``custom``), and keeps the keys
    in `DECODER_KEYS` whose values have the expected type after literal parsing, dropping the rest:
    a malformed value means "not known", so the decoder falls back to the output shapes (and says
    so when they are ambiguous).
    """
    facts: dict[str, Any] = {}
    embedded = metadata.get("facts")  # what `rknnlaunch convert` embedded (model/_facts.py), checked
    if isinstance(embedded, Mapping):
        for key, value in (
            ("task", embedded.get("task")),
            ("names", embedded.get("class_names")),
            ("layout", embedded.get("output_layout")),
        ):
            if value is not None:
                facts[key] = value
        size = embedded.get("input_size")
        if isinstance(size, (list, tuple)) and len(size) == 2:
            facts["imgsz"] = [size[1], size[0]]  # Ultralytics' order: height, width
    for source_key in ("metadata", "custom"):
        source = metadata.get(source_key)
        if not isinstance(source, Mapping):
            continue
        for key, expected in DECODER_KEYS.items():
            if key in source and key not in facts:
                value = _literal(source[key])
                if isinstance(value, tuple):
                    value = list(value)
                # bool is an int subclass: only a key that expects a bool may carry one
                if isinstance(value, expected) and (expected is bool or not isinstance(value, bool)):
                    facts[key] = value
    names = facts.get("names")
    if isinstance(names, dict):
        if names and all(isinstance(k, int) and k >= 0 for k in names):
            facts["names"] = [str(names.get(i, f"class {i}")) for i in range(max(names) + 1)]
        else:
            del facts["names"]
    elif isinstance(names, list):
        facts["names"] = [str(name) for name in names]
    if isinstance(facts.get("task"), str):
        facts["task"] = facts["task"].lower()
    return facts


def input_size(metadata: Mapping[str, Any], default: int = 640) -> tuple[int, int]:
    """(width, height) of the model's image input: NCHW (ONNX) or NHWC (.rknn) shapes."""
    inputs = metadata.get("inputs") or []
    shape = inputs[0].get("shape") if inputs and isinstance(inputs[0], dict) else None
    if isinstance(shape, list) and len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape):
        if shape[1] in (1, 3, 4):
            return shape[3], shape[2]
        return shape[2], shape[1]
    return default, default
