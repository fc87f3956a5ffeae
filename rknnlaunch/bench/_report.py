"""The bench's report: one object for the results and their context, as JSON, table, notes and plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..npu import format_cores
from ._board import PublishedFigure
from ._engine import STAGES, CaseResult

SCHEMA = "rknnlaunch.bench/2"
TABLE_HEADER = [
    "case",
    "FPS",
    "efficiency",
    "pre ms p50/p90/p99",
    "infer ms p50/p90/p99",
    "post ms p50/p90/p99",
    "total ms p50/p90/p99",
    "dets",
]
EFFICIENCY_NOTE = (
    "efficiency = a pool's FPS / the sum of the single-core cases' FPS (100%: every core kept busy)"
)
NO_EFFICIENCY_NOTE = "efficiency is blank: {why}"
NO_POOL = (
    "no pool here to compare with the single-core cases (pools run on an NPU with 2+ cores; "
    "--no-pool skips them)"
)
NO_SINGLE_CORE = "no single-core case ran to compare the pools with"


def efficiencies(results: Sequence[CaseResult]) -> dict[str, float]:
    """Pool FPS / the sum of the single-core cases' FPS, for each pool case (the NPU's limit is the
    sum of what each core does alone; 1.0 = every core kept as busy as it can be)."""
    single = sum(
        r.fps
        for r in results
        if r.case.kind == "single" and r.case.cores and len(r.case.cores) == 1 and not r.error
    )
    if single <= 0:
        return {}
    return {r.case.name: r.fps / single for r in results if r.case.kind != "single" and r.error is None}


def case_json(result: CaseResult, efficiency: float | None = None) -> dict[str, Any]:
    """One case of the JSON report (see `BenchReport.to_json`)."""
    case = result.case
    return {
        "name": case.name,
        "kind": case.kind,
        "cores": None if case.cores is None else sorted(case.cores),
        "instances": [sorted(cores) for cores in case.instances],
        "threads": case.threads,
        "workers": case.workers if case.kind == "stream" else "thread",
        "contexts_per_core": case.contexts_per_core,
        "label": result.label,
        "error": result.error,
        "warmup_iterations": len(result.warmup_ns),
        "iterations": result.iterations,
        "wall_ns": result.wall_ns,
        "fps": result.fps,
        "efficiency": efficiency,
        "detections_last_frame": result.detections,
        "stats": result.stats(),
        "raw_ns": {name: list(result.stage(name)) for name in STAGES} | {"warmup": list(result.warmup_ns)},
    }


def _frames(count: int) -> str:
    """``1 frame``, ``3 frames``."""
    return f"{count} frame" if count == 1 else f"{count} frames"


def _ms(value: float) -> str:
    """Three significant digits or so: 0.412, 12.4, 703."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


