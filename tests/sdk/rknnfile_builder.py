"""Hand-built .rknn files in the documented layout (docs/hardware.md#the-rknn-file-format)."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

YOLO_INPUTS = (("images", (1, 640, 640, 3)),)
YOLO_OUTPUTS = (("output0", (1, 6, 8400)),)


def rknn_bytes(
    version: str = "2.3.2",
    targets: Sequence[str] = ("rk3588",),
    inputs: Sequence[tuple[str, tuple[int, ...]]] = YOLO_INPUTS,
    outputs: Sequence[tuple[str, tuple[int, ...]]] = YOLO_OUTPUTS,
    format_version: int = 6,
    block: bytes = b"\x10\x00\x00\x00FAKEFLATBUFFER\x00\x00" * 8,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """Header (64 bytes, 24 for format <= 1) + FlatBuffer block + u64 length + JSON metadata."""
    tensors = list(inputs) + list(outputs)
    norm_tensor = [
        {
            "dim_num": len(shape),
            # uint8 in; float16 out (an int8 single YOLO output is the "blind" model we warn about)
            "dtype": {
                "qnt_method": "",
                "qnt_type": "",
                "vx_type": "VSI_NN_TYPE_UINT8" if index < len(inputs) else "VSI_NN_TYPE_FLOAT16",
            },
            "size": list(shape),
            "tensor_id": index,
            "url": name,
        }
        for index, (name, shape) in enumerate(tensors)
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
        "target_platform": list(targets),
        "version": version,
    }
    meta.update(extra or {})
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
