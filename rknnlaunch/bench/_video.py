"""The videos `bench --streams` plays: what a given file is (size, rate, codec), and a clip made at
run time by PyAV from a real photo panned across the frame (videos are never stored)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import UsageError
from .._files import require_file

CODECS = {"h264": "libx264", "hevc": "libx265"}
"""Codec name -> the PyAV (FFmpeg) encoder that makes test clips of it."""


@dataclass(frozen=True)
class VideoInfo:
    """A video's first stream as PyAV reads it."""

    path: Path
    width: int
    height: int
    fps: float
    codec: str
    made: bool = False
    """True when the bench made it from the photo (no file was given)."""

    @property
    def shape(self) -> str:
        """``1280x720@25``."""
        return f"{self.width}x{self.height}@{self.fps:g}"


def _av() -> Any:
    try:
        import av
    except ImportError:
        raise UsageError(
            "bench --streams decodes with PyAV, which is not installed", "pip install 'rknnlaunch[video]'"
        ) from None
    return av


def photo() -> np.ndarray[Any, Any]:
    """The real photo the clips pan across (matplotlib's bundled ``grace_hopper.jpg``), BGR uint8."""
    try:
        import cv2
        from matplotlib import cbook
    except ImportError as exc:
        raise UsageError(
            f"making a test clip needs OpenCV and matplotlib ({exc})",
            "pip install 'rknnlaunch[bench,vision]', or pass a video with --video",
        ) from None
    path = cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
    image = cv2.imread(str(path))
    if image is None:
        raise UsageError(f"cannot read matplotlib's sample photo {path}", "pass a video with --video")
    return np.asarray(image, np.uint8)


def panned_frames(width: int, height: int, count: int) -> list[np.ndarray[Any, Any]]:
    """``count`` BGR frames of ``width`` x ``height``: a window panning across the scaled photo, so
    every frame differs and an encoder sees real motion."""
    import cv2

    source = photo()
    scale = max(width * 1.25 / source.shape[1], height / source.shape[0])
    big = cv2.resize(source, (int(source.shape[1] * scale) + 1, int(source.shape[0] * scale) + 1))
    room = big.shape[1] - width
    frames = []
    for i in range(count):
        x = int(room * i / max(count - 1, 1))
        frames.append(np.ascontiguousarray(big[:height, x : x + width]))
    return frames


def make_video(
    path: Path,
    codec: str = "h264",
    size: tuple[int, int] = (1280, 720),
    frames: int = 25,
    fps: int = 25,
    gop: int | None = None,
) -> Path:
    """Encode a panned-photo clip with PyAV (libx264 / libx265) into ``path`` (mp4 or mkv)."""
    av = _av()
    width, height = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream(CODECS[codec], rate=fps)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, fps)
        options: dict[str, object] = {"preset": "ultrafast"}
        if codec == "hevc":
            options["x265-params"] = "log-level=error"
        if gop is not None:
            stream.codec_context.gop_size = gop
        stream.options = options
        for image in panned_frames(width, height, frames):
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def probe_video(path: str | Path, flag: str = "--video") -> VideoInfo:
    """What ``path`` holds (size, frame rate, codec), checked before any stream starts: a missing
    file, a file PyAV cannot open, or one without a video stream or frame rate is a `UsageError`."""
    fix = "pass an H.264/H.265 video file, or leave out --video to use a clip made from a photo"
    file = require_file(path, f"{flag} file", fix, UsageError)
    av = _av()
    try:
        with av.open(str(file)) as container:
            videos = container.streams.video
            if not videos:
                raise UsageError(f"{flag} {file}: it has no video stream", fix)
            stream = videos[0]
            rate = stream.average_rate or stream.guessed_rate
            width, height, codec = (
                stream.codec_context.width,
                stream.codec_context.height,
                stream.codec_context.name,
            )
    except UsageError:
        raise
    except Exception as exc:  # PyAV raises its own error tree; any of them means "not a video"
        raise UsageError(f"{flag} {file}: not a video PyAV can read ({exc})", fix) from None
    if not rate or float(rate) <= 0:
        raise UsageError(f"{flag} {file}: no frame rate in the stream", fix)
    if not width or not height:
        raise UsageError(f"{flag} {file}: no frame size in the stream", fix)
    return VideoInfo(file, int(width), int(height), float(rate), str(codec))
