"""Model files: what a model says about itself, and the facts rknnlaunch embeds in a converted .rknn."""

from ._facts import FACTS_KEY, FACTS_SCHEMA, ModelFacts, decode_custom_string, encode_custom_string

__all__ = ["FACTS_KEY", "FACTS_SCHEMA", "ModelFacts", "decode_custom_string", "encode_custom_string"]
