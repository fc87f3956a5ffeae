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
from typing import Any

from .._errors import ModelError
from ._files import require_file

MAGIC = b"RKNN"
HEADER_SIZE = 64
OLD_HEADER_SIZE = 24
# No sane model is this large; a length beyond it means a foreign or corrupt file.
_MAX_BLOCK = 1 << 34
_MAX_JSON = 64 << 20


@dataclass(frozen=True)
class TensorInfo:
    """One model input or output as the JSON metadata describes it."""

    name: str
    shape: tuple[int, ...]
    dtype: str | None = None

    def describe(self) -> str:
        dims = "x".join(str(dim) for dim in self.shape) or "?"
        return f"{self.name} [{dims}]" + (f" {self.dtype}" if self.dtype else "")


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

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "format_version": self.format_version,
            "toolkit_version": self.toolkit_version,
            "target_platforms": list(self.target_platforms),
            "inputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in self.inputs],
            "outputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in self.outputs],
            "name": self.name,
            "source_platform": self.source_platform,
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
        try:
            parsed = json.loads(body.decode("utf-8").rstrip("\0"))
        except (UnicodeDecodeError, ValueError):
            raise ModelError(f"{name}: the metadata after the model block is not JSON", rebuild) from None
        if isinstance(parsed, dict):
            metadata = parsed
    elif format_version > 1:
        raise ModelError(f"{name} is truncated: the metadata after the model block is missing", rebuild)
    inputs, outputs = _tensors(metadata)
    targets = metadata.get("target_platform", ())
    if isinstance(targets, str):
        targets = [targets]
    return RknnModelInfo(
        path=name,
        size=len(data),
        format_version=format_version,
        toolkit_version=_str_or_none(metadata.get("version")),
        target_platforms=tuple(str(t).lower() for t in targets if isinstance(t, str)),
        inputs=inputs,
        outputs=outputs,
        name=_str_or_none(metadata.get("name")),
        source_platform=_str_or_none(
            metadata.get("ori_network_platform") or metadata.get("network_platform")
        ),
        metadata=metadata,
    )


def _foreign(name: str, data: bytes) -> str:
    """``data``: the file's first bytes (64 are enough to tell)."""
    kind = _sniff(data)
    what = f"looks like {kind}" if kind else f"starts with {data[:8]!r}"
    return f"{name} is not an .rknn model: it {what} (an .rknn file starts with b'RKNN')"


def _foreign_fix(data: bytes) -> str:
    if _sniff(data) == "an ONNX model":
        return "convert it with rknn-toolkit2 (load_onnx, build, export_rknn), or run it with backend='cpu'"
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


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _tensors(metadata: dict[str, Any]) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    """Inputs/outputs from the `graph` links to `norm_tensor` entries (how toolkit2 writes them)."""
    norm = {t.get("tensor_id"): t for t in metadata.get("norm_tensor", []) if isinstance(t, dict)}
    found: dict[str, list[tuple[int, TensorInfo]]] = {"input": [], "output": []}
    for link in metadata.get("graph", []):
        if not isinstance(link, dict) or link.get("right") != "norm_tensor":
            continue
        side = link.get("left")
        tensor = norm.get(link.get("right_tensor_id"))
        if side in found and tensor is not None:
            found[side].append((int(link.get("left_tensor_id", 0)), _tensor(tensor)))
    return (
        tuple(t for _, t in sorted(found["input"], key=lambda pair: pair[0])),
        tuple(t for _, t in sorted(found["output"], key=lambda pair: pair[0])),
    )


def _tensor(raw: dict[str, Any]) -> TensorInfo:
    shape = raw.get("size") or raw.get("shape") or []
    dtype = raw.get("dtype")
    dtype_name = None
    if isinstance(dtype, dict):
        dtype_name = dtype.get("vx_type") or dtype.get("qnt_type") or None
    elif isinstance(dtype, str):
        dtype_name = dtype
    if isinstance(dtype_name, str):
        dtype_name = dtype_name.removeprefix("VSI_NN_TYPE_").lower() or None
    return TensorInfo(
        name=str(raw.get("url") or raw.get("name") or f"tensor{raw.get('tensor_id', '?')}"),
        shape=tuple(int(dim) for dim in shape if isinstance(dim, int)),
        dtype=dtype_name,
    )
