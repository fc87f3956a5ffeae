"""`rknnlaunch.open` and `Pool` on fixture hosts with the fake RKNNLite installed through the seam."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from rknnfile_builder import write_rknn
from rknnlite_fake import FakeNpu

import rknnlaunch
from rknnlaunch import MaskError, ModelError, NpuSettings, Pool, RuntimeInitError
from rknnlaunch.npu import HostRoot, soc_by_name
from rknnlaunch.settings._env import load_settings

HostFactory = Callable[[str], HostRoot]


def settings_for(host: HostRoot, **env: str) -> NpuSettings:
    return load_settings({"RKNNLAUNCH_ROOT": str(host.root), **env})


def fake_for(name: str, **kwargs: object) -> FakeNpu:
    soc = soc_by_name(name)
    assert soc is not None
    return FakeNpu(soc, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_rknn(tmp_path / "yolov8s.rknn", targets=("rk3588",))


def frame(value: int = 7) -> np.ndarray:
    return np.full((640, 640, 3), value, dtype=np.uint8)


def test_open_pins_every_discovered_core_without_plugin_env(host_factory: HostFactory, model: Path) -> None:
    host = host_factory("rk3588-drm")
    npu = fake_for("rk3588")
    with rknnlaunch.open(model, settings=settings_for(host), rknnlite=npu.factory) as runtime:
        assert runtime.backend == "npu"
        assert runtime.label == "NPU rk3588 cores 0,1,2 (mask 7)"
        assert runtime.cores == {0, 1, 2}
        outputs = runtime.infer(frame(9))  # HWC: the batch dimension is added
        assert [o.shape for o in outputs] == [(1, 6, 8400)]
        assert float(outputs[0].flat[0]) == 9.0
    (instance,) = npu.instances
    assert instance.requested_mask == 7  # never AUTO
    assert instance.released


def test_open_uses_the_injected_mask(host_factory: HostFactory, model: Path) -> None:
    host = host_factory("rk3588-drm")
    npu = fake_for("rk3588")
    settings = settings_for(host, RKNN_NPU_CORE_MASK="2", RKNN_NPU_CORES="1", RKNN_NPU_SOC="rk3588")
    runtime = rknnlaunch.open(model, settings=settings, rknnlite=npu.factory)
    assert runtime.label == "NPU rk3588 core 1 (mask 2)"
    assert npu.instances[0].requested_mask == 2
    runtime.close()
    runtime.close()  # idempotent
    assert npu.instances[0].released


def test_cores_outside_the_allocation_are_refused(host_factory: HostFactory, model: Path) -> None:
    host = host_factory("rk3588-drm")
    settings = settings_for(host, RKNN_NPU_CORE_MASK="1")
    with pytest.raises(MaskError, match=r"core\(s\) 2 are not available.*RKNN_NPU_CORE_MASK=1"):
        rknnlaunch.open(model, cores=[2], settings=settings, rknnlite=fake_for("rk3588").factory)


def test_single_core_soc_gets_mask_zero(host_factory: HostFactory, tmp_path: Path) -> None:
    host = host_factory("rk3568")
    model = write_rknn(tmp_path / "m.rknn", targets=("rk3566",))  # same NPU family as rk3568
    npu = fake_for("rk3568")
    with rknnlaunch.open(model, settings=settings_for(host), rknnlite=npu.factory) as runtime:
        assert runtime.label == "NPU rk3568 core 0 (mask 0)"
    assert npu.instances[0].requested_mask == 0


def test_unrunnable_core_set_is_refused_by_open_and_split_by_pool(
    host_factory: HostFactory, model: Path
) -> None:
    host = host_factory("rk3588-drm")
    settings = settings_for(host, RKNN_NPU_CORE_MASK="5", RKNN_NPU_CORES="0,2")
    with pytest.raises(MaskError, match=r"(?s)cannot run one context on cores \{0,2\}.*Pool"):
        rknnlaunch.open(model, settings=settings, rknnlite=fake_for("rk3588").factory)
    npu = fake_for("rk3588")
    with Pool(model, settings=settings, rknnlite=npu.factory) as pool:
        assert pool.size == 2
        assert pool.cores == {0, 2}
        assert sorted(i.requested_mask for i in npu.instances) == [1, 4]
        assert "cores 0,2: 2 contexts" in pool.label
    assert all(i.released for i in npu.instances)


def test_pool_map_keeps_input_order_and_uses_every_runtime(host_factory: HostFactory, model: Path) -> None:
    host = host_factory("rk3588-drm")
    npu = fake_for("rk3588")
    settings = settings_for(host, RKNN_NPU_CORE_MASK="5")
    frames = [frame(value) for value in range(40)]
    with Pool(model, settings=settings, rknnlite=npu.factory) as pool:
        results = list(pool.map(frames))
        assert pool.infer(frame(3))[0].flat[0] == 3.0
    assert [float(r[0].flat[0]) for r in results] == [float(v) for v in range(40)]
    assert sum(i.inference_count for i in npu.instances) == 41
    threads = set().union(*(i.inference_threads for i in npu.instances))
    assert len(threads) == 2 and threading.get_ident() not in threads


def test_pool_propagates_a_failed_frame(host_factory: HostFactory, model: Path) -> None:
    host = host_factory("rk3588-drm")
    with Pool(model, settings=settings_for(host), rknnlite=fake_for("rk3588").factory) as pool:
        with pytest.raises(
            rknnlaunch.UsageError, match=r"shape \(640, 640\); this model takes 'images' uint8 1x640x640x3"
        ):
            pool.infer(np.zeros((640, 640), dtype=np.uint8))
        with pytest.raises(rknnlaunch.UsageError, match="float64 of shape") as error:
            pool.submit(np.zeros((640, 640, 3), dtype=np.float64))
        assert "astype(np.float32)" in error.value.fix
        assert pool.infer(frame(1))[0].shape == (1, 6, 8400)


def test_pool_submit_racing_close_either_refuses_or_runs(host_factory: HostFactory, model: Path) -> None:
    """A frame submitted while another thread closes the pool is refused or run, never left waiting."""
    host = host_factory("rk3588-drm")
    pool = Pool(model, settings=settings_for(host), rknnlite=fake_for("rk3588").factory)
    outcomes: list[str] = []
    start = threading.Barrier(5)

    def submit_many() -> None:
        start.wait()
        for _ in range(200):
            try:
                future = pool.submit(frame(1))
            except rknnlaunch.InferenceError:
                outcomes.append("refused")
                return
            future.result(timeout=30)  # a job queued behind the stop markers would time out here
            outcomes.append("ran")

    submitters = [threading.Thread(target=submit_many) for _ in range(4)]
    for thread in submitters:
        thread.start()
    start.wait()
    pool.close()
    for thread in submitters:
        thread.join()
    assert outcomes.count("refused") == 4


def test_init_runtime_is_serialised_process_wide(host_factory: HostFactory, model: Path) -> None:
    host = host_factory("rk3588-drm")
    npu = fake_for("rk3588", init_window=0.05)
    settings = settings_for(host)
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def open_one(core: int) -> None:
        start.wait()
        try:
            rknnlaunch.open(model, cores=[core], settings=settings, rknnlite=npu.factory).close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(core,)) for core in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert npu.max_concurrent_inits == 1
    assert not npu.concurrent_init_detected


def test_the_fake_detects_unserialised_init(model: Path) -> None:
    """Control for the test above: without the lock, overlapping inits are caught and fail."""
    npu = fake_for("rk3588", init_window=2.0)
    results: list[int] = []
    instances = [npu.factory(), npu.factory()]
    for instance in instances:
        assert instance.load_rknn(str(model)) == 0
    threads = [
        threading.Thread(target=lambda i=i: results.append(i.init_runtime(core_mask=1))) for i in instances
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert npu.concurrent_init_detected
    assert results == [-1, -1]


def test_runtime_failure_carries_the_runtime_log(host_factory: HostFactory, tmp_path: Path) -> None:
    host = host_factory("rk3588-drm")
    model = write_rknn(tmp_path / "new.rknn", version="2.5.0")
    npu = fake_for("rk3588", runtime_version="2.1.0")
    with pytest.raises(RuntimeInitError) as caught:
        rknnlaunch.open(model, settings=settings_for(host), rknnlite=npu.factory)
    error = caught.value
    assert "init_runtime(core_mask=7 (NPU_CORE_0_1_2)) returned -1" in str(error)
    assert any("Invalid RKNN model version 6" in line for line in error.log_lines)
    assert error.fix is not None and "librknnrt.so" in error.fix
    assert npu.instances[0].released  # a failed context is released, not leaked


def test_single_core_runtime_message_is_captured(host_factory: HostFactory, tmp_path: Path) -> None:
    """A runtime that refuses any mask (single-core librknnrt table) fails with its own words."""
    host = host_factory("rk3588-drm")
    npu = fake_for("rk3566")
    model = write_rknn(tmp_path / "any.rknn", targets=())
    with pytest.raises(RuntimeInitError) as caught:
        rknnlaunch.open(model, settings=settings_for(host), rknnlite=npu.factory)
    assert caught.value.log_lines == (
        "E init_runtime: The core_mask is only supported by ['RK3588', 'RK3576']",
    )


def test_the_fake_follows_the_documented_mask_rules(tmp_path: Path) -> None:
    cases = [
        ("rk3588", 5, -1, None),
        ("rk3588", 6, -1, None),
        ("rk3588", 0xFFFF, 0, 7),
        ("rk3576", 4, 0, 1),
        ("rk3576", 7, 0, 3),
        ("rk3576", 5, -1, None),
        ("rk3568", 1, -1, None),
        ("rk3568", 0, 0, 0),
    ]
    for soc, mask, code, effective in cases:
        model = write_rknn(tmp_path / f"{soc}.rknn", targets=(soc,))
        instance = fake_for(soc, init_window=0.0).factory()
        assert instance.load_rknn(str(model)) == 0
        assert instance.init_runtime(core_mask=mask) == code, (soc, mask)
        assert instance.effective_mask == effective
    three_dims = fake_for("rk3588", init_window=0.0).factory()
    assert three_dims.load_rknn(str(tmp_path / "missing.rknn")) == -1
    three_dims.load_rknn(str(tmp_path / "rk3588.rknn"))
    assert three_dims.init_runtime(core_mask=1) == 0
    assert three_dims.inference(inputs=[frame()]) is None
    assert three_dims.inference(inputs=[frame()[None]]) is not None


def test_mask_error_line_is_in_the_error(
    host_factory: HostFactory, model: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from rknnlaunch.runtime._rknnlite import capture_runtime_log

    instance = fake_for("rk3588", init_window=0.0).factory()
    instance.load_rknn(str(model))
    with capture_runtime_log() as log:
        code = instance.init_runtime(core_mask=5)
    assert code == -1
    assert log.lines == ("E init_runtime: The core mode 5 is not supported currently.",)
    assert "The core mode 5" in capfd.readouterr().err  # replayed, not swallowed


def test_model_built_for_another_soc_is_refused_before_the_runtime(
    host_factory: HostFactory, tmp_path: Path
) -> None:
    host = host_factory("rk3588-drm")
    model = write_rknn(tmp_path / "m.rknn", targets=("rk3566",))
    npu = fake_for("rk3588")
    with pytest.raises(ModelError, match="built for rk3566, but this board is rk3588"):
        rknnlaunch.open(model, settings=settings_for(host), rknnlite=npu.factory)
    assert npu.instances == []


def test_backend_npu_without_an_npu_fails(host_factory: HostFactory, model: Path) -> None:
    host = host_factory("no-npu")
    with pytest.raises(rknnlaunch.NpuNotFoundError):
        rknnlaunch.open(
            model, backend="npu", settings=settings_for(host), rknnlite=fake_for("rk3588").factory
        )
    with pytest.raises(rknnlaunch.UsageError, match="not a backend"):
        rknnlaunch.open(model, backend="gpu", settings=settings_for(host))


def test_rocket_host_says_why(host_factory: HostFactory, model: Path) -> None:
    host = host_factory("rocket")
    with pytest.raises(rknnlaunch.UnsupportedDriverError, match="rocket"):
        rknnlaunch.open(model, backend="npu", settings=settings_for(host))


def test_pool_opens_one_context_per_core_by_default(host_factory: HostFactory, model: Path) -> None:
    host = host_factory("rk3588-drm")
    npu = fake_for("rk3588")
    with rknnlaunch.open(model, settings=settings_for(host), rknnlite=npu.factory):
        assert npu.instances[0].requested_mask == 7  # open(): the latency path, one 3-core context
    npu = fake_for("rk3588")
    with Pool(model, settings=settings_for(host), rknnlite=npu.factory, contexts_per_core=2) as pool:
        assert pool.size == 6
        assert [i.requested_mask for i in npu.instances] == [1, 2, 4, 1, 2, 4]
    npu = fake_for("rk3588")
    with Pool(model, settings=settings_for(host), rknnlite=npu.factory) as pool:
        assert pool.size == 3
        assert [i.requested_mask for i in npu.instances] == [1, 2, 4]
        assert len(list(pool.map([frame(v) for v in range(9)]))) == 9
    single = fake_for("rk3568")
    rk3568 = host_factory("rk3568")
    model_3568 = write_rknn(model.parent / "m3568.rknn", targets=("rk3568",))
    with Pool(model_3568, settings=settings_for(rk3568), rknnlite=single.factory) as pool:
        assert pool.size == 1 and single.instances[0].requested_mask == 0
