"""PyAV at the edge: opening a source with timeouts, choosing the Rockchip MPP decoder or software
(and saying why), and what each FFmpeg failure means for a stream (retry or give up, and the fix)."""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import RknnLaunchError
from ._sources import device_path, file_path, source_kind

HARDWARE_DECODERS = {"h264": "h264_rkmpp", "hevc": "hevc_rkmpp"}
"""FFmpeg codec -> the ffmpeg-rockchip decoder `pyav-rkmpp` brings (docs/streams.md#hardware-decode)."""
MPP_NODE = "dev/mpp_service"

log = logging.getLogger("rknnlaunch.streams")


class SourceFailure(RknnLaunchError):
    """A source could not be opened or read. ``retry``: a reconnect may help (network, timeouts,
    corrupt data on a live source); otherwise it needs a fix first (a wrong path, a 401, no video)."""

    def __init__(self, problem: str, fix: str | None = None, retry: bool = False) -> None:
        super().__init__(problem, fix)
        self.retry = retry

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.problem, self.fix, self.retry))


def av_module() -> Any:
    """PyAV (the ``video`` extra: ``av``, or ``pyav-rkmpp`` on aarch64); imported on first use."""
    import av

    # FFmpeg's own log lines go nowhere: they can quote a URL with its password; failures reach us
    # as exceptions, whose text we redact.
    av.logging.set_level(None)
    return av


@dataclass(frozen=True)
class OpenOptions:
    """How sources are opened: timeouts in seconds, the RTSP transport."""

    open_timeout: float = 10.0
    read_timeout: float = 10.0
    rtsp_transport: str = "tcp"
    analyze_seconds: float = 1.0


def open_container(url: str, options: OpenOptions) -> Any:
    """``av.open`` with timeouts on the open and on every read, and each kind's options."""
    av = av_module()
    kind = source_kind(url)
    opts: dict[str, str] = {}
    fmt: str | None = None
    target = url
    micros = str(int(options.read_timeout * 1e6))
    if kind != "file":
        # A live source's stream info is known from its first keyframe; FFmpeg's default 5 s of
        # analysis would delay every (re)connect.
        opts["analyzeduration"] = str(int(options.analyze_seconds * 1e6))
    if kind in ("rtsp", "rtsps"):
        opts["rtsp_transport"] = options.rtsp_transport
        opts["timeout"] = micros  # socket I/O timeout (FFmpeg >= 5; `stimeout` before)
    elif kind in ("http", "https"):
        opts.update(rw_timeout=micros, reconnect="0")
    elif kind in ("udp", "rtp", "tcp", "srt"):
        opts["timeout"] = micros
    elif kind == "device":
        fmt, target = "video4linux2", device_path(url)
    else:
        target = str(file_path(url))
    started = time.monotonic()
    try:
        return av.open(target, format=fmt, options=opts, timeout=(options.open_timeout, options.read_timeout))
    except Exception as exc:
        # FFmpeg reports a timeout as whatever its protocol made of it (often "Invalid data"):
        # the clock says what it was.
        if kind != "file" and time.monotonic() - started >= 0.9 * min(
            options.open_timeout, options.read_timeout
        ):
            raise timeout_failure("open") from None
        raise describe_failure(exc, kind, opening=True) from None


def timeout_failure(what: str) -> SourceFailure:
    """The failure of an open or read that got no answer in time (reconnecting may help)."""
    return SourceFailure(
        f"no answer within the timeout ({what})",
        "check that the camera is on and reachable from this pod",
        retry=True,
    )


