"""Pins the install split: the SDK imports without grpcio, the plugin without numpy/OpenCV/onnxruntime."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Setting sys.modules[name] = None makes any `import name` raise ImportError, as if not installed.
_BLOCK = "import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"


def _import_with_blocked(module: str, blocked: list[str]) -> subprocess.CompletedProcess[str]:
    code = _BLOCK.format(blocked=blocked) + f"import {module}\nprint('ok')\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("module", "blocked"),
    [
        ("rknnlaunch", ["grpc", "google.protobuf", "cv2", "onnxruntime", "rich", "matplotlib", "rknnlite"]),
        # The shared NPU model is standard library only (docs/hardware.md; the plugin's RSS budget).
        ("rknnlaunch.npu", ["grpc", "google.protobuf", "cv2", "onnxruntime", "pydantic", "numpy"]),
        # `rknnlaunch run`, every container's ENTRYPOINT, starts without numpy.
        ("rknnlaunch.cli._run", ["numpy", "cv2", "onnxruntime", "grpc"]),
        # What the forkserver preloads for pool worker processes: pydantic would double its start-up.
        ("rknnlaunch.runtime._workers", ["pydantic", "pydantic_settings", "cv2", "onnxruntime", "grpc"]),
        # The DRA device-metadata format, which the DRA driver writes with: no pydantic, no numpy.
        ("rknnlaunch.settings._metadata", ["pydantic", "pydantic_settings", "numpy", "cv2", "grpc"]),
        ("rknpu_device_plugin", ["cv2", "onnxruntime", "matplotlib", "rknnlite"]),
        # The plugin's and the exporter's processes never load numpy (README "Map"; only the
        # functional probe's child does), nor the SDK's vision/CPU extras.
        ("rknpu_device_plugin._cli", ["numpy", "cv2", "onnxruntime", "matplotlib", "rknnlite"]),
        ("rknpu_device_plugin.telemetry._exporter", ["numpy", "cv2", "onnxruntime", "matplotlib"]),
        # The server kit: standard library until settings are built (then pydantic).
        ("rknpu_serverkit", ["numpy", "pydantic", "grpc", "google.protobuf", "cv2", "onnxruntime"]),
    ],
)
def test_package_imports_without_heavy_dependencies(module: str, blocked: list[str]) -> None:
    result = _import_with_blocked(module, blocked)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_no_generic_top_level_plugin_package() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('plugin'))"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
    )
    assert result.stdout.strip() == "None"
