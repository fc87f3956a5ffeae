"""The benchmark scripts still run and their side-by-side check (identical detections) holds.

Speed is what the scripts print; here they run tiny so only correctness is pinned, not timing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from rknnlaunch.yolo import YoloDecoder
from rknnlaunch.yolo.testing import realistic_frame

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", range(4))
def test_fast_and_straightforward_postprocess_find_identical_detections(seed: int) -> None:
    bench = load("postprocess_bench")
    frame = realistic_frame(np.random.default_rng(seed), objects=30)
    got = bench.canonical(YoloDecoder(bench.CONF, bench.IOU)(frame))
    want = bench.canonical(bench.straightforward(frame))
    assert len(got) == len(want) > 20
    np.testing.assert_array_equal(got.class_ids, want.class_ids)
    np.testing.assert_allclose(got.boxes, want.boxes, atol=1e-3)


def test_benchmark_scripts_run(capsys: pytest.CaptureFixture[str]) -> None:
    load("postprocess_bench").main(["--frames", "2", "--repeat", "3"])
    pytest.importorskip("cv2")
    load("letterbox_bench").main(["--repeat", "5"])
    out = capsys.readouterr().out
    assert "identical detections" in out and "speed-up" in out and "letterbox 1920x1080" in out


def test_decode_bench_runs_every_layout_and_agrees_with_edgefirst(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("decode_bench")
    bench.main(["--frames", "1", "--repeat", "1", "--objects", "5"])
    out = capsys.readouterr().out
    for layout in bench.CASES:
        assert f"\n{layout} " in out
    for case in ("ultralytics", "end2end", "ultralytics-seg"):
        line = next(row for row in out.splitlines() if row.startswith(f"{case} "))
        if "edgefirst-decoder not installed" not in out:  # same detection count on the same tensors
            ours, theirs = line.rsplit(" ", 1)[1].split("/")
            assert ours == theirs