def describe_failure(exc: BaseException, kind: str, opening: bool) -> SourceFailure:
    """What an exception from PyAV/FFmpeg means for a source of ``kind``: the problem in words (raw
    text still to be redacted by the caller), the fix, and whether reconnecting may help."""
    if isinstance(exc, SourceFailure):
        return exc
    av = av_module()
    errors = av.error
    text = str(exc)
    live = kind not in ("file",)
    http_code = _http_code(exc, errors)
    if http_code in (401, 403):
        status = "401 Unauthorized" if http_code == 401 else "403 Forbidden"
        return SourceFailure(
            f"the server refused the credentials ({status})",
            "set the user and password: in the URL, as ${ENV} in it, or in --credentials-file",
        )
    if http_code == 404:
        return SourceFailure(
            "the server has no such stream (404 Not Found)",
            "check the path after the host (the camera's manual lists its stream paths)",
        )
    if isinstance(exc, FileNotFoundError) and not live:
        return SourceFailure(f"no such file: {text}", "check the path")
    if isinstance(exc, PermissionError) and not live:
        return SourceFailure(f"not readable: {text}", "fix the file's permissions")
    if isinstance(exc, errors.InvalidDataError):
        if live:
            return SourceFailure(f"corrupt data: {text}", "check the camera's stream settings", retry=True)
        return SourceFailure(
            "not a video FFmpeg can read (not a video file, or cut short)",
            "check the file: ffprobe FILE; re-copy it if it was cut short",
        )
    if isinstance(exc, (errors.ExitError, TimeoutError)) or _errno(exc) == errno.ETIMEDOUT:
        return timeout_failure("open" if opening else "read")
    if isinstance(exc, (ConnectionError, OSError, errors.FFmpegError)):
        if live:
            return SourceFailure(
                f"cannot reach the source: {text}",
                "check the host, port and network (a NetworkPolicy?)",
                retry=True,
            )
        return SourceFailure(f"cannot read: {text}", "check the file")
    return SourceFailure(f"{type(exc).__name__}: {text}", None, retry=live)


def _http_code(exc: BaseException, errors: Any) -> int | None:
    for code, name in (
        (401, "HTTPUnauthorizedError"),
        (403, "HTTPForbiddenError"),
        (404, "HTTPNotFoundError"),
    ):
        cls = getattr(errors, name, None)
        if cls is not None and isinstance(exc, cls):
            return code
    text = str(exc)
    for code in (401, 403, 404):
        if f"{code} " in text and ("Unauthorized" in text or "Forbidden" in text or "Not Found" in text):
            return code
    return None


def _errno(exc: BaseException) -> int | None:
    return exc.errno if isinstance(exc, OSError) else None


def choose_decoder(
    codec: str, available: Collection[str], host_root: str | os.PathLike[str]
) -> tuple[str | None, str]:
    """The hardware decoder to use for ``codec`` (None: software) and the line that says why.

    Hardware when PyAV has ``h264_rkmpp``/``hevc_rkmpp`` (`pyav-rkmpp`) and ``/dev/mpp_service``
    (under ``host_root``) opens read-write, as MPP opens it."""
    hardware = HARDWARE_DECODERS.get(codec)
    if hardware is None:
        return None, f"software {codec} decode: the Rockchip MPP decoders cover H.264 and H.265 only"
    if hardware not in available:
        return None, (
            f"software {codec} decode: this PyAV has no {hardware} "
            "(on a Rockchip board: pip install 'rknnlaunch[video]', which brings pyav-rkmpp)"
        )
    node = Path(host_root) / MPP_NODE
    try:
        fd = os.open(node, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return None, (
            f"software {codec} decode: cannot open /{MPP_NODE} ({reason}); "
            "give the container the device (docs/streams.md#hardware-decode)"
        )
    os.close(fd)
    return hardware, f"hardware {hardware} decode (/{MPP_NODE})"


def hardware_context(av: Any, decoder: str, stream: Any) -> Any:
    """A codec context of ``decoder`` for the stream's packets (its extradata: SPS/PPS)."""
    context = av.CodecContext.create(decoder, "r")
    extradata = stream.codec_context.extradata
    if extradata:
        context.extradata = extradata
    return context


def software_context(stream: Any) -> Any:
    context = stream.codec_context
    context.thread_type = "AUTO"  # frame and slice threads: a 1080p decode is the CPU's heaviest job
    return context


DecodeFn = Callable[[Any], Iterator[Any]]
