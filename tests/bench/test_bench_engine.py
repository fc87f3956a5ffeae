"""The bench engine: warm-up excluded, one fresh inference per timed frame, pools, failures."""

from __future__ import annotations

import numpy as np
import pytest
from bench_fakes import FakeRuntime

from rknnlaunch.bench import _engine as _bench
from rknnlaunch.bench._cases import BenchCase, pool_case, single_case
from rknnlaunch.bench._report import BenchReport
from rknnlaunch.yolo import Letterboxer, YoloDecoder

IMAGE = np.zeros((720, 1280, 3), np.uint8)


def pipeline() -> tuple[Letterboxer, YoloDecoder]:
    return Letterboxer(640), YoloDecoder()


class Opener:
    def __init__(self, fail_cores: frozenset[int] | None = None, fail_after: int | None = None) -> None:
        self.opened: list[FakeRuntime] = []
        self.fail_cores = fail_cores
        self.fail_after = fail_after

    def __call__(self, cores: frozenset[int] | None) -> FakeRuntime:
        if cores is not None and cores == self.fail_cores:
            from rknnlaunch import RuntimeInitError

            raise RuntimeInitError("init_runtime returned -1", "use another core")
        runtime = FakeRuntime(cores, self.fail_after)
        self.opened.append(runtime)
        return runtime

    def open_runtime(self, cores: frozenset[int] | None) -> FakeRuntime:
        return self(cores)

    def open_pool(self, case: BenchCase) -> _bench.StreamPool:
        raise AssertionError(f"no stream case here: {case.name}")


def test_single_case_times_every_frame_and_keeps_warmup_apart() -> None:
    opener = Opener()
    progress: list[tuple[str, int, int]] = []
    result = _bench.run_single(
        single_case(frozenset({1})), opener, IMAGE, pipeline, 3, 7, lambda *a: progress.append(a)
    )
    (runtime,) = opener.opened
    assert runtime.calls == 10 and runtime.closed  # 3 warm-up + 7 timed, each a real infer call
    assert len(result.warmup_ns) == 3 and result.iterations == 7
    assert all(len(result.stage(s)) == 7 for s in _bench.STAGES)
    assert all(
        t == p + i + q
        for t, p, i, q in zip(result.total_ns, result.pre_ns, result.infer_ns, result.post_ns, strict=True)
    )
    assert result.detections == 2 and result.label == "fake [1]"
    assert result.wall_ns >= sum(result.total_ns) and result.fps > 0
    assert progress[-1] == ("cores 1", 10, 10)
    stats = result.stats()
    assert stats["total"]["p50_ms"] <= stats["total"]["p90_ms"] <= stats["total"]["p99_ms"]


def test_pool_uses_every_runtime_and_counts_frames_exactly() -> None:
    opener = Opener()
    case = pool_case(frozenset({0, 1, 2}), threads=4)
    assert case.instances == (frozenset({0}), frozenset({1}), frozenset({2}))
    assert case.name == "pool 0,1,2 x4t"
    result = _bench.run_pool(case, opener, IMAGE, pipeline, 2, 30)
    assert len(opener.opened) == 3 and all(r.closed for r in opener.opened)
    assert result.iterations == 30
    # ceil(2 warm-up * 3 runtimes / 4 threads) = 2 per thread
    assert len(result.warmup_ns) == 8
    assert sum(r.calls for r in opener.opened) == 38
    assert result.fps > 0 and result.detections == 2
    assert result.label == "fake [0] + fake [1] + fake [2]"


def test_a_case_that_cannot_open_is_reported_and_the_rest_still_run() -> None:
    cases = [single_case(frozenset({0})), single_case(frozenset({1})), single_case(None)]
    results = _bench.run_cases(cases, Opener(fail_cores=frozenset({1})), IMAGE, pipeline, 1, 2)
    assert [r.error is None for r in results] == [True, False, True]
    assert "init_runtime returned -1" in (results[1].error or "")
    report = BenchReport(results)
    rows = report.table_rows()
    assert rows[1][:2] == ["cores 1", "failed"]
    assert "failed" in report.plain_table() and report.exit_code == 1


def test_a_missing_backend_stops_the_run() -> None:
    from rknnlaunch import BackendUnavailableError

    class NoBackend(Opener):
        def __call__(self, cores: frozenset[int] | None) -> FakeRuntime:
            raise BackendUnavailableError("rknn-toolkit-lite2 is not importable here", "pip install ...")

    cases = [single_case(frozenset({0})), single_case(frozenset({1}))]
    with pytest.raises(BackendUnavailableError):
        _bench.run_cases(cases, NoBackend(), IMAGE, pipeline, 1, 2)


