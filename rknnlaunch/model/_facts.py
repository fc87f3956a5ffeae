"""The model facts `rknnlaunch convert` embeds in an .rknn's custom string, and their typed reading.

rknn-toolkit2 stores ``rknn.config(custom_string=...)`` verbatim in the .rknn file (the runtime
returns it for ``RKNN_QUERY_CUSTOM_STRING``; `rknnlaunch.model._rknnfile` reads it without a runtime). We
write one JSON object ``{"rknnlaunch": {...}}`` there, so `model inspect`, `detect`, `bench` and the
decoder know the task, classes, input size, letterbox pad and output layout without flags. A custom
string written by another tool is not ours and is ignored; ours, if malformed, is a `ModelError`.

The toolkit refuses a custom string of 1024 characters or more (`CUSTOM_STRING_LIMIT`), so the class
names are written in the first form that fits (docs/convert.md#class-names): a JSON list (schema
``/1``), zlib + base85 of the names one per line (``class_names_z85``, schema ``/2``), or a names
file beside the model, one name per line, checked by its sha256 (``class_names_file``, schema ``/2``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, model_validator

from .._errors import ModelError

FACTS_KEY = "rknnlaunch"
FACTS_SCHEMA: Final = "rknnlaunch.facts/1"
"""Names as a JSON list (every file before compact names, and every file whose list fits)."""
FACTS_SCHEMA_COMPACT: Final = "rknnlaunch.facts/2"
"""Names compressed in the string, or in a file beside the model."""
CUSTOM_STRING_LIMIT = 1023
"""Characters: rknn-toolkit2 2.5.0's ``RKNN.config`` raises ``ValueError: The length of custom_string
must be less than 1024!`` (``rknn/api/rknn_base.py``, ``RKNNBase.config``; checked by calling it with
1023 and 1024 characters), and the runtime's ``rknn_custom_string`` is ``char string[1024]``."""
MAX_CUSTOM_STRING = CUSTOM_STRING_LIMIT
"""The longest custom string we write (the toolkit's limit)."""
MAX_FLATBUFFER_STRING = 64 << 10
"""Bytes: the reader's bound on any string field of an .rknn (custom string, I/O info): far above
what the toolkit writes; a bigger one is hostile."""
_MAX_NAMES_BYTES = 8 << 20
"""Bytes of class names we inflate or read back (20,000 names of 256 bytes fit; a zip bomb does not)."""
NAMES_FILE_SUFFIX = ".names.txt"
"""The names file beside ``model.rknn`` is ``model.names.txt`` (one class name per line)."""

_Name = Annotated[StrictStr, Field(max_length=256, pattern=r"^[^\r\n]*$")]
_Dim = Annotated[StrictInt, Field(ge=1, le=65536)]
_Sha = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]


