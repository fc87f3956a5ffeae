"""The committed tiny models are what rknn-toolkit2 writes today (slow; runs in CI's toolkit2 venv).

Rebuilds tests/data/tiny_rknn with its own script and compares what our parser reads from the fresh
files (inputs, outputs, dtypes, layouts, custom strings) with the committed ones: the frame tests
and the fakes derived from those files stay tied to the real toolkit's output.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from rknnlaunch.model._rknnfile import read_rknn

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "data" / "tiny_rknn"


def test_rebuilt_tiny_models_read_as_the_committed_ones(tmp_path: Path) -> None:
    if importlib.util.find_spec("rknn") is None:
        pytest.fail("rknn-toolkit2 is not importable: run this in the toolkit2 venv (.ci/run TOOLKIT2_TESTS)")
    sys.path.insert(0, str(TINY))
    try:
        import build_tiny_models
    finally:
        sys.path.remove(str(TINY))
    build_tiny_models.main_into(tmp_path)
    for name in ("tiny_image_fp16.rknn", "tiny_image_i8.rknn", "tiny_multi.rknn"):
        fresh, committed = read_rknn(tmp_path / name), read_rknn(TINY / name)
        assert (fresh.inputs, fresh.outputs) == (committed.inputs, committed.outputs), name
        assert fresh.custom_string == committed.custom_string
        assert fresh.target_platforms == committed.target_platforms
