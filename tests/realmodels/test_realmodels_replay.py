"""The real-model corpus through every user path, on outputs recorded from Rockchip's simulator.

Recordings come from tests/realmodels/record.py (rknn-toolkit2's venv, run first by .ci/run's slow
step); here, in the project's own venv, `ReplayRKNNLite` stands in for RKNNLite and answers each
input tensor with the simulator's outputs for it. Pinned: `Pool` returns exactly those outputs,
`Detector` / `rknnlaunch detect` exactly their decode; `bench` runs; `validate` against the ONNX on
onnxruntime reports the same agreement the simulator run did, fp16 builds agree >= 0.95, and every
build's agreement, verdict and likely cause is printed as a table (also written to
``<cache>/corpus/report.txt``). Missing recordings fail in strict mode (CI), and skip, loudly,
elsewhere. The shipped third-party .rknn files no simulator runs (BERT, nozcam) are
tests/sdk/test_sdk_real_models.py's.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from realchecks import STRICT_OPTION
from realmodels.corpus import CORPUS, by_name, cache_root, local_path, sha256_file
from realmodels.replay import VALIDATE_ROWS, Recording, ReplayNpu, input_key

from fakehost import write
from rknnlaunch.npu import HostRoot
from rknnlaunch.settings._env import NpuSettings, load_settings

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

MODELS = [model.name for model in CORPUS if not model.unbuildable]
BUILT = [(name, build) for name in MODELS for build in ("fp16", "int8")]
FP16_MIN_AGREEMENT = 0.95


def missing(request: pytest.FixtureRequest, what: str) -> None:
    message = f"{what}: run python tests/realmodels/record.py in the rknn-toolkit2 venv first (.ci/run does)"
    if request.config.getoption(STRICT_OPTION):
        pytest.fail(f"no recording: {message}")
    pytest.skip(f"no recording: {message}")


def load(request: pytest.FixtureRequest, name: str, build: str) -> Recording:
    index = cache_root() / "recordings" / f"{name}-{build}.json"
    if not index.is_file():
        missing(request, f"{name} {build} ({index})")
    folder = Path(json.loads(index.read_text())["folder"])
    if not (folder / "manifest.json").is_file():
        missing(request, f"{name} {build} ({folder})")
    return Recording.load(folder)


@pytest.fixture(params=BUILT, ids=[f"{name}-{build}" for name, build in BUILT])
def recording(request: pytest.FixtureRequest) -> Recording:
    """Every build of every model (Pool, Detector, validate)."""
    name, build = request.param
    return load(request, name, build)


@pytest.fixture(params=MODELS)
def fp16_recording(request: pytest.FixtureRequest) -> Recording:
    """One build per model, for the commands whose output does not depend on the build (detect, bench)."""
    return load(request, request.param, "fp16")


@pytest.fixture
def settings(host_factory: Callable[[str], HostRoot]) -> NpuSettings:
    host = host_factory("rk3588-drm")
    write(
        Path(host.root),
        "/usr/lib/librknnrt.so",
        b"\x7fELF\0librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)\0",
    )
    return load_settings({"RKNNLAUNCH_ROOT": str(host.root)})


def photos(recording: Recording) -> Path:
    return cache_root() / "photos"


def onnx_of(recording: Recording) -> Path:
    path = local_path(by_name(recording.manifest["model"]))
    assert sha256_file(path) == recording.manifest["onnx_sha256"]
    return path


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_pool_returns_exactly_the_recorded_outputs(
    recording: Recording, settings: NpuSettings, workers: str
) -> None:
    from rknnlaunch import Pool

    keys = list(recording.sources("detector:"))
    assert keys, "the recording has no Detector frames"
    assert all(input_key(recording.inputs[key]) == key for key in keys), "a stored input is not its key's"
    with Pool(
        recording.model, settings=settings, rknnlite=ReplayNpu(str(recording.folder)), workers=workers
    ) as pool:  # type: ignore[arg-type]
        results = list(pool.map(recording.inputs[key][0] for key in keys))
    for key, outputs in zip(keys, results, strict=True):
        expected = recording.outputs[key]
        assert [o.shape for o in outputs] == [e.shape for e in expected]
        assert all(np.array_equal(o, e) for o, e in zip(outputs, expected, strict=True)), key


def same(found: Any, expected: Any) -> bool:
    for field in ("boxes", "scores", "class_ids", "masks", "keypoints", "angles"):
        a, b = getattr(found, field), getattr(expected, field)
        if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
            return False
    return True


def expected_detections(recording: Recording, image: np.ndarray) -> Any:
    """The decode of the recorded outputs for the tensor Detector makes of ``image``."""
    from rknnlaunch.pipeline._spec import ModelPipeline

    boxer, decoder = ModelPipeline.for_model(recording.model).stages()
    tensor, info = boxer(image)
    key = input_key([tensor])
    assert key in recording.outputs, "Detector's letterbox made a tensor the recording does not have"
    return decoder(recording.outputs[key], info)


def test_detector_returns_exactly_the_decode_of_the_recorded_outputs(
    recording: Recording, settings: NpuSettings
) -> None:
    import cv2

    from rknnlaunch import Detector

    images = [
        cv2.imread(str(photos(recording) / name), cv2.IMREAD_COLOR) for name in recording.manifest["photos"]
    ]
    factory = ReplayNpu(str(recording.folder))
    with Detector(recording.model, settings=settings, rknnlite=factory, workers="process") as detector:  # type: ignore[arg-type]
        found = [detector(image) for image in images]
    for name, image, result in zip(recording.manifest["photos"], images, found, strict=True):
        assert same(result, expected_detections(recording, image)), name


def test_detect_cli_prints_the_decode_of_the_recorded_outputs(
    fp16_recording: Recording, settings: NpuSettings, tmp_path: Path
) -> None:
    recording = fp16_recording
    import cv2

    from rknnlaunch.cli import _detect
    from rknnlaunch.cli._main import build_parser

    image = photos(recording) / recording.manifest["photos"][0]
    report = tmp_path / "found.json"
    args = build_parser("detect").parse_args(
        ["detect", "--model", str(recording.model), str(image), "--json"]
    )
    out = io.StringIO()
    assert _detect.execute(args, settings, ReplayNpu(str(recording.folder)), out) == 0  # type: ignore[arg-type]
    report.write_text(out.getvalue())
    rows = json.loads(report.read_text())["detections"]
    expected = expected_detections(recording, cv2.imread(str(image), cv2.IMREAD_COLOR))
    wanted = expected.to_json(decimals=1)["detections"]
    assert [(r["box"], r["score"], r["class_id"]) for r in rows] == [
        (r["box"], r["score"], r["class_id"]) for r in wanted
    ]


def test_bench_runs_on_the_recorded_model(
    fp16_recording: Recording, settings: NpuSettings, tmp_path: Path
) -> None:
    recording = fp16_recording
    from rknnlaunch.cli import _bench
    from rknnlaunch.cli._main import build_parser

    report = tmp_path / "bench.json"
    args = build_parser("bench").parse_args(
        [
            "bench",
            "--model",
            str(recording.model),
            "--no-progress",
            "-n",
            "3",
            "--warmup",
            "1",
            "--json",
            str(report),
        ]
    )
    out = io.StringIO()
    assert _bench.execute(args, settings, ReplayNpu(str(recording.folder)), out) == 0, out.getvalue()  # type: ignore[arg-type]
    assert json.loads(report.read_text())["cases"], out.getvalue()


def blind_table(model: Path) -> str | None:
    """Ours, beside validate's cause: the model's own warning about an int8 [1, C, N] table (boxes
    and scores in one int8 scale), from `read_rknn().warnings()`."""
    from rknnlaunch.model._rknnfile import read_rknn

    return next((problem for problem, _fix in read_rknn(model).warnings()), None)


def test_validate_agrees_with_the_onnx_as_on_the_simulator(
    recording: Recording, settings: NpuSettings, tmp_path: Path, table: list[dict[str, Any]]
) -> None:
    from rknnlaunch.cli import _validate
    from rknnlaunch.cli._main import build_parser

    report = tmp_path / "validate.json"
    argv = ["validate", str(recording.model), "--reference", str(onnx_of(recording))]
    args = build_parser("validate").parse_args(
        [*argv, "--images", str(photos(recording)), "--json", str(report)]
    )
    out = io.StringIO()
    code = _validate.execute(args, settings, ReplayNpu(str(recording.folder)), out)  # type: ignore[arg-type]
    print(out.getvalue())
    doc = json.loads(report.read_text())
    simulator = json.loads((recording.folder / "validate-simulator.json").read_text())
    total = doc["total"]
    table.append(
        {
            "model": recording.manifest["model"],
            "build": recording.manifest["quantization"],
            "agreement": total["agreement"],
            "mean_iou": total["mean_iou"],
            "cosine_min": min(o["cosine_min"] for o in total["outputs"]),
            "verdict": "PASS" if code == 0 else "FAIL",
            "diagnosis": blind_table(recording.model),
            "likely_cause": next(
                (
                    line.removeprefix("likely cause: ")
                    for line in out.getvalue().splitlines()
                    if line.startswith("likely cause: ")
                ),
                None,
            ),
        }
    )
    assert total == simulator["total"], "replayed validate differs from the simulator's own run"
    if recording.manifest["build"] == "fp16":
        assert total["agreement"] >= FP16_MIN_AGREEMENT, out.getvalue()


@pytest.fixture
def table() -> list[dict[str, Any]]:
    """validate's figures per build; tests/realmodels/conftest.py prints them at the end of the run."""
    return VALIDATE_ROWS
