"""images/probe/make_probe_model.py with the real rknn-toolkit2 (slow; x86_64, in the toolkit's own venv:
``pip install --no-deps -e . && sh images/probe/install-toolkit2.sh 2.3.2``, then ``pytest -m slow`` here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rknnlaunch.model._rknnfile import read_rknn
from rknnlaunch.npu import SOCS, models_compatible

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_real_toolkit_builds_a_probe_model_for_every_soc(tmp_path: Path) -> None:
    pytest.importorskip(
        "rknn.api", reason="rknn-toolkit2 is not installed (images/probe/install-toolkit2.sh)"
    )
    spec = importlib.util.spec_from_file_location(
        "make_probe_model", REPO / "images/probe/make_probe_model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--out", str(tmp_path)]) == 0
    for soc in SOCS:
        info = read_rknn(tmp_path / f"probe-{soc.name}.rknn")
        assert info.target_platforms and models_compatible(info.target_platforms[0], soc), soc.name
        assert [t.shape for t in info.inputs] == [(1, 3, 8, 8)]  # recorded NCHW; the probe feeds NHWC
        assert [t.shape for t in info.outputs] == [(1, 4, 8, 8)]
        assert info.size < 64 * 1024
    assert (tmp_path / "probe-expected.json").is_file()  # what every core must answer
