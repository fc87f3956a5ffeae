"""What the bench tells users about the board: frequency governors, and published figures to compare.

Users who measure far below the published figures usually have the NPU devfreq or the CPU cpufreq
governor not at ``performance`` (docs/hardware.md). The published figures are rknn_model_zoo's
single-core inference-only FPS at maximum NPU frequency.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..npu import HostRoot, NpuInfo

PUBLISHED_SINGLE_CORE_FPS: dict[str, dict[str, float]] = {
    "rk3588": {
        "yolov8n": 73.5,
        "yolov8s": 38.0,
        "yolov8m": 16.2,
        "yolo11n": 60.0,
        "yolo11s": 33.0,
        "yolov5s": 48.4,
        "yolov5s_relu": 66.1,
    },
    "rk3576": {"yolov8n": 90.2, "yolov8s": 40.8, "yolov8m": 16.7},
    "rk3566": {"yolov8n": 34.0, "yolov8s": 15.1, "yolov8m": 6.5},
    "rk3568": {"yolov8n": 34.0, "yolov8s": 15.1, "yolov8m": 6.5},
}
PUBLISHED_SOURCE = "rknn_model_zoo, one core, maximum NPU frequency, inference only"
_MODEL_NAME = re.compile(r"(yolov8|yolo11|yolov5)([nsm])(_relu)?(?![a-z])")


@dataclass(frozen=True)
class PublishedFigure:
    model: str
    soc: str
    single_core_fps: float
    source: str = PUBLISHED_SOURCE

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "soc": self.soc,
            "single_core_fps": self.single_core_fps,
            "source": self.source,
        }


def recognise_model(file_name: str) -> str | None:
    """``yolov8s`` for ``yolov8s-rk3588-i8.rknn``; None when the name names no model we have figures for.

    By name only: the output shapes of the n/s/m sizes are identical, so they cannot tell them apart.
    """
    match = _MODEL_NAME.search(file_name.lower())
    if match is None:
        return None
    return match.group(1) + match.group(2) + (match.group(3) or "")


def published_figure(file_name: str, soc: str) -> PublishedFigure | None:
    model = recognise_model(file_name)
    table = PUBLISHED_SINGLE_CORE_FPS.get(soc, {})
    if model is None or model not in table:
        return None
    return PublishedFigure(model, soc, table[model])


@dataclass(frozen=True)
class Governors:
    """Frequency governors as read from sysfs (host paths); None/empty when not readable."""

    npu_path: str | None = None
    npu: str | None = None
    cpu: dict[str, str] = field(default_factory=dict)
    """cpufreq policy folder (host path) -> its ``scaling_governor``."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "npu": {"path": self.npu_path, "governor": self.npu},
            "cpu": [{"path": path, "governor": governor} for path, governor in sorted(self.cpu.items())],
            "warnings": governor_warnings(self),
        }


def read_governors(host: HostRoot, info: NpuInfo) -> Governors:
    """The NPU's devfreq governor and every CPU cpufreq policy's governor under ``host``."""
    names = [info.soc.devfreq_node] if info.soc.devfreq_node else []
    names += [name for name in host.listdir("/sys/class/devfreq") if name.endswith(".npu")]
    npu_path = npu = None
    for name in names:
        path = f"/sys/class/devfreq/{name}/governor"
        try:
            npu = host.read_text(path).strip()
        except OSError:
            continue
        npu_path = path
        break
    cpu: dict[str, str] = {}
    folder = "/sys/devices/system/cpu/cpufreq"
    for policy in host.listdir(folder):
        if policy.startswith("policy"):
            try:
                cpu[f"{folder}/{policy}/scaling_governor"] = host.read_text(
                    f"{folder}/{policy}/scaling_governor"
                ).strip()
            except OSError:
                continue
    return Governors(npu_path, npu, cpu)


def governor_warnings(governors: Governors) -> list[str]:
    """One line per governor that is not ``performance``, with the command that sets it."""
    warnings = []
    if governors.npu is not None and governors.npu != "performance":
        warnings.append(
            f"NPU devfreq governor is {governors.npu!r}, not 'performance': figures will be below the "
            f"published ones. On the node: echo performance | sudo tee {governors.npu_path}"
        )
    slow = sorted(path for path, governor in governors.cpu.items() if governor != "performance")
    if slow:
        names = ", ".join(f"{path.split('/')[-2]}={governors.cpu[path]}" for path in slow)
        warnings.append(
            f"CPU cpufreq governor not 'performance' ({names}): letterbox and decode run slower. On the "
            "node: echo performance | sudo tee /sys/devices/system/cpu/cpufreq/policy*/scaling_governor"
        )
    return warnings
