"""Reads an .rknn file's header and trailing JSON metadata (target SoC, toolkit version, tensors).

Layout (docs/hardware.md#the-rknn-file-format): bytes 0-3 ``RKNN``; u64 LE format version at 8;
u64 LE length of a FlatBuffer block at 16; the header is 64 bytes (24 when the version <= 1).
After the block: a u64 LE length, then that many bytes of JSON. Nothing here needs a runtime.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from .._errors import ModelError
from .._files import require_file
from ._facts import (
    MAX_FLATBUFFER_STRING,
    ModelFacts,
    check_json_depth,
    decode_custom_string,
    describe_validation_error,
)

MAGIC = b"RKNN"
HEADER_SIZE = 64
OLD_HEADER_SIZE = 24
# No sane model is this large; a length beyond it means a foreign or corrupt file.
_MAX_BLOCK = 1 << 34
_MAX_JSON = 64 << 20
_MAX_JSON_DEPTH = 16
"""Real toolkit2 metadata nests 4-5 levels; json.loads recursion must never see 100,000."""


@dataclass(frozen=True)
class TensorInfo:
    """One model input or output as the JSON metadata describes it."""

    name: str
    shape: tuple[int, ...]
    dtype: str | None = None
    layout: str | None = None
    """The layout the runtime exchanges the tensor in (``NHWC`` inputs), when the file says."""

    def runtime_shape(self) -> tuple[int, ...]:
        """``shape`` as the runtime takes it: toolkit2 records NCHW graph shapes for NHWC inputs.

        Every real file we inspected does (toolkit 2.3.2 and 2.5.0, docs/hardware.md#real-rknn-headers),
        so an NHWC tensor's dims are read as NCHW unless they plainly are NHWC already (channels
        last, not second): also a 4x4 image, ``[1, 3, 4, 4]``, is permuted.
        """
        shape = self.shape
        if self.layout != "NHWC" or len(shape) != 4:
            return shape
        if shape[3] in (1, 3, 4) and shape[1] not in (1, 3, 4):
            return shape  # already channels-last
        n, c, h, w = shape
        return (n, h, w, c)

    def describe(self) -> str:
        dims = "x".join(str(dim) for dim in self.runtime_shape()) or "?"
        return (
            f"{self.name} [{dims}]"
            + (f" {self.layout}" if self.layout else "")
            + (f" {self.dtype}" if self.dtype else "")
        )


@dataclass(frozen=True)
class RknnModelInfo:
    """What an .rknn file says about itself."""

    path: str
    size: int
    format_version: int
    toolkit_version: str | None
    target_platforms: tuple[str, ...]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    name: str | None = None
    source_platform: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    custom_string: str | None = None
    facts: ModelFacts | None = None
    """What `rknnlaunch convert` embedded (None for other tools' models)."""

    def warnings(self) -> list[tuple[str, str]]:
        """(problem, fix) for models that load but cannot work as intended."""
        found = []
        # Every output, not only a lone one: Ultralytics seg heads add their protos beside the
        # [1, 4+nc+32, N] table (captcha-recognizer's YOLO11s-seg in plain int8 found nothing).
        for output in self.outputs:
            shape = output.shape
            if output.dtype in ("int8", "uint8") and len(shape) == 3 and 5 <= shape[1] < shape[2]:
                found.append(
                    (
                        f"output {output.name} [{'x'.join(map(str, shape))}] is {output.dtype}: in an "
                        "Ultralytics [1, 4+nc(+extra), N] table (detect, seg, pose, obb) the class scores "
                        "(0-1) share one int8 scale with the box coordinates (0-640 px), so every score "
                        "rounds to 0 and the model detects nothing",
                        "rebuild it with `rknnlaunch convert MODEL.onnx --target SOC --quant-images DIR` "
                        "(keeps the head's tail in float16) or with --fp16",
                    )
                )
        return found

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "format_version": self.format_version,
            "toolkit_version": self.toolkit_version,
            "target_platforms": list(self.target_platforms),
            "inputs": [_tensor_dict(t) for t in self.inputs],
            "outputs": [_tensor_dict(t) for t in self.outputs],
            "name": self.name,
            "source_platform": self.source_platform,
            "facts": self.facts.as_dict() if self.facts else None,
            "warnings": [problem for problem, _ in self.warnings()],
        }


