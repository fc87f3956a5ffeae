"""The live view (``watch --view ADDR``): one read-only HTML page with each stream's newest frame,
its detections drawn (`rknnlaunch.yolo.draw_detections`), as a JPEG the page refreshes, beside the
stream's FPS, drops and state. Stream names and masked sources only: never a password."""

from __future__ import annotations

import html
import json
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..yolo import draw_detections, opencv
from ._results import StreamEvent, StreamResult
from ._serve import Page, PageServer, WatchedStreams

FPS_WINDOW_SECONDS = 5.0
"""The view's FPS counts the results of the last few seconds (the summary's is since first live)."""
MAX_WIDTH = 1280
"""Wider frames are scaled down to this before encoding (a 4K camera's JPEG every half second
would cost more than its detection)."""
JPEG_QUALITY = 80


@dataclass
class _Stream:
    name: str
    result: StreamResult | None = None
    jpeg: tuple[int, bytes] | None = None
    """(frame index, JPEG) of the newest result encoded so far."""
    state: str = "connecting"
    reason: str = ""
    times: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    """When its recent results came (`time.monotonic()`), for the view's FPS."""


class LiveView(PageServer):
    """A `StreamObserver` serving ``/`` (the page), ``/streams.json`` (every stream's figures),
    ``/frame/N.jpg`` (stream N's newest annotated frame) and ``/view.js``, GET only.

    The constructor binds ``address`` (``host:port``; a port in use is a `UsageError` naming
    ``flag``); `start` (or ``with``) serves in a thread, `close` stops. ``on_result`` only keeps a
    reference to the result: drawing and encoding happen when a browser asks for the frame."""

    def __init__(
        self,
        address: str,
        streams: WatchedStreams,
        *,
        flag: str = "--view",
        refresh_ms: int = 500,
    ) -> None:
        self._cv2 = opencv()
        self._watched = streams
        self._streams = [_Stream(name) for name in streams.names]
        self._by_name = {stream.name: stream for stream in self._streams}
        self._lock = threading.Lock()
        self._refresh_ms = refresh_ms
        self._placeholder = self._encode(np.full((180, 320, 3), 64, np.uint8))
        self._bind(address, flag)

    # --- StreamObserver ---------------------------------------------------------------------

    def on_result(self, result: StreamResult) -> None:
        stream = self._by_name.get(result.stream)
        if stream is None or result.image is None:
            return
        with self._lock:
            stream.result = result
            stream.times.append(time.monotonic())

    def on_event(self, event: StreamEvent) -> None:
        stream = self._by_name.get(event.stream)
        if stream is not None:
            with self._lock:
                stream.state, stream.reason = event.event, event.reason

    # --- pages ------------------------------------------------------------------------------

    def _route(self, path: str) -> Page | None:
        if path in ("/", "/index.html"):
            return 200, "text/html; charset=utf-8", self.page().encode()
        if path == "/streams.json":
            return 200, "application/json", json.dumps(self.figures()).encode()
        if path == "/view.js":
            return (
                200,
                "text/javascript; charset=utf-8",
                _SCRIPT.replace("REFRESH_MS", str(self._refresh_ms)).encode(),
            )
        if path.startswith("/frame/") and path.endswith(".jpg"):
            number = path[len("/frame/") : -len(".jpg")]
            if number.isdigit() and int(number) < len(self._streams):
                return 200, "image/jpeg", self.frame(int(number))
        return None

    def figures(self) -> list[dict[str, Any]]:
        """Every stream's figures, in the order of the sources (``/streams.json``)."""
        stats = self._watched.stats()
        now = time.monotonic()
        rows = []
        with self._lock:
            for number, stream in enumerate(self._streams):
                figures = stats.get(stream.name)
                result = stream.result
                rows.append(
                    {
                        "index": number,
                        "stream": stream.name,
                        "source": figures.source if figures else "",
                        "state": figures.state if figures else stream.state,
                        "reason": stream.reason,
                        "decoder": figures.decoder if figures else "",
                        "fps": round(_recent_fps(stream.times, now), 1),
                        "decoded": figures.decoded if figures else 0,
                        "detected": figures.detected if figures else 0,
                        "dropped": figures.dropped if figures else 0,
                        "reconnects": figures.reconnects if figures else 0,
                        "frame": None if result is None else result.frame,
                        "latency_ms": None if result is None else round(result.latency_ms, 1),
                        "detections": None if result is None else len(result.detections),
                    }
                )
        return rows

    def page(self) -> str:
        """The HTML page (its figures filled in now; ``/view.js`` refreshes them and the frames)."""
        cards = "\n".join(_card(row) for row in self.figures())
        return _PAGE.replace("CARDS", cards)

    def frame(self, number: int) -> bytes:
        """Stream ``number``'s newest frame with its detections drawn, as JPEG (a grey placeholder
        before the first)."""
        stream = self._streams[number]
        with self._lock:
            result, cached = stream.result, stream.jpeg
        if result is None or result.image is None:
            return self._placeholder
        if cached is not None and cached[0] == result.frame:
            return cached[1]
        data = self._encode(draw_detections(result.image, result.detections))
        with self._lock:
            if stream.jpeg is None or stream.jpeg[0] <= result.frame:
                stream.jpeg = (result.frame, data)
        return data

    def _encode(self, image: np.ndarray[Any, Any]) -> bytes:
        cv2 = self._cv2
        height, width = image.shape[:2]
        if width > MAX_WIDTH:
            image = cv2.resize(image, (MAX_WIDTH, round(height * MAX_WIDTH / width)), cv2.INTER_AREA)
        ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        if not ok:  # pragma: no cover - OpenCV encodes any uint8 BGR image
            raise RuntimeError("OpenCV could not encode a frame as JPEG")
        return bytes(data)


