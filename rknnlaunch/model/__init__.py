"""Model files: .rknn header and metadata, ONNX metadata, the default model, the input-file rule, and
the facts rknnlaunch embeds in a converted .rknn."""

from ._facts import FACTS_KEY, FACTS_SCHEMA, ModelFacts, decode_custom_string, encode_custom_string

__all__ = ["FACTS_KEY", "FACTS_SCHEMA", "ModelFacts", "decode_custom_string", "encode_custom_string"]