def read_rknn(path: str | os.PathLike[str]) -> RknnModelInfo:
    """Parse ``path``; raises `ModelError` (never a traceback) for missing, truncated or foreign files."""
    file = Path(path)
    if file.is_dir():
        raise ModelError(f"{file} is a folder, not a model file", "pass the .rknn file inside it")
    require_file(file, "model file", "pass the path of an existing .rknn file", ModelError)
    try:
        with file.open("rb") as handle:
            # Mapped, not read: only the header and the trailing metadata are touched, so checking a
            # large model costs neither its size in memory nor a full read.
            if os.fstat(handle.fileno()).st_size == 0:
                return parse_rknn(b"", str(file))
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return parse_rknn(data, str(file))
    except OSError as exc:
        raise ModelError(
            f"cannot read {file}: {exc.strerror or exc}", "check the path and its permissions"
        ) from None


def parse_rknn(data: bytes | mmap.mmap, name: str = "<bytes>") -> RknnModelInfo:
    """Parse the bytes of an .rknn file (see `read_rknn`)."""
    rebuild = "copy or download it again; if that does not help, re-export it with rknn-toolkit2"
    if len(data) < OLD_HEADER_SIZE:
        if data[:4] != MAGIC[: len(data[:4])] or not data:
            raise ModelError(_foreign(name, data[:64]), _foreign_fix(data[:64]))
        raise ModelError(f"{name} is truncated: {len(data)} bytes, shorter than an .rknn header", rebuild)
    if data[:4] != MAGIC:
        raise ModelError(_foreign(name, data[:64]), _foreign_fix(data[:64]))
    (format_version,) = struct.unpack_from("<Q", data, 8)
    (block_length,) = struct.unpack_from("<Q", data, 16)
    header = OLD_HEADER_SIZE if format_version <= 1 else HEADER_SIZE
    if format_version > 1000 or block_length > _MAX_BLOCK:
        raise ModelError(
            f"{name} starts with RKNN but its header is not one we can read "
            f"(format version {format_version}, block length {block_length})",
            rebuild,
        )
    if len(data) < header:
        raise ModelError(
            f"{name} is truncated: {len(data)} bytes, shorter than its {header}-byte header", rebuild
        )
    json_at = header + block_length
    if len(data) < json_at:
        raise ModelError(
            f"{name} is truncated: the model block needs {json_at} bytes but the file has {len(data)}",
            rebuild,
        )
    metadata: dict[str, Any] = {}
    typed = _Metadata()
    if len(data) >= json_at + 8:
        (json_length,) = struct.unpack_from("<Q", data, json_at)
        body = data[json_at + 8 : json_at + 8 + json_length]
        if json_length > _MAX_JSON:
            raise ModelError(f"{name}: the metadata length ({json_length} bytes) is not plausible", rebuild)
        if len(body) < json_length:
            raise ModelError(
                f"{name} is truncated: the metadata needs {json_length} bytes, only {len(body)} are present",
                rebuild,
            )
        metadata, typed = _parse_metadata(bytes(body), name, rebuild)
    elif format_version > 1:
        raise ModelError(f"{name} is truncated: the metadata after the model block is missing", rebuild)
    strings = _root_strings(data, header, block_length) if block_length >= 8 else {}
    if strings is None:
        # Bytes overwritten inside the model block: the tensors' I/O info (dtypes, layouts) would
        # silently vanish, and the runtime would refuse the file at load_rknn anyway.
        raise ModelError(
            f"{name} is corrupt: its model block (bytes {header}..{json_at}) is not a FlatBuffer "
            "(the root table offsets point outside it), so its tensors' I/O info cannot be read",
            rebuild,
        )
    custom = strings.get(_CUSTOM_STRING_FIELD) or None
    io_layouts = {
        **_io_info(strings.get(_INPUT_INFO_FIELD)),
        **_io_info(strings.get(_OUTPUT_INFO_FIELD)),
    }
    inputs, outputs = _tensors(typed, io_layouts)
    targets = [typed.target_platform] if isinstance(typed.target_platform, str) else typed.target_platform
    return RknnModelInfo(
        path=name,
        size=len(data),
        format_version=format_version,
        toolkit_version=typed.version or None,
        target_platforms=tuple(t.lower() for t in targets),
        inputs=inputs,
        outputs=outputs,
        name=typed.name or None,
        source_platform=typed.ori_network_platform or typed.network_platform or None,
        metadata=metadata,
        custom_string=custom,
        facts=decode_custom_string(custom, name),
    )