def _recent_fps(times: Iterable[float], now: float) -> float:
    recent = [t for t in times if now - t <= FPS_WINDOW_SECONDS]
    if len(recent) < 2:
        return 0.0
    return (len(recent) - 1) / max(recent[-1] - recent[0], 1e-6)


def _card(row: Mapping[str, Any]) -> str:
    number = row["index"]
    name = html.escape(str(row["stream"]))
    return (
        f'<figure id="stream-{number}" data-index="{number}">'
        f'<img src="/frame/{number}.jpg" alt="{name}">'
        f"<figcaption><b>{name}</b> "
        f'<span class="state">{html.escape(str(row["state"]))}</span> '
        f'<span class="fps">{row["fps"]} FPS</span> '
        f'<span class="dropped">{row["dropped"]} dropped</span> '
        f'<span class="source">{html.escape(str(row["source"]))}</span>'
        f'<div class="reason">{html.escape(str(row["reason"]))}</div>'
        "</figcaption></figure>"
    )


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rknnlaunch watch</title>
<style>
body { font-family: sans-serif; margin: 8px; background: #fff; color: #111; }
h1 { font-size: 16px; margin: 0 0 8px 0; }
main { display: grid; grid-template-columns: repeat(auto-fill, minmax(400px, 1fr)); gap: 8px; }
figure { margin: 0; }
img { width: 100%; display: block; background: #404040; }
figcaption { font-size: 13px; padding: 2px 0; }
.state { font-weight: bold; } .source, .reason { color: #555; font-size: 12px; }
</style></head>
<body><h1>rknnlaunch watch</h1>
<main>
CARDS
</main>
<script src="/view.js"></script>
</body></html>
"""

# Each frame is fetched again every REFRESH_MS (into a new Image, shown once it loaded, so the
# picture never flickers), and the captions from /streams.json.
_SCRIPT = """
"use strict";
let tick = 0;
function refresh() {
  tick += 1;
  for (const figure of document.querySelectorAll("figure")) {
    const shown = figure.querySelector("img");
    const next = new Image();
    next.onload = () => { shown.src = next.src; };
    next.src = "/frame/" + figure.dataset.index + ".jpg?n=" + tick;
  }
  fetch("/streams.json").then((answer) => answer.json()).then((rows) => {
    for (const row of rows) {
      const figure = document.getElementById("stream-" + row.index);
      if (!figure) continue;
      figure.querySelector(".state").textContent = row.state;
      figure.querySelector(".fps").textContent = row.fps + " FPS";
      figure.querySelector(".dropped").textContent = row.dropped + " dropped";
      figure.querySelector(".reason").textContent = row.reason;
    }
  }).catch(() => {});
}
setInterval(refresh, REFRESH_MS);
"""
