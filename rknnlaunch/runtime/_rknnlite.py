"""The runtime seam: the part of RKNNLite we use, its lazy loader, and capture of what it logs.

RKNNLite's calls return 0 or -1 and never raise; the reason only appears in its log (Python
layer and librknnrt, both on the process's stdout/stderr). `capture_runtime_log` redirects file
descriptors 1 and 2 around a call so the reason can travel inside our exception.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .._errors import BackendUnavailableError


class RknnLiteLike(Protocol):
    """What rknnlaunch calls on an RKNNLite instance (rknn-toolkit-lite2's `rknnlite.api.RKNNLite`)."""

    def load_rknn(self, path: str) -> int: ...

    def init_runtime(self, core_mask: int = ...) -> int: ...

    def inference(self, inputs: list[Any]) -> list[Any] | None: ...

    def release(self) -> None: ...


RknnLiteFactory = Callable[[], RknnLiteLike]
"""Makes one fresh RKNNLite instance (one per core group; never shared across threads)."""


def load_rknnlite() -> RknnLiteFactory:
    """Import the real `rknnlite.api.RKNNLite` (only now: it is heavy and aarch64-only)."""
    try:
        from rknnlite.api import RKNNLite  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise BackendUnavailableError(
            f"rknn-toolkit-lite2 is not importable here ({exc})",
            "pip install 'rknnlaunch[npu]' on the aarch64 board (the base image has it), or use "
            "backend='cpu' / backend='auto' to run on the CPU",
        ) from None

    def make() -> RknnLiteLike:
        instance: RknnLiteLike = RKNNLite(verbose=False)
        return instance

    return make


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clean_log_lines(text: str) -> tuple[str, ...]:
    """Runtime output -> non-empty lines without colour codes."""
    return tuple(line.rstrip() for line in _ANSI.sub("", text).splitlines() if line.strip())


class CapturedLog:
    """Filled in when the `capture_runtime_log` block ends."""

    def __init__(self) -> None:
        self.lines: tuple[str, ...] = ()


@contextlib.contextmanager
def capture_runtime_log(echo: bool = True) -> Iterator[CapturedLog]:
    """Collect everything written to fd 1 and fd 2 (Python and C alike) inside the block.

    The output is replayed to the real stderr afterwards when ``echo`` is true, so nothing the
    runtime says is hidden (RKNN_LOG_LEVEL still controls librknnrt's verbosity). Callers hold the
    process-wide init lock: the redirect is process-wide, so other threads' output in that window
    is captured and replayed too, not lost.
    """
    captured = CapturedLog()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = (os.dup(1), os.dup(2))
    except OSError:  # no usable fds (embedded interpreters): run uncaptured
        yield captured
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        # Python-level writes too, in case sys.stdout/sys.stderr were replaced (they then bypass fds).
        text_sink = open(os.dup(sink.fileno()), "w", encoding="utf-8", errors="replace")  # noqa: SIM115
        try:
            with contextlib.redirect_stdout(text_sink), contextlib.redirect_stderr(text_sink):
                yield captured
        finally:
            text_sink.close()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            raw = sink.read()
            text = raw.decode("utf-8", "replace")
            captured.lines = clean_log_lines(text)
            if echo and raw:
                with contextlib.suppress(Exception):
                    sys.stderr.write(text)
                    sys.stderr.flush()
