"""The benchmark behind `rknnlaunch bench`: its cases, runner, report and one run from its options;
`bench --streams`: how many streams of one video an allocation sustains."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._report import TABLE_HEADER, BenchReport
    from ._session import CPU_DEFAULTS, NPU_DEFAULTS, BenchOptions, prepare, prepare_streams, synthetic_frame
    from ._streams import StreamBench, StreamFigures, StreamRamp, StreamStep, measure_step, run_ramp
    from ._video import VideoInfo, make_video, probe_video

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "TABLE_HEADER": "._report",
    "BenchReport": "._report",
    "CPU_DEFAULTS": "._session",
    "NPU_DEFAULTS": "._session",
    "BenchOptions": "._session",
    "prepare": "._session",
    "prepare_streams": "._session",
    "synthetic_frame": "._session",
    "StreamBench": "._streams",
    "StreamFigures": "._streams",
    "StreamRamp": "._streams",
    "StreamStep": "._streams",
    "measure_step": "._streams",
    "run_ramp": "._streams",
    "VideoInfo": "._video",
    "make_video": "._video",
    "probe_video": "._video",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "BenchOptions",
    "BenchReport",
    "CPU_DEFAULTS",
    "NPU_DEFAULTS",
    "TABLE_HEADER",
    "StreamBench",
    "StreamFigures",
    "StreamRamp",
    "StreamStep",
    "VideoInfo",
    "make_video",
    "measure_step",
    "prepare",
    "prepare_streams",
    "probe_video",
    "run_ramp",
    "synthetic_frame",
]
