"""Shared-memory slots of process workers: where a frame's arrays lie in an input slot, the worker's
output blocks (`OutputSlots`), and the parent's mappings of them whose arrays callers hold as views.

No Python code of ours runs when a result is garbage-collected (no finalizers): an output slot is
free again once the arrays viewing it are garbage (docs/sdk.md#ctrl-c, #shared-memory)."""

from __future__ import annotations

import contextlib
import math
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

VIEW_SLOTS = 8
"""Output slots per worker whose arrays callers may hold as views; beyond that, results are copied
out and the slot reused at once (a caller keeping every result must not pin unbounded memory)."""
_ALIGN = 64
SHM_DIR = "/dev/shm"
"""Where Linux keeps POSIX shared memory objects (glibc's shm_open opens files here)."""


SHM_FULL_FIX = (
    "SIGBUS from a shared-memory write: /dev/shm is full (containers get 64 MB by default; each "
    "worker holds 2 frames in and, for raw outputs, up to 10 sets of output arrays): mount a larger "
    "/dev/shm (Kubernetes: an emptyDir with medium: Memory at /dev/shm, docs/sdk.md#shared-memory), "
    "or use workers='thread'"
)


OutputSpec = tuple[int, tuple[int, ...], str]
"""Where one array lies in a shared-memory block: (byte offset, shape, dtype string)."""


def input_layout(arrays: Sequence[np.ndarray[Any, Any]]) -> tuple[list[OutputSpec], int]:
    """Where a frame's arrays go in an input slot (each 64-byte aligned), and the bytes it needs."""
    layout: list[OutputSpec] = []
    offset = 0
    for array in arrays:
        layout.append((offset, array.shape, array.dtype.str))
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    return layout, offset


class OutputSlots:
    """A worker's output blocks, one per slot, and the arrays its last layout wrote through.

    A model returns the same shapes every frame, so a slot's destination arrays and its layout
    are made once: the reply carries the layout only when it changed (None otherwise).
    """

    def __init__(self) -> None:
        self._blocks: dict[int, SharedMemory] = {}
        self._layouts: dict[int, tuple[list[OutputSpec], list[np.ndarray[Any, Any]]]] = {}

    def pack(self, result: Any, slot: int) -> tuple[str, Any]:
        """Arrays go into the output slot (one copy); anything else is pickled with the reply."""
        if not (isinstance(result, list) and result and all(isinstance(a, np.ndarray) for a in result)):
            return "object", result
        specs: list[OutputSpec] = []
        offset = 0
        for array in result:
            specs.append((offset, array.shape, array.dtype.str))
            offset += -(-array.nbytes // _ALIGN) * _ALIGN
        shm = self._blocks.get(slot)
        name = None
        if shm is None or shm.size < offset:
            self._layouts.pop(slot, None)  # its arrays view the old block
            if shm is not None:
                shm.close()  # the parent unlinks the old block when it learns the new name
            shm = self._blocks[slot] = SharedMemory(create=True, size=max(offset, 1))
            name = shm.name
        known = self._layouts.get(slot)
        if known is None or known[0] != specs:
            destinations: list[np.ndarray[Any, Any]] = [
                np.ndarray(shape, np.dtype(dtype), buffer=shm.buf, offset=start)
                for start, shape, dtype in specs
            ]
            known = self._layouts[slot] = (specs, destinations)
            changed: list[OutputSpec] | None = specs
        else:
            changed = None
        for destination, array in zip(known[1], result, strict=True):
            destination[...] = array
        return "arrays", (slot, name, changed)

    def close(self) -> None:
        self._layouts.clear()  # arrays first: they view the blocks
        for shm in self._blocks.values():
            with contextlib.suppress(BufferError, OSError):
                shm.close()


@dataclass(frozen=True)
class OutputBlock:
    """A worker's output block as the parent maps it.

    A plain mmap, never closed by us: result arrays view it (numpy keeps the mmap, not a buffer
    export, so an explicit close would leave them dangling); it is unmapped when the last array
    and the pool have let go of it. The name is unlinked when the block is replaced or at close.
    """

    name: str
    memory: mmap.mmap

    @classmethod
    def open(cls, name: str) -> OutputBlock:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR)
        try:
            return cls(name, mmap.mmap(fd, os.fstat(fd).st_size))
        finally:
            os.close(fd)

    def unlink(self) -> None:
        """Remove the name (and the resource tracker's record of it); mappings stay valid."""
        with contextlib.suppress(FileNotFoundError):
            block = SharedMemory(name=self.name)
            block.unlink()
            block.close()


@dataclass(frozen=True)
class ArraySlice:
    """One output array's bytes in its block, resolved once per layout."""

    start: int
    end: int
    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    @classmethod
    def of(cls, spec: OutputSpec) -> ArraySlice:
        start, shape, dtype = spec
        resolved = np.dtype(dtype)
        return cls(start, start + math.prod(shape) * resolved.itemsize, resolved, tuple(shape))


def views_of(
    memory: mmap.mmap, layout: list[ArraySlice]
) -> tuple[np.ndarray[Any, Any], list[np.ndarray[Any, Any]]]:
    """Arrays viewing an output block, and their common base: the slot is free again once the
    base is garbage (every array keeps it, and it keeps the mapping)."""
    base: np.ndarray[Any, Any] = np.frombuffer(memory, np.uint8)
    views = [base[part.start : part.end].view(part.dtype).reshape(part.shape) for part in layout]
    return base, views