# The trailing JSON, typed. Strict types: a number where a string belongs, or {} for an id, is an
# error naming the field, not a TypeError deep in the reader. Unknown keys are ignored (newer
# toolkits add some); bounds keep absurd values (huge integers, million-entry lists) out.
_Text = Annotated[StrictStr, Field(max_length=4096)]
_Id = Annotated[StrictInt, Field(ge=0, le=1 << 20)]
_Dim = Annotated[StrictInt, Field(ge=-1, le=1 << 31)]
_MAX_ITEMS = 1 << 16


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _DType(_Strict):
    vx_type: _Text = ""
    qnt_type: _Text = ""
    qnt_method: _Text = ""


class _NormTensor(_Strict):
    tensor_id: _Id
    url: _Text | None = None
    name: _Text | None = None
    size: Annotated[list[_Dim], Field(max_length=16)] | None = None
    shape: Annotated[list[_Dim], Field(max_length=16)] | None = None
    dtype: _DType | _Text | None = None


class _GraphLink(_Strict):
    left: _Text
    left_tensor_id: _Id = 0
    right: _Text
    right_tensor_id: _Id


class _Metadata(_Strict):
    version: _Text | None = None
    target_platform: Annotated[list[_Text], Field(max_length=64)] | _Text = []
    name: _Text | None = None
    ori_network_platform: _Text | None = None
    network_platform: _Text | None = None
    norm_tensor: Annotated[list[_NormTensor], Field(max_length=_MAX_ITEMS)] = []
    graph: Annotated[list[_GraphLink], Field(max_length=_MAX_ITEMS)] = []


def _parse_metadata(body: bytes, name: str, fix: str) -> tuple[dict[str, Any], _Metadata]:
    """The trailing JSON as a dict and as the typed `_Metadata`; `ModelError` naming the bad field."""
    try:
        text = body.decode("utf-8").rstrip("\0")
    except UnicodeDecodeError:
        raise ModelError(f"{name}: the metadata after the model block is not JSON", fix) from None
    check_json_depth(text, _MAX_JSON_DEPTH, f"{name}: the metadata", fix)
    try:
        parsed = json.loads(text)
    except ValueError:  # also: integers beyond Python's 4,300-digit conversion limit
        raise ModelError(f"{name}: the metadata after the model block is not JSON", fix) from None
    if not isinstance(parsed, dict):
        raise ModelError(
            f"{name}: the metadata after the model block is a JSON {type(parsed).__name__}, not an object",
            fix,
        )
    try:
        return parsed, _Metadata.model_validate(parsed)
    except ValidationError as exc:
        raise ModelError(
            f"{name}: the metadata is malformed: {describe_validation_error(exc, 'metadata')}", fix
        ) from None


# The FlatBuffer block's root table. Fields 11-13 are strings rknn-toolkit2 2.x writes (seen in 2.5.0
# output, docs/convert.md): 11 the `custom_string` given to rknn.config, 12 and 13 JSON maps
# {tensor name: {"dtype": ..., "layout": ...}} of how the runtime exchanges inputs and outputs
# (e.g. {"images": {"dtype": "int8", "layout": "NHWC"}}, {"output0": {"dtype": "float16", ...}}).
_CUSTOM_STRING_FIELD = 11
_INPUT_INFO_FIELD = 12
_OUTPUT_INFO_FIELD = 13
_STRING_FIELDS = (_CUSTOM_STRING_FIELD, _INPUT_INFO_FIELD, _OUTPUT_INFO_FIELD)


def _root_strings(data: bytes | mmap.mmap, start: int, length: int) -> dict[int, str] | None:
    """The root table's string fields we use, bounds-checked; None when the block is no FlatBuffer
    root table at all (its root offset, vtable offset or vtable size point outside the block: the
    file is corrupt there). A field that is absent or unreadable is left out: they are extras."""
    end = start + length
    found: dict[int, str] = {}
    try:
        (root,) = struct.unpack_from("<I", data, start)
        table = start + root
        if not 8 <= root <= length - 4:
            return None
        (back,) = struct.unpack_from("<i", data, table)
        vtable = table - back
        if not start + 4 <= vtable <= end - 4:
            return None
        (vtable_size, table_size) = struct.unpack_from("<HH", data, vtable)
        if vtable_size < 4 or vtable_size % 2 or vtable + vtable_size > end or table + table_size > end:
            return None
        for field_index in _STRING_FIELDS:
            slot = 4 + 2 * field_index
            if slot + 2 > vtable_size:
                continue
            (offset,) = struct.unpack_from("<H", data, vtable + slot)
            if offset == 0:
                continue
            (relative,) = struct.unpack_from("<I", data, table + offset)
            at = table + offset + relative
            (size,) = struct.unpack_from("<I", data, at)
            if at + 4 + size > end or size > MAX_FLATBUFFER_STRING:
                continue
            found[field_index] = bytes(data[at + 4 : at + 4 + size]).decode("utf-8")
    except (struct.error, UnicodeDecodeError, ValueError):
        return found
    return found


