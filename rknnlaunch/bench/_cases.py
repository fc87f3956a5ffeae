"""The bench's cases: what to measure for an allocation (a pure plan, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..npu import format_cores, runnable_core_sets
from ..settings import Allocation


@dataclass(frozen=True)
class BenchCase:
    """One thing to measure: a single runtime on a core set, a pool of per-core runtimes driven by
    bench threads (``pool``), or a `rknnlaunch.Detector` whose workers run every stage (``stream``)."""

    name: str
    kind: Literal["single", "pool", "stream"]
    cores: frozenset[int] | None
    """The cores of the single runtime (None: CPU), or all cores of the pool."""
    instances: tuple[frozenset[int], ...] = ()
    """Pool and stream: the core set of each context (one per core, or two)."""
    threads: int = 1
    workers: str = "thread"
    """Stream only: ``thread`` or ``process`` workers."""
    contexts_per_core: int = 1


def single_case(cores: frozenset[int] | None) -> BenchCase:
    name = "cpu" if cores is None else f"cores {format_cores(cores)}"
    return BenchCase(name, "single", cores)


def pool_case(cores: frozenset[int], threads: int | None = None) -> BenchCase:
    """One runtime per core of ``cores``, driven by ``threads`` threads (default: one per runtime)."""
    instances = tuple(frozenset({core}) for core in sorted(cores))
    count = threads if threads is not None else len(instances)
    return BenchCase(f"pool {format_cores(cores)} x{count}t", "pool", frozenset(cores), instances, count)


def stream_case(cores: frozenset[int], workers: str = "thread", contexts_per_core: int = 1) -> BenchCase:
    """A `Detector` over ``cores``: one worker per context, every stage inside the workers."""
    instances = tuple(frozenset({core}) for core in sorted(cores)) * contexts_per_core
    how = "processes" if workers == "process" else f"x{contexts_per_core}/core"
    return BenchCase(
        f"pool {format_cores(cores)} {how}",
        "stream",
        frozenset(cores),
        instances,
        len(instances),
        workers,
        contexts_per_core,
    )


def plan_cases(
    allocation: Allocation | None,
    *,
    threads: int | None = None,
    pools: bool = True,
    process_pool: bool = True,
) -> list[BenchCase]:
    """The cases for ``allocation`` (None: the CPU backend, one case): every core set one context
    can run within it, then (when the SoC takes a core mask and ``pools``) a pool of one runtime
    per core driven by ``threads`` threads (default one per core; only with 2+ cores), a
    `Detector` with worker processes (``process_pool``) and one with 2 contexts per core."""
    if allocation is None:
        return [single_case(None)]
    cores = allocation.cores
    cases = [
        single_case(core_set)
        for core_set in runnable_core_sets(allocation.soc, allocation.core_count, within=cores)
    ]
    if pools and allocation.soc.core_mask_settable:
        if len(cores) > 1:
            cases.append(pool_case(cores, threads if threads is not None else len(cores)))
        if process_pool:
            cases.append(stream_case(cores, "process"))
        cases.append(stream_case(cores, "thread", contexts_per_core=2))
    return cases
