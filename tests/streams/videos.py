"""Test videos made at test time by PyAV from a real photo panned across the frame (never committed).

The photo is matplotlib's bundled ``grace_hopper.jpg`` (a real photograph; the YOLO tests use it
too). Each frame is a window sliding over the photo scaled to cover the frame, so every frame
differs and the encoder sees real motion."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

CODECS = {"h264": "libx264", "hevc": "libx265"}


def photo() -> np.ndarray[Any, Any]:
    """The real photo, BGR uint8."""
    import cv2
    from matplotlib import cbook

    path = cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
    image = cv2.imread(str(path))
    assert image is not None, path
    return image


def panned_frames(width: int, height: int, count: int) -> list[np.ndarray[Any, Any]]:
    """``count`` BGR frames of ``width`` x ``height``: a window panning across the scaled photo."""
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
    import av

    width, height = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream(CODECS[codec], rate=fps)
        assert isinstance(stream, av.video.stream.VideoStream)
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