def _io_info(text: str | None) -> dict[str, tuple[str | None, str | None]]:
    """{tensor name: (dtype, layout)} from a field-12/13 string; {} for anything unexpected."""
    if not text or len(text) > MAX_FLATBUFFER_STRING or not text.startswith("{"):
        return {}
    try:
        check_json_depth(text, 4, "", "")
        parsed = json.loads(text)
    except (ValueError, ModelError):
        return {}
    result: dict[str, tuple[str | None, str | None]] = {}
    if isinstance(parsed, dict):
        for key, value in parsed.items():
            if isinstance(value, dict):
                dtype, layout = value.get("dtype"), value.get("layout")
                result[key] = (
                    dtype.lower() if isinstance(dtype, str) and dtype else None,
                    layout.upper() if isinstance(layout, str) and layout else None,
                )
    return result


def _foreign(name: str, data: bytes) -> str:
    """``data``: the file's first bytes (64 are enough to tell)."""
    kind = _sniff(data)
    what = f"looks like {kind}" if kind else f"starts with {data[:8]!r}"
    return f"{name} is not an .rknn model: it {what} (an .rknn file starts with b'RKNN')"


def _foreign_fix(data: bytes) -> str:
    if _sniff(data) == "an ONNX model":
        return (
            "convert it: `rknnlaunch convert MODEL.onnx --target rk3588 --quant-images DIR` "
            "(`rknnlaunch model inspect MODEL.onnx` shows what it would do), or run it on the CPU backend"
        )
    return "pass the .rknn file exported by rknn-toolkit2"


def _sniff(data: bytes) -> str | None:
    if not data:
        return "an empty file"
    if data[:1] == b"\x08" and (b"onnx" in data[:64].lower() or b"pytorch" in data[:64]):
        return "an ONNX model"
    if data.startswith(b"PK\x03\x04"):
        return "a zip archive (a PyTorch .pt file?)"
    if data.startswith(b"\x7fELF"):
        return "an ELF binary"
    if data.lstrip()[:1] in (b"<",):
        return "an HTML/XML page (a failed download?)"
    if data.startswith(b"version https://git-lfs"):
        return "a Git LFS pointer (run `git lfs pull`)"
    if data[4:8] == b"TFL3":
        return "a TensorFlow Lite model"
    return None


def _tensor_dict(tensor: TensorInfo) -> dict[str, Any]:
    return {
        "name": tensor.name,
        "shape": list(tensor.shape),
        "dtype": tensor.dtype,
        "layout": tensor.layout,
        "runtime_shape": list(tensor.runtime_shape()),
    }


def _tensors(
    metadata: _Metadata, io_layouts: dict[str, tuple[str | None, str | None]]
) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    """Inputs/outputs from the `graph` links to `norm_tensor` entries (how toolkit2 writes them)."""
    norm = {t.tensor_id: t for t in metadata.norm_tensor}
    found: dict[str, list[tuple[int, TensorInfo]]] = {"input": [], "output": []}
    for link in metadata.graph:
        if link.right != "norm_tensor":
            continue
        tensor = norm.get(link.right_tensor_id)
        if link.left in found and tensor is not None:
            found[link.left].append((link.left_tensor_id, _tensor(tensor, io_layouts)))
    return (
        tuple(t for _, t in sorted(found["input"], key=lambda pair: pair[0])),
        tuple(t for _, t in sorted(found["output"], key=lambda pair: pair[0])),
    )


def _tensor(raw: _NormTensor, io_layouts: dict[str, tuple[str | None, str | None]]) -> TensorInfo:
    shape = raw.size or raw.shape or []
    dtype_name: str | None = None
    if isinstance(raw.dtype, _DType):
        dtype_name = raw.dtype.vx_type or raw.dtype.qnt_type or None
    elif isinstance(raw.dtype, str):
        dtype_name = raw.dtype
    if dtype_name:
        dtype_name = dtype_name.removeprefix("VSI_NN_TYPE_").lower() or None
    name = raw.url or raw.name or f"tensor{raw.tensor_id}"
    io_dtype, layout = io_layouts.get(name, (None, None))
    return TensorInfo(
        name=name,
        shape=tuple(shape),
        # The I/O info says what the runtime hands out (float16 outputs have no vx_type at all).
        dtype=io_dtype or dtype_name,
        layout=layout,
    )
