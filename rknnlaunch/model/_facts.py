"""The model facts `rknnlaunch convert` embeds in an .rknn's custom string, and their typed reading.

rknn-toolkit2 stores ``rknn.config(custom_string=...)`` verbatim in the .rknn file (the runtime
returns it for ``RKNN_QUERY_CUSTOM_STRING``; `rknnlaunch.model._rknnfile` reads it without a runtime). We
write one JSON object ``{"rknnlaunch": {...}}`` there, so `model inspect`, `detect`, `bench` and the
decoder know the task, classes, input size, letterbox pad and output layout without flags. A custom
string written by another tool is not ours and is ignored; ours, if malformed, is a `ModelError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from .._errors import ModelError

FACTS_KEY = "rknnlaunch"
FACTS_SCHEMA: Final = "rknnlaunch.facts/1"
MAX_CUSTOM_STRING = 64 << 10
"""Bytes: far above 1,000 class names; a bigger custom string is not ours (or is hostile)."""

_Name = Annotated[StrictStr, Field(max_length=256)]
_Dim = Annotated[StrictInt, Field(ge=1, le=65536)]
_Sha = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]


class ModelFacts(BaseModel):
    """What a converted model is and how to feed it; every field is checked when read back."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_: Literal["rknnlaunch.facts/1"] = Field(FACTS_SCHEMA, alias="schema")
    task: Literal["detect"] = "detect"
    class_names: Annotated[list[_Name], Field(min_length=1, max_length=1000)]
    input_size: tuple[_Dim, _Dim]
    """(width, height) the model was built for."""
    input_layout: Literal["NHWC"] = "NHWC"
    """What `Runtime.infer` takes: uint8 RGB, batch dim first."""
    input_dtype: Literal["uint8"] = "uint8"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (255.0, 255.0, 255.0)
    pad_value: Annotated[StrictInt, Field(ge=0, le=255)]
    """Letterbox pad the model was trained with (Ultralytics: 114)."""
    output_layout: Literal[
        "rknn-9", "rknn-6", "ultralytics", "ultralytics-seg", "ultralytics-pose", "ultralytics-obb"
    ]
    """What `rknnlaunch.convert.output_layout` detects (Ultralytics task heads convert too)."""
    quantization: Literal["int8-hybrid", "int8", "fp16"]
    source_onnx_sha256: _Sha
    calibration_sha256: _Sha | None = None
    calibration_images: Annotated[StrictInt, Field(ge=0, le=1_000_000)] = 0
    toolkit_version: Annotated[StrictStr, Field(max_length=64)] | None = None

    def as_dict(self) -> dict[str, object]:
        return self.model_dump(mode="json", by_alias=True)


def embedded_facts(metadata: Mapping[str, Any]) -> ModelFacts | None:
    """The facts in a `model_metadata` dict (its ``facts`` entry, from an .rknn), else None."""
    raw = metadata.get("facts")
    return ModelFacts.model_validate(raw) if isinstance(raw, dict) else None


def embedded_pad_and_names(metadata: Mapping[str, Any]) -> tuple[int | None, list[str] | None]:
    """The letterbox pad and class names a model was converted with, from `model_metadata`."""
    facts = embedded_facts(metadata)
    return (facts.pad_value, list(facts.class_names)) if facts else (None, None)


def encode_custom_string(facts: ModelFacts) -> str:
    """The custom string for ``rknn.config(custom_string=...)``: compact JSON under ``rknnlaunch``."""
    text = json.dumps({FACTS_KEY: facts.as_dict()}, separators=(",", ":"), ensure_ascii=True)
    if len(text) > MAX_CUSTOM_STRING:
        raise ModelError(
            f"the model facts are {len(text)} bytes, over the {MAX_CUSTOM_STRING}-byte limit",
            "use shorter class names (or fewer classes)",
        )
    return text


def decode_custom_string(text: str | None, name: str = "<model>") -> ModelFacts | None:
    """Our facts from an .rknn custom string; None when it is absent or another tool's.

    ``text`` is bounded by the caller (`MAX_CUSTOM_STRING`); JSON nesting is bounded here before
    parsing, so a hostile file cannot drive the parser into deep recursion.
    """
    if not text or not text.lstrip().startswith("{") or f'"{FACTS_KEY}"' not in text:
        return None
    fix = "re-run `rknnlaunch convert` on the source ONNX"
    if len(text) > MAX_CUSTOM_STRING:
        raise ModelError(f"{name}: the rknnlaunch custom string is {len(text)} bytes, not plausible", fix)
    check_json_depth(text, 8, f"{name}: the rknnlaunch custom string", fix)
    try:
        parsed = json.loads(text)
    except ValueError:
        raise ModelError(f"{name}: the rknnlaunch custom string is not valid JSON", fix) from None
    if not isinstance(parsed, dict) or FACTS_KEY not in parsed:
        return None
    try:
        return ModelFacts.model_validate(parsed[FACTS_KEY])
    except ValidationError as exc:
        raise ModelError(
            f"{name}: the rknnlaunch model facts are invalid: {describe_validation_error(exc, FACTS_KEY)}",
            fix,
        ) from None


def describe_validation_error(exc: ValidationError, root: str) -> str:
    """The first pydantic error as ``root.field[2].sub: message`` (the field a user can look for)."""
    first = exc.errors(include_url=False)[0]
    where = root
    for part in first["loc"]:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def check_json_depth(text: str, limit: int, what: str, fix: str) -> None:
    """Raise `ModelError` when ``text`` nests arrays/objects deeper than ``limit``.

    Counted before ``json.loads``, whose recursion a 100,000-deep file would exhaust. Strings are
    removed first (brackets inside them do not nest); only bracket characters are then visited.
    """
    depth = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                raise ModelError(f"{what} nests deeper than {limit} levels: not a real model's metadata", fix)
        else:
            depth -= 1


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")