@dataclass(frozen=True)
class BenchReport:
    """The results of one bench run and what they were measured on.

    ``context`` is the JSON document's context (backend, host, npu, runtime, model, image,
    settings...); ``label`` and ``model_name`` title the table and plot."""

    results: list[CaseResult]
    context: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    model_name: str = ""
    iterations: int = 0
    published: PublishedFigure | None = None

    @property
    def failed(self) -> bool:
        return any(result.error is not None for result in self.results)

    @property
    def exit_code(self) -> int:
        """0 when every case ran, 1 when one failed (its line says why)."""
        return 1 if self.failed else 0

    @property
    def title(self) -> str:
        return f"{self.label} - {self.model_name} - p50/p90/p99 per stage, warm-up excluded"

    def to_json(self) -> dict[str, Any]:
        """The `--json` document: ``schema``, the context, and one entry per case under ``cases``."""
        shares = efficiencies(self.results)
        cases = [case_json(result, shares.get(result.case.name)) for result in self.results]
        return {"schema": SCHEMA, **self.context, "cases": cases}

    def table_rows(self) -> list[list[str]]:
        """Rows of the end-of-run table: case, FPS, efficiency, p50/p90/p99 of each stage in ms, dets."""
        rows = []
        shares = efficiencies(self.results)
        for result in self.results:
            if result.error is not None:
                rows.append([result.case.name, "failed", "", result.error.splitlines()[0]])
                continue
            stats = result.stats()
            share = shares.get(result.case.name)
            row = [result.case.name, f"{result.fps:.1f}", "" if share is None else f"{share:.0%}"]
            for name in STAGES:
                s = stats[name]
                row.append("/".join(_ms(s[key]) for key in ("p50_ms", "p90_ms", "p99_ms")))
            row.append(str(result.detections))
            rows.append(row)
        return rows

    def plain_table(self) -> str:
        """The table as aligned plain text (when rich is not installed)."""
        rows = [TABLE_HEADER, *self.table_rows()]
        widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(len(TABLE_HEADER))]
        return "\n".join(
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
        )

    def notes(self) -> list[str]:
        """The lines under the table: each case's runtime and warm-up (or why it failed), what the
        efficiency column means (or why it is blank), and the published figure beside ours."""
        lines = []
        for result in self.results:
            if result.error is not None:
                lines.append(f"  {result.case.name} failed: {result.error}")
            elif result.warmup_ns:
                lines.append(
                    f"  {result.case.name}: {result.label}; warm-up {_frames(len(result.warmup_ns))} "
                    f"(first {result.warmup_ns[0] / 1e6:.1f} ms)"
                )
            else:
                lines.append(f"  {result.case.name}: {result.label}; no warm-up")
        lines.append(f"  {self._efficiency_note()}")
        if self.published is not None:
            lines.append(self._published_line(self.published))
        return lines

    def _efficiency_note(self) -> str:
        if efficiencies(self.results):
            return EFFICIENCY_NOTE
        pools = any(result.case.kind != "single" for result in self.results)
        return NO_EFFICIENCY_NOTE.format(why=NO_SINGLE_CORE if pools else NO_POOL)

    def _published_line(self, published: PublishedFigure) -> str:
        """The published single-core figure beside ours (inference only, from each core's p50)."""
        ours = [
            f"core {format_cores(r.case.cores)} {1000 / r.stats()['infer']['p50_ms']:.1f}"
            for r in self.results
            if r.case.kind == "single"
            and r.case.cores
            and len(r.case.cores) == 1
            and r.error is None
            and r.iterations
            if r.stats()["infer"]["p50_ms"] > 0
        ]
        here = "; here (inference only, 1000 / p50): " + ", ".join(ours) if ours else ""
        figure = f"{published.single_core_fps} FPS per core ({published.source})"
        return f"  published {published.model} on {published.soc}: {figure}{here}"

    def plot(self, path: str) -> None:
        """Write a PNG: total-latency distribution per case (left) and throughput per case (right)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        title = f"{self.label} - {self.model_name} - {self.iterations} timed frames per case"
        ok = [r for r in self.results if r.error is None and r.iterations]
        colours = ["tab:blue" if r.case.kind == "single" else "tab:orange" for r in ok]
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
        try:
            names = [r.case.name for r in ok]
            if ok:
                data = [np.asarray(r.total_ns, np.float64) / 1e6 for r in ok]
                parts = left.violinplot(data, showmedians=True, showextrema=True)
                for body, colour in zip(parts["bodies"], colours, strict=True):
                    body.set_facecolor(colour)
                    body.set_alpha(0.6)
                infer = [np.median(np.asarray(r.infer_ns, np.float64) / 1e6) for r in ok]
                left.scatter(
                    range(1, len(ok) + 1),
                    infer,
                    marker="_",
                    s=300,
                    color="black",
                    zorder=3,
                    label="infer p50",
                )
                left.legend(loc="upper left", fontsize=8)
                left.set_xticks(range(1, len(ok) + 1), names, rotation=20, ha="right")
                bars = right.bar(range(len(ok)), [r.fps for r in ok], color=colours)
                right.bar_label(bars, fmt="%.1f", fontsize=8)
                right.set_xticks(range(len(ok)), names, rotation=20, ha="right")
            else:
                left.text(0.5, 0.5, "no successful case", ha="center", va="center", transform=left.transAxes)
            left.set_ylabel("latency per frame, ms (pre + infer + post)")
            left.set_title("latency distribution")
            left.set_ylim(bottom=0)
            left.grid(axis="y", alpha=0.3)
            right.set_ylabel("frames per second")
            right.set_title(self.throughput_title(ok))
            right.grid(axis="y", alpha=0.3)
            fig.suptitle(title, fontsize=10)
            fig.tight_layout()
            fig.savefig(path, dpi=110)
        finally:
            plt.close(fig)

    @staticmethod
    def throughput_title(plotted: Sequence[CaseResult]) -> str:
        """Names the colours only when both are on the plot (no orange on the CPU: no pool there)."""
        kinds = {result.case.kind == "single" for result in plotted}
        return (
            "throughput (single runtime in blue, pool in orange)" if kinds == {True, False} else "throughput"
        )