def test_pool_failure_mid_run_is_reported_and_closes_runtimes() -> None:
    opener = Opener(fail_after=3)
    results = _bench.run_cases([pool_case(frozenset({0, 1}))], opener, IMAGE, pipeline, 1, 50)
    assert results[0].error is not None and "fake runtime failed" in results[0].error
    assert all(r.closed for r in opener.opened)


def test_json_report_has_raw_latencies_and_stats() -> None:
    result = _bench.run_single(single_case(None), Opener(), IMAGE, pipeline, 1, 4)
    doc = BenchReport([result], {"backend": "cpu"}).to_json()
    assert doc["schema"] == "rknnlaunch.bench/2" and doc["backend"] == "cpu"
    (case,) = doc["cases"]
    assert case["name"] == "cpu" and case["cores"] is None and case["iterations"] == 4
    assert len(case["raw_ns"]["infer"]) == 4 and len(case["raw_ns"]["warmup"]) == 1
    assert set(case["stats"]) == {"pre", "infer", "post", "total"}
    assert case["stats"]["infer"]["p50_ms"] == pytest.approx(np.median(case["raw_ns"]["infer"]) / 1e6)


def test_summarise_empty_and_values() -> None:
    assert _bench.summarise([])["p99_ms"] == 0.0
    s = _bench.summarise([1_000_000 * v for v in range(1, 101)])
    assert s["p50_ms"] == pytest.approx(50.5) and s["max_ms"] == 100.0


def test_ctrl_c_during_a_pool_run_stops_the_workers_before_closing_the_runtimes() -> None:
    import os
    import signal
    import threading

    opener = Opener()
    late: list[int] = []
    original = FakeRuntime.infer

    def infer(self: FakeRuntime, x: np.ndarray) -> list[np.ndarray]:
        if self.closed:
            late.append(1)
        return original(self, x)

    def progress(_name: str, done: int, _total: int) -> None:
        if done == 5:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C; Python raises it in the main thread (in join())

    case = pool_case(frozenset({0, 1, 2}), threads=3)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FakeRuntime, "infer", infer)
        # Ctrl-C must mean KeyboardInterrupt here even when a launcher left SIGINT ignored (a shell
        # starting a background job does, and Python then keeps it ignored).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with pytest.raises(KeyboardInterrupt):
                _bench.run_pool(case, opener, IMAGE, pipeline, 1, 100_000, progress)
        finally:
            signal.signal(signal.SIGINT, previous)
    # Every worker has stopped. (Not active_count(): a join interrupted by KeyboardInterrupt can
    # leave a finished thread listed for a moment after it stopped; CPython's own race.)
    assert not [t for t in threading.enumerate() if t.name.startswith("bench-") and t.is_alive()]
    assert late == [] and all(r.closed for r in opener.opened)


def test_plan_cases_for_an_allocation_is_pure() -> None:
    from rknnlaunch.bench._cases import plan_cases
    from rknnlaunch.npu import soc_by_name
    from rknnlaunch.settings._allocation import Allocation

    assert [c.name for c in plan_cases(None)] == ["cpu"]
    rk3588 = soc_by_name("rk3588")
    assert rk3588 is not None
    every = Allocation(rk3588, 3, frozenset({0, 1, 2}), False, "default")
    names = [c.name for c in plan_cases(every, threads=4)]
    assert names[-3:] == ["pool 0,1,2 x4t", "pool 0,1,2 processes", "pool 0,1,2 x2/core"]
    assert len(plan_cases(every, pools=False)) == 5
    two = Allocation(rk3588, 3, frozenset({0, 2}), True, "RKNN_NPU_CORES=0,2")
    assert [c.name for c in plan_cases(two, process_pool=False)] == [
        "cores 0",
        "cores 2",
        "pool 0,2 x2t",
        "pool 0,2 x2/core",
    ]


def test_report_notes_explain_a_blank_efficiency_and_the_plot_names_only_shown_colours() -> None:
    single = _bench.run_single(single_case(None), Opener(), IMAGE, pipeline, 0, 2)
    cpu = BenchReport([single], {"backend": "cpu"}, "CPU", "m.onnx", 2)
    assert all(row[2] == "" for row in cpu.table_rows())
    assert any("efficiency is blank: no pool here" in line for line in cpu.notes())
    assert BenchReport.throughput_title([single]) == "throughput"  # no orange on the CPU
    opener = Opener()
    results = [
        _bench.run_single(single_case(frozenset({core})), opener, IMAGE, pipeline, 0, 2) for core in (0, 1)
    ]
    results.append(_bench.run_pool(pool_case(frozenset({0, 1})), opener, IMAGE, pipeline, 0, 4))
    npu = BenchReport(results, {}, "NPU rk3588", "m.rknn", 4)
    assert npu.table_rows()[2][2].endswith("%")
    assert any(line.strip().startswith("efficiency = a pool's FPS") for line in npu.notes())
    assert "pool in orange" in BenchReport.throughput_title(results)
