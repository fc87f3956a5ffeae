"""Hand-built .rknn files in the layout real rknn-toolkit2 files have (docs/hardware.md#the-rknn-file-format).

Derived from real headers read with our parser (docs/hardware.md#real-rknn-headers): rknn-toolkit2
2.3.2 (`nozcam-rk3588.rknn`, the BERT `model_b1_s32_o3.rknn` of rk-transformers 0.3.1) and 2.5.0
(our tiny models, tests/data/tiny_rknn). What they carry, and this builder writes by default:

- an image input's ``norm_tensor.size`` is the NCHW graph shape (``[1, 3, 384, 640]``) while the I/O
  info (FlatBuffer root field 12) says ``layout: NHWC``: the runtime exchanges it NHWC;
- dtypes: a quantised tensor has ``vx_type``/``qnt_type`` ``int8`` (``qnt_method: layer``) and I/O
  dtype ``int8``; a float tensor has empty ``vx_type``/``qnt_type`` and I/O dtype ``float16`` (also
  for an ONNX float32 input); an ONNX int64 input stays ``int64`` with layout ``UNDEFINED``;
- outputs' I/O info (field 13) says ``layout: NCHW``; field 11 (the custom string) is present and
  empty when the model was built without one.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Tensor = tuple[Any, ...]
"""``(name, graph shape)`` or ``(name, graph shape, dtype)`` or ``(name, graph shape, dtype, layout)``.
Defaults as real files: a 4-dim input is an ``int8`` ``NHWC`` image, any other input ``float16``
``UNDEFINED``; outputs are ``float16`` ``NCHW``."""

YOLO_INPUTS: tuple[Tensor, ...] = (("images", (1, 3, 640, 640), "int8", "NHWC"),)
YOLO_OUTPUTS: tuple[Tensor, ...] = (("output0", (1, 6, 8400), "float16", "NCHW"),)


def _full(tensor: Tensor, is_input: bool) -> tuple[str, tuple[int, ...], str, str]:
    name, shape = tensor[0], tuple(tensor[1])
    image = is_input and len(shape) == 4
    dtype = tensor[2] if len(tensor) > 2 else ("int8" if image else "float16")
    layout = tensor[3] if len(tensor) > 3 else ("NHWC" if image else "UNDEFINED" if is_input else "NCHW")
    return name, shape, dtype, layout


def _norm_dtype(dtype: str) -> dict[str, str]:
    if dtype in ("int8", "uint8", "int16"):
        return {"qnt_method": "layer", "qnt_type": dtype, "vx_type": dtype}
    return {"qnt_method": "", "qnt_type": "", "vx_type": ""}


def io_info(tensors: Sequence[Tensor], is_input: bool) -> str:
    """The JSON of root field 12 (inputs) or 13 (outputs), as toolkit2 writes it."""
    entries = {}
    for tensor in tensors:
        name, _, dtype, layout = _full(tensor, is_input)
        entries[name] = {"dtype": dtype, "layout": layout}
    return json.dumps(entries)


def rknn_bytes(
    version: str = "2.3.2",
    targets: Sequence[str] = ("rk3588",),
    inputs: Sequence[Tensor] = YOLO_INPUTS,
    outputs: Sequence[Tensor] = YOLO_OUTPUTS,
    format_version: int = 6,
    block: bytes | None = None,
    extra: dict[str, Any] | None = None,
    custom_string: str = "",
) -> bytes:
    """Header (64 bytes, 24 for format <= 1) + FlatBuffer block + u64 length + JSON metadata.

    ``block`` None: a FlatBuffer with the custom string and the I/O info, as real files carry.
    """
    full = [_full(t, True) for t in inputs] + [_full(t, False) for t in outputs]
    norm_tensor = [
        {
            "dim_num": len(shape),
            "dtype": _norm_dtype(dtype),
            "size": list(shape),
            "tensor_id": index,
            "url": name,
        }
        for index, (name, shape, dtype, _) in enumerate(full)
    ]
    graph = [
        {"left": "input", "left_tensor_id": i, "right": "norm_tensor", "right_tensor_id": i}
        for i in range(len(inputs))
    ]
    graph += [
        {"left": "output", "left_tensor_id": j, "right": "norm_tensor", "right_tensor_id": len(inputs) + j}
        for j in range(len(outputs))
    ]
    meta: dict[str, Any] = {
        "graph": graph,
        "input_num": len(inputs),
        "output_num": len(outputs),
        "name": "rknn model",
        "norm_tensor": norm_tensor,
        "ori_network_platform": "ONNX",
        "network_platform": "ONNX",
        "target_platform": list(targets),
        "version": version,
    }
    meta.update(extra or {})
    if block is None:
        block = flatbuffer_block({11: custom_string, 12: io_info(inputs, True), 13: io_info(outputs, False)})
    body = json.dumps(meta, separators=(",", ":")).encode()
    header = bytearray(24 if format_version <= 1 else 64)
    header[0:4] = b"RKNN"
    struct.pack_into("<Q", header, 8, format_version)
    struct.pack_into("<Q", header, 16, len(block))
    return bytes(header) + block + struct.pack("<Q", len(body)) + body


def flatbuffer_block(strings: dict[int, str], fields: int = 22) -> bytes:
    """A minimal FlatBuffer whose root table has string ``strings[i]`` in field ``i`` (as rknn-toolkit2
    2.5.0 writes the custom string in field 11, input/output I/O info in 12/13)."""
    vtable_size = 4 + 2 * fields
    table_size = 4 + 4 * fields
    vtable_at = 4
    table_at = vtable_at + vtable_size + (-(vtable_at + vtable_size) % 4)
    blobs = bytearray()
    slots = [0] * fields
    table = bytearray(table_size)
    struct.pack_into("<i", table, 0, table_at - vtable_at)
    strings_at = table_at + table_size
    for index, text in strings.items():
        field_offset = 4 + 4 * index
        slots[index] = field_offset
        encoded = text.encode()
        at = strings_at + len(blobs)
        struct.pack_into("<I", table, field_offset, at - (table_at + field_offset))
        blobs += struct.pack("<I", len(encoded)) + encoded + b"\0"
        blobs += b"\0" * (-len(blobs) % 4)
    vtable = struct.pack(f"<HH{fields}H", vtable_size, table_size, *slots)
    head = struct.pack("<I", table_at) + vtable
    head += b"\0" * (table_at - len(head))
    return bytes(head + table + blobs)


def write_rknn(path: Path, **kwargs: Any) -> Path:
    path.write_bytes(rknn_bytes(**kwargs))
    return path
