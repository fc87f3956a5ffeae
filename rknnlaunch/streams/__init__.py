"""Many video sources over one `Detector` (`Watcher`): decode (PyAV; Rockchip MPP in hardware when it
can), newest-frame-only scheduling with round-robin fairness and per-stream rates, reconnects with
backoff, results and state events in one iterator, passwords masked everywhere (docs/streams.md).

    from rknnlaunch import Detector
    from rknnlaunch.streams import Source, Watcher

    with Detector("yolov8n.rknn") as detector, Watcher(
        [Source("rtsp://admin:${CAM_PASSWORD}@door/live", name="door", rate=5), "yard.mp4"], detector
    ) as watcher:
        for item in watcher:                 # StreamResult | StreamEvent, as they happen
            print(item.to_json())
        print(watcher.stats())               # StreamStats by stream name

`LiveView` (an HTML page of every stream's newest annotated frame) and `StreamMetrics` (Prometheus)
are observers serving read-only HTTP where told (``watch --view``, ``--metrics-address``).
A live view or metrics plug in as a `StreamObserver` (``observers=[...]`` or `Watcher.add_observer`):
``on_result(result)`` (``result.image`` is the frame) and ``on_event(event)``, plus `Watcher.stats`.
PyAV is the ``video`` extra (``pip install 'rknnlaunch[video]'``), imported when a source opens.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._decode import HARDWARE_DECODERS, SourceFailure, choose_decoder
    from ._metrics import StreamMetrics
    from ._reader import Policy
    from ._results import STATES, StreamEvent, StreamObserver, StreamResult, StreamStats
    from ._serve import WatchedStreams, parse_address
    from ._sources import (
        CREDENTIALS_ENV,
        PlannedSource,
        Redactor,
        Source,
        add_credentials,
        check_rate,
        default_name,
        expand_environment,
        mask_url,
        plan_sources,
        read_credentials,
    )
    from ._view import LiveView
    from ._watcher import FrameDetector, Watcher, watch

_LAZY = {
    "HARDWARE_DECODERS": "._decode",
    "SourceFailure": "._decode",
    "choose_decoder": "._decode",
    "Policy": "._reader",
    "STATES": "._results",
    "StreamEvent": "._results",
    "StreamObserver": "._results",
    "StreamResult": "._results",
    "StreamStats": "._results",
    "CREDENTIALS_ENV": "._sources",
    "PlannedSource": "._sources",
    "Redactor": "._sources",
    "Source": "._sources",
    "add_credentials": "._sources",
    "check_rate": "._sources",
    "default_name": "._sources",
    "expand_environment": "._sources",
    "mask_url": "._sources",
    "plan_sources": "._sources",
    "read_credentials": "._sources",
    "StreamMetrics": "._metrics",
    "WatchedStreams": "._serve",
    "parse_address": "._serve",
    "LiveView": "._view",
    "FrameDetector": "._watcher",
    "Watcher": "._watcher",
    "watch": "._watcher",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "CREDENTIALS_ENV",
    "HARDWARE_DECODERS",
    "STATES",
    "FrameDetector",
    "LiveView",
    "PlannedSource",
    "Policy",
    "Redactor",
    "Source",
    "SourceFailure",
    "StreamEvent",
    "StreamMetrics",
    "StreamObserver",
    "StreamResult",
    "StreamStats",
    "WatchedStreams",
    "Watcher",
    "add_credentials",
    "check_rate",
    "choose_decoder",
    "default_name",
    "expand_environment",
    "mask_url",
    "parse_address",
    "plan_sources",
    "read_credentials",
    "watch",
]
