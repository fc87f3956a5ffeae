"""Model files: .rknn header and metadata, ONNX metadata, the default model, and the facts rknnlaunch
embeds in a converted .rknn. (The input-file rule, `require_file`, is the base layer's:
`rknnlaunch/_files.py`.)"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._default import (
        DEFAULT_MODEL,
        INSTALL_DEFAULT_MODEL,
        PackagedModel,
        check_sha256,
        default_model,
        packaged_model,
    )
    from ._facts import (
        CUSTOM_STRING_LIMIT,
        FACTS_KEY,
        FACTS_SCHEMA,
        ModelFacts,
        PackedFacts,
        decode_custom_string,
        embedded_pad_and_names,
        encode_custom_string,
        names_file_for,
        pack_facts,
    )
    from ._metadata import (
        class_names,
        decoder_facts,
        input_size,
        model_metadata,
        resolve_model,
        sha256,
    )
    from ._rknnfile import RknnModelInfo, TensorInfo, read_rknn

# What other layers may use, by defining module; imported on first use (PEP 562): pydantic models
# are built on import of `._facts`, and only code that reads model facts pays for them
# (`rknnlaunch run`, every container's ENTRYPOINT, must not); the device plugin's probe reads
# .rknn headers (`read_rknn`) without numpy.
_LAZY = {
    "DEFAULT_MODEL": "._default",
    "INSTALL_DEFAULT_MODEL": "._default",
    "PackagedModel": "._default",
    "check_sha256": "._default",
    "default_model": "._default",
    "packaged_model": "._default",
    "pack_facts": "._facts",
    "names_file_for": "._facts",
    "PackedFacts": "._facts",
    "CUSTOM_STRING_LIMIT": "._facts",
    "TensorInfo": "._rknnfile",
    "FACTS_KEY": "._facts",
    "FACTS_SCHEMA": "._facts",
    "ModelFacts": "._facts",
    "decode_custom_string": "._facts",
    "embedded_pad_and_names": "._facts",
    "encode_custom_string": "._facts",
    "class_names": "._metadata",
    "decoder_facts": "._metadata",
    "input_size": "._metadata",
    "model_metadata": "._metadata",
    "resolve_model": "._metadata",
    "sha256": "._metadata",
    "RknnModelInfo": "._rknnfile",
    "read_rknn": "._rknnfile",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "DEFAULT_MODEL",
    "INSTALL_DEFAULT_MODEL",
    "PackagedModel",
    "check_sha256",
    "default_model",
    "packaged_model",
    "pack_facts",
    "names_file_for",
    "PackedFacts",
    "CUSTOM_STRING_LIMIT",
    "TensorInfo",
    "FACTS_KEY",
    "FACTS_SCHEMA",
    "ModelFacts",
    "RknnModelInfo",
    "class_names",
    "decode_custom_string",
    "decoder_facts",
    "embedded_pad_and_names",
    "encode_custom_string",
    "input_size",
    "model_metadata",
    "read_rknn",
    "resolve_model",
    "sha256",
]
