"""Frames on every backend: one array or one per input, checked against the model before any worker.

Runs `open()` and `Pool` on .rknn files the real rknn-toolkit2 2.5.0 built (tests/data/tiny_rknn,
see its README) through the RKNNLite fake, and the CPU backend on their ONNX sources.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rknnlite_fake import FakeNpu, SimulatedNpu

import rknnlaunch
from rknnlaunch import MaskError, Pool, UsageError
from rknnlaunch.cli._main import main
from rknnlaunch.model._rknnfile import read_rknn
from rknnlaunch.npu import HostRoot, soc_by_name
from rknnlaunch.runtime._frames import InputSpec, check_frame, input_specs
from rknnlaunch.settings._env import NpuSettings, load_settings

HostFactory = Callable[[str], HostRoot]
TINY = Path(__file__).resolve().parents[1] / "data" / "tiny_rknn"
IMAGE_I8, IMAGE_FP16, MULTI = (
    TINY / "tiny_image_i8.rknn",
    TINY / "tiny_image_fp16.rknn",
    TINY / "tiny_multi.rknn",
)


def settings(host_factory: HostFactory) -> NpuSettings:
    return load_settings({"RKNNLAUNCH_ROOT": str(host_factory("rk3588-drm").root)})


def fake() -> FakeNpu:
    soc = soc_by_name("rk3588")
    assert soc is not None
    return FakeNpu(soc, runtime_version="2.5.0")  # the toolkit that built the tiny files


def multi_frame(value: float = 3.0) -> list[np.ndarray]:
    return [np.full((1, 8), value, np.float32), np.arange(4, dtype=np.int64)[np.newaxis]]


def test_the_real_headers_say_what_a_frame_is() -> None:
    """What toolkit2 2.5.0 wrote, read as the runtime exchanges it (docs/hardware.md#real-rknn-headers)."""
    image = read_rknn(IMAGE_I8).inputs[0]
    assert (image.shape, image.layout, image.dtype) == ((1, 3, 16, 16), "NHWC", "int8")
    assert input_specs(read_rknn(IMAGE_I8).inputs) == (InputSpec("images", (1, 16, 16, 3), "int8", True),)
    assert input_specs(read_rknn(IMAGE_FP16).inputs)[0].dtype == "float16"
    # An ONNX float32 input is recorded float16; the int64 one stays int64.
    assert input_specs(read_rknn(MULTI).inputs) == (
        InputSpec("features", (1, 8), "float16"),
        InputSpec("ids", (1, 4), "int64"),
    )
    assert read_rknn(MULTI).custom_string == "tiny multi fp16"


@pytest.mark.parametrize("model", [IMAGE_I8, IMAGE_FP16])
def test_open_runs_an_image_model_on_uint8_nhwc_frames(host_factory: HostFactory, model: Path) -> None:
    npu = fake()
    with rknnlaunch.open(model, settings=settings(host_factory), rknnlite=npu.factory) as runtime:
        outputs = runtime.infer(np.full((16, 16, 3), 7, np.uint8))  # batch dim optional
        assert [o.shape for o in outputs] == [(1, 4, 16, 16)] and outputs[0].flat[0] == 7.0
        assert npu.instances[0].last_inputs[0].shape == (1, 16, 16, 3)  # what RKNNLite was given
        runtime.infer(np.full((1, 16, 16, 3), 7, np.uint8))
        with pytest.raises(
            UsageError, match=r"shape \(1, 3, 16, 16\); this model takes 'images' uint8 1x16x16x3"
        ):
            runtime.infer(np.zeros((1, 3, 16, 16), np.uint8))  # NCHW, as the header's raw dims
        with pytest.raises(UsageError, match="int64 of shape"):
            runtime.infer(np.zeros((16, 16, 3), np.int64))
    assert npu.instances[0].inference_count == 2  # the refused frames never reached the runtime


def test_open_runs_a_multi_input_model_with_one_array_per_input(host_factory: HostFactory) -> None:
    npu = fake()
    with rknnlaunch.open(MULTI, settings=settings(host_factory), rknnlite=npu.factory) as runtime:
        assert [s.name for s in runtime.inputs] == ["features", "ids"]
        outputs = runtime.infer(multi_frame())
        assert [o.shape for o in outputs] == [(1, 8)] and outputs[0].flat[0] == 3.0
        given = npu.instances[0].last_inputs
        assert [(a.shape, a.dtype.name) for a in given] == [((1, 8), "float32"), ((1, 4), "int64")]
        # batch dim of 1 optional; float16 passes as RKNNLite takes it
        runtime.infer((np.zeros(8, np.float16), np.arange(4, dtype=np.int64)))
        assert [a.shape for a in npu.instances[0].last_inputs] == [(1, 8), (1, 4)]
        with pytest.raises(
            UsageError, match=r"the frame has 1 array; this model takes 2 inputs \('features'"
        ):
            runtime.infer(np.zeros((1, 8), np.float32))
        with pytest.raises(
            UsageError, match=r"input 'ids' is int32 of shape \(1, 4\); this model takes 'ids' int64"
        ):
            runtime.infer([np.zeros((1, 8), np.float32), np.zeros((1, 4), np.int32)])
        with pytest.raises(UsageError, match=r"input 'features' is float32 of shape \(1, 9\)"):
            runtime.infer([np.zeros((1, 9), np.float32), np.zeros((1, 4), np.int64)])
    assert npu.instances[0].inference_count == 2


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_pool_carries_multi_input_frames_on_every_worker_kind(
    host_factory: HostFactory, tmp_path: Path, workers: str
) -> None:
    sim = SimulatedNpu(str(tmp_path), single_core_ms=1.0, runtime_version="2.5.0")
    with Pool(MULTI, settings=settings(host_factory), rknnlite=sim, workers=workers) as pool:  # type: ignore[arg-type]
        assert [s.name for s in pool.inputs] == ["features", "ids"]
        results = list(pool.map(multi_frame(float(v)) for v in range(12)))
        assert [float(r[0].flat[0]) for r in results] == [float(v) for v in range(12)]
        assert results[0][0].shape == (1, 8)
        with pytest.raises(UsageError, match="input 'ids' is float32"):
            pool.submit([np.zeros((1, 8), np.float32), np.zeros((1, 4), np.float32)])
        with pytest.raises(UsageError, match="the frame has 3 arrays"):
            pool.submit([*multi_frame(), np.zeros(1)])
        assert float(pool.infer(multi_frame(5.0))[0].flat[0]) == 5.0  # the pool is fine after refusals


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_pool_runs_a_real_image_model_and_refuses_bad_frames_before_a_worker(
    host_factory: HostFactory, tmp_path: Path, workers: str
) -> None:
    sim = SimulatedNpu(str(tmp_path), single_core_ms=1.0, runtime_version="2.5.0")
    with Pool(IMAGE_I8, settings=settings(host_factory), rknnlite=sim, workers=workers) as pool:  # type: ignore[arg-type]
        outputs = pool.infer(np.full((16, 16, 3), 9, np.uint8))
        assert outputs[0].shape == (1, 4, 16, 16) and outputs[0].flat[0] == 9.0
        with pytest.raises(UsageError, match=r"letterbox each frame to the model input \(16x16"):
            pool.submit(np.zeros((320, 320, 3), np.uint8))


def test_cpu_backend_runs_the_multi_input_onnx_with_the_same_checks() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    model = onnx.load(str(TINY / "tiny_multi.onnx"))
    table = numpy_helper.to_array(model.graph.initializer[0])
    ids = np.array([[1, 5, 5, 15]], np.int64)
    features = np.linspace(0, 1, 8, dtype=np.float32)[np.newaxis]
    with rknnlaunch.open(TINY / "tiny_multi.onnx", backend="cpu", settings=load_settings({})) as runtime:
        assert [(s.name, s.shape, s.dtype) for s in runtime.inputs] == [
            ("features", (1, 8), "float32"),
            ("ids", (1, 4), "int64"),
        ]
        (output,) = runtime.infer([features, ids])
        np.testing.assert_allclose(output, features + table[ids[0]].sum(axis=0), rtol=1e-5)
        with pytest.raises(UsageError, match="input 'ids' is int32"):
            runtime.infer([features, ids.astype(np.int32)])
        with pytest.raises(UsageError, match="the frame has 1 array"):
            runtime.infer(features)


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_cpu_backend_takes_image_frames_as_the_npu_does(workers: str) -> None:
    """Process workers report what their runtime takes: the pool checks frames before sending them."""
    pytest.importorskip("onnxruntime")
    with Pool(TINY / "tiny_image.onnx", settings=load_settings({}), workers=workers) as pool:  # type: ignore[arg-type]
        assert pool.inputs == (InputSpec("images", (1, 16, 16, 3), "float32", True),)
        assert pool.infer(np.zeros((16, 16, 3), np.uint8))[0].shape == (1, 4, 16, 16)
        with pytest.raises(UsageError, match=r"shape \(320, 320, 3\)"):
            pool.submit(np.zeros((320, 320, 3), np.uint8))


@pytest.mark.parametrize("cores", ["banana", [7], ["0"], 1.5])
def test_cores_are_validated_on_the_cpu_backend_too(cores: Any) -> None:
    """Issue 19: `open(onnx, cores="banana")` and `Pool(onnx, cores="banana")` succeeded."""
    pytest.importorskip("onnxruntime")
    onnx = TINY / "tiny_image.onnx"
    with pytest.raises((MaskError, UsageError)):
        rknnlaunch.open(onnx, cores=cores, settings=load_settings({}))
    with pytest.raises((MaskError, UsageError)):
        Pool(onnx, cores=cores, settings=load_settings({}))


def test_cores_on_an_onnx_model_say_it_runs_on_the_cpu() -> None:
    with pytest.raises(UsageError, match="ONNX model, which runs on the CPU"):
        rknnlaunch.open(TINY / "tiny_image.onnx", cores=[0], settings=load_settings({}))


def test_model_inspect_lists_every_input_of_a_real_multi_input_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["model", "inspect", "--json", str(MULTI)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(t["name"], t["runtime_shape"], t["dtype"]) for t in data["inputs"]] == [
        ("features", [1, 8], "float16"),
        ("ids", [1, 4], "int64"),
    ]


def test_check_frame_is_one_rule_for_one_array_or_a_list() -> None:
    spec = (InputSpec("x", (1, None, 3), "float32"),)
    assert check_frame(np.zeros((5, 3), np.float32), spec)[0].shape == (1, 5, 3)
    assert check_frame([np.zeros((1, 2, 3), np.float32)], spec)[0].shape == (1, 2, 3)
    assert check_frame(np.zeros((4, 4, 3), np.uint8), ())[0].shape == (1, 4, 4, 3)  # header says nothing
    with pytest.raises(UsageError, match="float64") as error:
        check_frame(np.zeros((5, 3)), spec)
    assert "astype(np.float32)" in error.value.fix