class ModelFacts(BaseModel):
    """What a converted model is and how to feed it; every field is checked when read back."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _task_from_layout(cls, data: Any) -> Any:
        # Files `convert` wrote before it knew task heads say "detect" beside a seg/pose/obb layout.
        if isinstance(data, dict) and data.get("task", "detect") == "detect":
            layout = data.get("output_layout")
            tasks = {"ultralytics-seg": "segment", "ultralytics-pose": "pose", "ultralytics-obb": "obb"}
            if isinstance(layout, str) and layout in tasks:
                return {**data, "task": tasks[layout]}
        return data

    schema_: Literal["rknnlaunch.facts/1", "rknnlaunch.facts/2"] = Field(FACTS_SCHEMA, alias="schema")
    task: Literal["detect", "segment", "pose", "obb"] = "detect"
    """The head's task; absent or "detect" beside an Ultralytics seg/pose/obb layout: that layout's."""
    class_names: Annotated[list[_Name], Field(min_length=1, max_length=20_000)]
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


NamesForm = Literal["list", "z85", "file"]


@dataclass(frozen=True)
class PackedFacts:
    """The custom string for ``rknn.config(custom_string=...)`` and where the class names went."""

    custom_string: str
    names_form: NamesForm
    """``list`` (JSON list), ``z85`` (zlib + base85 in the string) or ``file`` (beside the model)."""
    names_file_text: str | None = None
    """For ``file``: what to write to `names_file_for` (model) (one name per line)."""


def names_file_for(model: Path) -> Path:
    """The names file beside an .rknn: ``model.rknn`` -> ``model.names.txt``."""
    return model.with_name(model.stem + NAMES_FILE_SUFFIX)


def _dumps(payload: Mapping[str, Any]) -> str:
    return json.dumps({FACTS_KEY: payload}, separators=(",", ":"), ensure_ascii=True)


def pack_facts(facts: ModelFacts, names_file: str = "model" + NAMES_FILE_SUFFIX) -> PackedFacts:
    """The facts as a custom string of at most `CUSTOM_STRING_LIMIT` characters.

    The first form that fits: the names as a JSON list; compressed (zlib + base85, about 460
    characters for COCO's 80); else in ``names_file`` beside the model (its name, sha256 and the
    class count in the string). `ModelError` only when even the rest of the facts do not fit.
    """
    full = facts.as_dict()
    full["schema"] = FACTS_SCHEMA
    text = _dumps(full)
    if len(text) <= CUSTOM_STRING_LIMIT:
        return PackedFacts(text, "list")
    lines = "\n".join(facts.class_names)
    compact = facts.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude={"class_names"})
    compact = {"schema": FACTS_SCHEMA_COMPACT, **compact}
    packed = base64.b85encode(zlib.compress(lines.encode("utf-8"), 9)).decode("ascii")
    text = _dumps({**compact, "class_names_z85": packed})
    if len(text) <= CUSTOM_STRING_LIMIT:
        return PackedFacts(text, "z85")
    body = lines + "\n"
    reference = {
        "file": names_file,
        "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(),
        "count": len(facts.class_names),
    }
    text = _dumps({**compact, "class_names_file": reference})
    if len(text) > CUSTOM_STRING_LIMIT:
        raise ModelError(
            f"the model facts are {len(text)} characters even without the class names; rknn-toolkit2 "
            f"takes at most {CUSTOM_STRING_LIMIT}",
            "shorten the output file name (it is recorded for the names file)",
        )
    return PackedFacts(text, "file", body)


def encode_custom_string(facts: ModelFacts) -> str:
    """The custom string for ``rknn.config(custom_string=...)`` when the names fit in it (`pack_facts`
    says where they go otherwise); `ModelError` when they would need a names file."""
    packed = pack_facts(facts)
    if packed.names_form == "file":
        raise ModelError(
            f"the {len(facts.class_names)} class names do not fit in rknn-toolkit2's "
            f"{CUSTOM_STRING_LIMIT}-character custom string even compressed",
            "use pack_facts and write its names file beside the model (rknnlaunch convert does)",
        )
    return packed.custom_string


def _expand_names(raw: dict[str, Any], name: str, fix: str) -> dict[str, Any]:
    """The ``/2`` forms' class names back as a ``class_names`` list (the ``/1`` form is returned as is)."""
    if "class_names" in raw:
        return raw
    where = f"{name}: the rknnlaunch class names"
    if "class_names_z85" in raw:
        packed = raw["class_names_z85"]
        try:
            if not isinstance(packed, str) or len(packed) > MAX_FLATBUFFER_STRING:
                raise ValueError
            inflater = zlib.decompressobj()
            text = inflater.decompress(base64.b85decode(packed), _MAX_NAMES_BYTES)
            if inflater.unconsumed_tail:
                raise ValueError
            names = text.decode("utf-8").split("\n")
        except (ValueError, zlib.error, UnicodeDecodeError):
            raise ModelError(f"{where} (class_names_z85) do not decompress", fix) from None
        return {**raw, "class_names": names}
    reference = raw.get("class_names_file")
    if isinstance(reference, dict):
        file, digest, count = reference.get("file"), reference.get("sha256"), reference.get("count")
        if (
            not isinstance(file, str)
            or "/" in file
            or "\\" in file
            or not file
            or not isinstance(digest, str)
        ):
            raise ModelError(f"{where}: class_names_file is malformed", fix)
        path = Path(name).parent / file
        try:
            body = path.read_bytes()[: _MAX_NAMES_BYTES + 1]
        except OSError:
            raise ModelError(
                f"{name}: its {count} class names are in {file} beside it (they did not fit in the "
                f"toolkit's {CUSTOM_STRING_LIMIT}-character custom string), and {path} cannot be read",
                f"copy {file} next to {Path(name).name} (rknnlaunch convert wrote them side by side)",
            ) from None
        if hashlib.sha256(body).hexdigest() != digest:
            raise ModelError(
                f"{path} is not the names file {Path(name).name} was converted with (sha256 differs)",
                f"copy the {file} written with this model next to it, or {fix}",
            )
        try:
            names = body.decode("utf-8").rstrip("\n").split("\n")
        except UnicodeDecodeError:
            raise ModelError(f"{path} is not UTF-8 text", fix) from None
        return {**raw, "class_names": names}
    return raw


def decode_custom_string(text: str | None, name: str = "<model>") -> ModelFacts | None:
    """Our facts from an .rknn custom string (every form `pack_facts` writes); None when it is absent
    or another tool's. ``name`` is the .rknn's path: a names file is looked for beside it.

    ``text`` is bounded by the caller (`MAX_FLATBUFFER_STRING`); JSON nesting is bounded here before
    parsing, so a hostile file cannot drive the parser into deep recursion.
    """
    if not text or not text.lstrip().startswith("{") or f'"{FACTS_KEY}"' not in text:
        return None
    fix = "re-run `rknnlaunch convert` on the source ONNX"
    if len(text) > MAX_FLATBUFFER_STRING:
        raise ModelError(f"{name}: the rknnlaunch custom string is {len(text)} bytes, not plausible", fix)
    check_json_depth(text, 8, f"{name}: the rknnlaunch custom string", fix)
    try:
        parsed = json.loads(text)
    except ValueError:
        raise ModelError(f"{name}: the rknnlaunch custom string is not valid JSON", fix) from None
    if not isinstance(parsed, dict) or FACTS_KEY not in parsed:
        return None
    raw = parsed[FACTS_KEY]
    if isinstance(raw, dict):
        raw = _expand_names(raw, name, fix)
    try:
        return ModelFacts.model_validate(raw)
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
