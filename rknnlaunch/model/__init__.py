"""Model files: .rknn header and metadata, ONNX metadata, the default model, the input-file rule, and
the facts rknnlaunch embeds in a converted .rknn."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._facts import FACTS_KEY, FACTS_SCHEMA, ModelFacts, decode_custom_string, encode_custom_string

_LAZY = ("FACTS_KEY", "FACTS_SCHEMA", "ModelFacts", "decode_custom_string", "encode_custom_string")


def __getattr__(name: str) -> Any:
    # pydantic models are built on import: only code that reads model facts pays for them
    # (`rknnlaunch run`, every container's ENTRYPOINT, must not).
    if name in _LAZY:
        value = getattr(importlib.import_module("._facts", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FACTS_KEY", "FACTS_SCHEMA", "ModelFacts", "decode_custom_string", "encode_custom_string"]
