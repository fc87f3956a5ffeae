"""ONNX -> .rknn with rknn-toolkit2 (x86_64 Linux): our letterbox's mean/std, no "blind" int8 heads,
the model's facts embedded, the toolkit's log summarised. The toolkit is imported only on use."""

from ._convert import (
    Converted,
    ConvertPreview,
    ConvertRequest,
    OnnxFacts,
    convert,
    default_output,
    preview_convert,
    read_onnx,
)
from ._plan import GraphNode, LogSummary, float_tail, summarise_log, with_float_layers
from ._toolkit import ToolkitFactory, ToolkitLike, load_toolkit

__all__ = [
    "ConvertPreview",
    "ConvertRequest",
    "Converted",
    "GraphNode",
    "LogSummary",
    "OnnxFacts",
    "ToolkitFactory",
    "ToolkitLike",
    "convert",
    "default_output",
    "float_tail",
    "load_toolkit",
    "preview_convert",
    "read_onnx",
    "summarise_log",
    "with_float_layers",
]
