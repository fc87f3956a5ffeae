"""`choose_contexts`: the backend/contexts decision as a table (no discovery, no files inside it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rknnlaunch import DiscoveryError, MaskError, ModelError, NpuNotFoundError, UsageError
from rknnlaunch.npu import HostRoot, discover
from rknnlaunch.runtime._choice import LaunchPlan, choose_contexts
from rknnlaunch.settings._allocation import NpuTarget, resolve_allocation
from rknnlaunch.settings._env import load_settings

HostFactory = Callable[[str], HostRoot]
NO_NPU = NpuNotFoundError("no rknpu device node under /dev", "run on an RK3588/RK3576/RK356x node")


def target(host: HostRoot, **env: str) -> NpuTarget:
    """The edge's work, done once per row: discover the fixture host and resolve the allocation."""
    info = discover(host)
    return NpuTarget(host, info, resolve_allocation(load_settings(env), info))


# backend, model, host ("" = discovery failed), env, cores, layout, contexts/core -> backend, groups/reason
TABLE: list[tuple[str, str, str, dict[str, str], object, str, int, str, object]] = [
    # the throughput path: one context per core, round robin for 2 per core
    ("auto", "m.rknn", "rk3588-drm", {}, None, "per-core", 1, "npu", [{0}, {1}, {2}]),
    ("auto", "m.rknn", "rk3588-drm", {}, None, "per-core", 2, "npu", [{0}, {1}, {2}, {0}, {1}, {2}]),
    ("npu", "m.rknn", "rk3588-drm", {"RKNN_NPU_CORE_MASK": "5"}, None, "per-core", 1, "npu", [{0}, {2}]),
    ("auto", "m.rknn", "rk3588-drm", {"RKNN_NPU_CORES": "1"}, None, "per-core", 2, "npu", [{1}, {1}]),
    ("auto", "m.rknn", "rk3588-drm", {}, [0, 1], "per-core", 1, "npu", [{0}, {1}]),
    ("auto", "m.rknn", "rk3576", {}, None, "per-core", 1, "npu", [{0}, {1}]),
    # single-core NPUs take only mask 0: one context
    ("auto", "m.rknn", "rk3568", {}, None, "per-core", 1, "npu", [{0}]),
    # ...and with 2 per core (watch's default), two contexts on that one core, never an error
    ("auto", "m.rknn", "rk3568", {}, None, "per-core", 2, "npu", [{0}, {0}]),
    # the latency path: one context over the chosen cores
    ("auto", "m.rknn", "rk3588-drm", {}, None, "one", 1, "npu", [{0, 1, 2}]),
    ("npu", "m.rknn", "rk3588-drm", {"RKNN_NPU_CORE_MASK": "3"}, None, "one", 1, "npu", [{0, 1}]),
    ("auto", "m.rknn", "rk3588-drm", {}, "2", "one", 1, "npu", [{2}]),
    # the CPU, and why
    ("cpu", "m.rknn", "rk3588-drm", {}, None, "per-core", 1, "cpu", "backend='cpu' requested"),
    # the CPU opens one session whatever contexts_per_core says (watch's default 2 included)
    ("cpu", "m.rknn", "rk3588-drm", {}, None, "per-core", 2, "cpu", "backend='cpu' requested"),
    ("auto", "m.rknn", "", {}, None, "per-core", 2, "cpu", "no NPU found"),
    ("auto", "m.rknn", "", {}, None, "per-core", 1, "cpu", "no NPU found"),
    (
        "auto",
        "m.onnx",
        "rk3588-drm",
        {},
        None,
        "one",
        1,
        "cpu",
        "model is ONNX (the NPU needs its .rknn export)",
    ),
    ("cpu", "m.onnx", "", {}, None, "one", 1, "cpu", "backend='cpu' requested"),
]


@pytest.mark.parametrize(
    ("backend", "model", "host_name", "env", "cores", "layout", "per_core", "want_backend", "want"), TABLE
)
def test_choose_contexts_table(
    host_factory: HostFactory,
    backend: str,
    model: str,
    host_name: str,
    env: dict[str, str],
    cores: object,
    layout: str,
    per_core: int,
    want_backend: str,
    want: object,
) -> None:
    npu: NpuTarget | DiscoveryError = target(host_factory(host_name), **env) if host_name else NO_NPU
    chosen = choose_contexts(backend, Path(model), npu, cores, layout, per_core)  # type: ignore[arg-type]
    assert isinstance(chosen, LaunchPlan) and chosen.backend == want_backend
    if want_backend == "npu":
        assert [set(group) for group in chosen.groups] == want
        assert chosen.target is npu and chosen.cpu_reason is None
    else:
        assert chosen.cpu_reason == want and chosen.groups == ()
        assert chosen.model == Path(model)  # the edge swaps in the .onnx file, not the decision


# backend, model, host, env, cores, layout, contexts/core -> error type, message pattern
REFUSALS: list[tuple[str, str, str, dict[str, str], object, str, int, type[Exception], str]] = [
    ("gpu", "m.rknn", "rk3588-drm", {}, None, "one", 1, UsageError, "not a backend"),
    ("auto", "m.rknn", "rk3588-drm", {}, None, "per-core", 3, UsageError, "contexts_per_core=3"),
    ("npu", "m.rknn", "", {}, None, "per-core", 1, NpuNotFoundError, "no rknpu device"),
    ("npu", "m.onnx", "rk3588-drm", {}, None, "one", 1, ModelError, "the NPU runs .rknn models"),
    ("cpu", "m.rknn", "rk3588-drm", {}, [0], "one", 1, UsageError, "cores= was given with backend='cpu'"),
    ("auto", "m.rknn", "rk3588-drm", {"RKNN_NPU_CORE_MASK": "5"}, None, "one", 1, MaskError, "Pool"),
    # From a DRA claim (e.g. `rockchip.com/npu: 2` got cores 0,2): the error names the claim shape to ask.
    (
        "auto",
        "m.rknn",
        "rk3588-drm",
        {"RKNN_NPU_CORE_MASK": "5", "RKNN_NPU_CLAIM": "vision/det-npu/0b9a6f44"},
        None,
        "one",
        1,
        MaskError,
        r"ResourceClaim \(vision/det-npu\) for 2 cores as one context.*npu.rockchip.com/coreGroup",
    ),
    ("auto", "m.rknn", "rk3588-drm", {"RKNN_NPU_CORES": "1"}, [0], "per-core", 1, MaskError, "not available"),
]


@pytest.mark.parametrize(
    ("backend", "model", "host_name", "env", "cores", "layout", "per_core", "error", "pattern"), REFUSALS
)
def test_choose_contexts_refusals(
    host_factory: HostFactory,
    backend: str,
    model: str,
    host_name: str,
    env: dict[str, str],
    cores: object,
    layout: str,
    per_core: int,
    error: type[Exception],
    pattern: str,
) -> None:
    npu: NpuTarget | DiscoveryError = target(host_factory(host_name), **env) if host_name else NO_NPU
    with pytest.raises(error, match=pattern):
        choose_contexts(backend, Path(model), npu, cores, layout, per_core)  # type: ignore[arg-type]
