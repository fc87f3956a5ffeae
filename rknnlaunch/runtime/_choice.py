"""`choose_contexts`: the pure decision of backend, core groups and contexts (no discovery, no file reads).

Everything it needs is handed in by the edge (`open()`, `Pool`): the requested backend, the model's
kind (from its name), the discovered NPU or the discovery error, the requested cores and the layout.
A table test pins it (tests/sdk/test_sdk_choice.py), like the device plugin's allocation policy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .._errors import DiscoveryError, MaskError, ModelError, UsageError
from ..npu import rknnlite_mask, runnable_groups
from ..settings import NpuTarget, requested_cores, select_cores
from ._frames import InputSpec

BACKENDS: tuple[str, ...] = ("auto", "npu", "cpu")
Layout = Literal["one", "per-core"]
"""``one``: a single context over the chosen cores (`open`, the latency path); ``per-core``: one
context per core (`Pool`, the throughput path), ``contexts_per_core`` times."""
CONTEXTS_PER_CORE: tuple[int, ...] = (1, 2)


@dataclass(frozen=True)
class LaunchPlan:
    """What to open: the CPU (with why) or NPU contexts, one per entry of ``groups``.

    ``model`` is the file as requested; for the CPU the edge swaps in the ONNX file to load.
    """

    backend: str
    model: Path
    cpu_reason: str | None = None
    cpu_detail: str | None = None
    target: NpuTarget | None = None
    groups: tuple[frozenset[int], ...] = ()
    inputs: tuple[InputSpec, ...] = ()
    """The .rknn's inputs as the runtime exchanges them (filled by the edge from the header; empty
    for the CPU, whose runtime reads them from the ONNX session)."""


def model_kind(model: Path) -> str:
    """``rknn``, ``onnx`` or ``other``, by the file's suffix."""
    suffix = model.suffix.lower()
    return suffix[1:] if suffix in (".rknn", ".onnx") else "other"


def choose_contexts(
    backend: str,
    model: Path,
    npu: NpuTarget | DiscoveryError,
    cores: Iterable[int] | str | None,
    layout: Layout,
    contexts_per_core: int = 1,
) -> LaunchPlan:
    """Decide the backend and the NPU contexts to open, from what the edge found.

    ``npu`` is the discovered NPU, or the `DiscoveryError` discovery raised (then ``auto`` falls back
    to the CPU and ``npu`` re-raises it). Raises `UsageError`/`MaskError`/`ModelError` for requests
    that cannot be met, naming what to change.
    """
    if backend not in BACKENDS:
        raise UsageError(f"backend={backend!r} is not a backend", "use 'auto', 'npu' or 'cpu'")
    if contexts_per_core not in CONTEXTS_PER_CORE:
        raise UsageError(
            f"contexts_per_core={contexts_per_core!r} is not supported",
            "use 1 (one context per core) or 2 (two per core keep a core busy while the other "
            "context's frame is converted)",
        )
    requested_cores(cores)  # its form, on every backend: cores="banana" fails on the CPU too
    if backend == "cpu":
        if cores is not None:
            raise UsageError("cores= was given with backend='cpu'", "drop cores= or use backend='npu'")
        return LaunchPlan("cpu", model, "backend='cpu' requested")
    if model_kind(model) == "onnx" and cores is not None:
        raise UsageError(
            f"cores= selects NPU cores, but {model} is an ONNX model, which runs on the CPU",
            "drop cores=, or pass the model's .rknn export to run it on those NPU cores",
        )
    if isinstance(npu, DiscoveryError):
        if backend == "npu":
            raise npu
        return LaunchPlan("cpu", model, "no NPU found", cpu_detail=npu.problem)
    if model_kind(model) == "onnx":
        if backend == "npu":
            raise ModelError(
                f"the NPU runs .rknn models; {model} is an ONNX model",
                "convert it with rknn-toolkit2 (load_onnx, build, export_rknn), or use backend='cpu'",
            )
        return LaunchPlan("cpu", model, "model is ONNX (the NPU needs its .rknn export)")
    allocation = npu.allocation
    chosen = select_cores(allocation, cores)
    if layout == "one":
        try:
            rknnlite_mask(allocation.soc, chosen, allocation.core_count)
        except MaskError as exc:
            raise MaskError(exc.problem, _one_context_fix(exc.fix, allocation.claim, len(chosen))) from None
        groups: tuple[frozenset[int], ...] = (chosen,)
    elif allocation.soc.core_mask_settable:
        groups = tuple(frozenset({core}) for core in sorted(chosen))
    else:  # single-core NPUs take only mask 0: one context for the whole NPU
        groups = runnable_groups(allocation.soc, chosen, allocation.core_count)
    if layout == "per-core":
        # Round-robin order: the first contexts started land on different cores.
        groups = groups * contexts_per_core
    return LaunchPlan("npu", model, target=npu, groups=groups)


def _one_context_fix(fix: str | None, claim: str | None, count: int) -> str:
    """The fix of a core set one context refuses; from a DRA claim, the claim shape that cannot get it."""
    fix = f"{fix}; rknnlaunch.Pool does that for you"
    if claim is None:
        return fix
    namespace, _, rest = claim.partition("/")
    name = rest.partition("/")[0]
    return (
        f"{fix}; or ask the ResourceClaim ({namespace}/{name}) for {count} cores as one context: "
        f"count: {count} of deviceClassName core.npu.rockchip.com with constraints: "
        "[{matchAttribute: npu.rockchip.com/coreGroup}] (deploy/dra/samples/two-rk3588-cores.yaml)"
    )
