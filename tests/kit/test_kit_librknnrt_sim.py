"""The simulated librknnrt (tests/kit/librknnrt_sim), x86_64 build, through ctypes as the binding
calls it: model facts from the .rknn bytes, the documented error codes, the simulated version
line, per-core queues shared with the Python SimulatedNpu, and failing cores."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rknnlaunch.npu._librknnrt import parse_librknnrt_version

KIT = Path(__file__).resolve().parent
sys.path.insert(0, str(KIT.parent / "sdk"))
from rknnfile_builder import rknn_bytes  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the simulator")


def _load_structs() -> Any:
    # The stand-in binding's own declarations, loaded by path: putting rknnlite_sim on sys.path
    # would make `rknnlite` importable for every other test in this process.
    path = KIT / "rknnlite_sim/rknnlite/api/_rknn_api.py"
    spec = importlib.util.spec_from_file_location("kit_rknn_api", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_structs = _load_structs()
TensorAttr, Input, Output = _structs.TensorAttr, _structs.Input, _structs.Output


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    subprocess.run(
        ["bash", str(KIT / "librknnrt_sim/build.sh"), str(out)],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "SIM_ARCHS": "x86_64"},
    )
    return out / "x86_64/librknnrt.so"


def _init(lib: ctypes.CDLL, data: bytes) -> tuple[int, ctypes.c_uint64, ctypes.Array[ctypes.c_char]]:
    ctx = ctypes.c_uint64()
    model = ctypes.create_string_buffer(data, len(data))
    return lib.rknn_init(ctypes.byref(ctx), model, len(data), 0, None), ctx, model


def test_it_reads_the_tiny_model_and_says_it_is_simulated(library: Path) -> None:
    version, line = parse_librknnrt_version(library.read_bytes())
    assert version == "2.5.0" and line is not None and "(simulated" in line
    lib = ctypes.CDLL(str(library))
    code, ctx, _ = _init(lib, (KIT / "models/tiny-rk3588.rknn").read_bytes())
    assert code == 0
    attr = TensorAttr(index=0)
    assert lib.rknn_query(ctx, 1, ctypes.byref(attr), ctypes.sizeof(attr)) == 0  # RKNN_QUERY_INPUT_ATTR
    assert (attr.name, list(attr.dims[: attr.n_dims]), attr.fmt) == (b"x", [1, 32, 32, 3], 1)  # NHWC
    assert lib.rknn_query(ctx, 2, ctypes.byref(attr), ctypes.sizeof(attr)) == 0
    assert (attr.name, list(attr.dims[: attr.n_dims])) == (b"y", [1, 6, 1024])
    assert lib.rknn_destroy(ctx) == 0


@pytest.mark.parametrize(
    ("soc", "mask", "code"),
    [("rk3588", 7, 0), ("rk3588", 8, -5), ("rk3576", 4, -5), ("rk3576", 3, 0), ("rk3566", 2, -5)],
)
def test_core_masks_the_soc_lacks_are_param_invalid(
    library: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, soc: str, mask: int, code: int
) -> None:
    monkeypatch.setenv("RKNN_SIM_SOC", soc)
    monkeypatch.setenv("RKNN_SIM_LOCK_DIR", str(tmp_path))
    lib = ctypes.CDLL(str(library))
    target = "rk3566" if soc == "rk3566" else soc
    assert _init(lib, rknn_bytes(targets=(target,)))[0] == 0
    _, ctx, _ = _init(lib, rknn_bytes(targets=(target,)))
    assert lib.rknn_set_core_mask(ctx, mask) == code


def test_documented_error_codes(library: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RKNN_SIM_SOC", "rk3588")
    monkeypatch.setenv("RKNN_SIM_LOCK_DIR", str(tmp_path))
    lib = ctypes.CDLL(str(library))
    assert _init(lib, rknn_bytes(targets=("rk3566",)))[0] == -13  # RKNN_ERR_TARGET_PLATFORM_UNMATCH
    assert _init(lib, rknn_bytes(targets=("rk3568", "rk3588")))[0] == 0
    assert _init(lib, rknn_bytes(version="2.9.0"))[0] == -6  # newer than the runtime: MODEL_INVALID
    assert _init(lib, b"ONNX" + b"\0" * 100)[0] == -6
    num = (ctypes.c_uint32 * 2)()
    assert lib.rknn_query(ctypes.c_uint64(0), 0, ctypes.byref(num), 8) == -7  # RKNN_ERR_CTX_INVALID
    _, ctx, _ = _init(lib, rknn_bytes())
    assert lib.rknn_run(ctx, None) == -8  # no inputs set
    assert lib.rknn_destroy(ctx) == 0 and lib.rknn_destroy(ctx) == -7


def test_a_job_runs_on_its_cores_and_a_failing_core_fails_to_submit(
    library: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RKNN_SIM_SOC", "rk3588")
    monkeypatch.setenv("RKNN_SIM_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("RKNN_SIM_CORE_MS", "1")
    lib = ctypes.CDLL(str(library))
    _, ctx, _ = _init(lib, rknn_bytes(inputs=(("images", (1, 8, 8, 3)),), outputs=(("out", (1, 2, 4)),)))
    frame = (ctypes.c_uint8 * (8 * 8 * 3))(*([7] * (8 * 8 * 3)))
    inputs = (Input * 1)(Input(index=0, buf=ctypes.addressof(frame), size=len(frame), type=3, fmt=1))
    assert lib.rknn_set_core_mask(ctx, 2) == 0
    assert lib.rknn_inputs_set(ctx, 1, inputs) == 0
    assert lib.rknn_run(ctx, None) == 0
    assert (tmp_path / "core1.lock").stat().st_size == 8  # the queue file SimulatedNpu reads too
    outputs = (Output * 1)(Output(want_float=1, index=0))
    assert lib.rknn_outputs_get(ctx, 1, outputs, None) == 0
    values = ctypes.cast(outputs[0].buf, ctypes.POINTER(ctypes.c_float))
    assert [values[i] for i in range(8)] == [7.0] * 8
    assert lib.rknn_outputs_release(ctx, 1, outputs) == 0
    (tmp_path / "fail-cores").write_text("2\n")
    assert lib.rknn_run(ctx, None) == -1
    assert "failed to submit!" in capfd.readouterr().err


def test_the_x86_rknnlite_stand_in_runs_jobs_on_the_mask_it_was_given(
    library: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """tests/kit/rknnlite_sim (the demo's RKNNLite off arm64): load -> init_runtime(core_mask) ->
    inference -> release on the simulated librknnrt, the job on the mask's core only."""
    import numpy as np

    monkeypatch.setenv("RKNN_SIM_LIBRKNNRT", str(library))
    monkeypatch.setenv("RKNN_SIM_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("RKNN_SIM_SOC", "rk3588")
    monkeypatch.setenv("RKNN_SIM_CORE_MS", "1")
    monkeypatch.syspath_prepend(str(KIT / "rknnlite_sim"))
    from rknnlite.api import RKNNLite

    lite = RKNNLite(verbose=False)
    assert lite.load_rknn(str(KIT / "models/tiny-rk3588.rknn")) == 0
    assert lite.init_runtime(core_mask=RKNNLite.NPU_CORE_2) == 0
    outputs = lite.inference(inputs=[np.full((1, 32, 32, 3), 42, np.uint8)])
    assert outputs is not None and outputs[0].shape == (1, 6, 1024) and float(outputs[0].flat[0]) == 42.0
    lite.release()
    assert sorted(p.name for p in tmp_path.glob("core*.lock")) == ["core2.lock"]
    assert RKNNLite().init_runtime(core_mask=8) == -1  # load_rknn first: refused, no raise
    bad = RKNNLite()
    bad.load_rknn(str(KIT / "models/tiny-rk3588.rknn"))
    assert bad.init_runtime(core_mask=8) == -1  # a core the SoC lacks: rknn_set_core_mask refuses
