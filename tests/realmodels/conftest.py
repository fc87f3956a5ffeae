"""Prints the corpus table (validate on the replayed simulator outputs vs the ONNX) after the run."""

from __future__ import annotations

import pytest
from realmodels.corpus import CORPUS, cache_root
from realmodels.replay import VALIDATE_ROWS


def corpus_table() -> list[str]:
    lines = [
        f"{'model':<22} {'build':<12} {'agreement':>9} {'mean IoU':>8} {'cos min':>8}  verdict  likely cause"
    ]
    for row in VALIDATE_ROWS:
        iou = "-" if row["mean_iou"] is None else f"{row['mean_iou']:.3f}"
        lines.append(
            f"{row['model']:<22} {row['build']:<12} {row['agreement']:>9.3f} {iou:>8} "
            f"{row['cosine_min']:>8.4f}  {row['verdict']:<7}  {row['likely_cause'] or '-'}"
        )
        if row.get("diagnosis"):
            lines.append(f"{'':<22} {'':<12} our reading: {row['diagnosis']}")
    for model in CORPUS:
        if model.unbuildable:
            lines.append(f"{model.name:<22} not built: {model.unbuildable}")
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not VALIDATE_ROWS:
        return
    lines = corpus_table()
    terminalreporter.section("corpus: validate on the replayed simulator outputs vs the ONNX on onnxruntime")
    for line in lines:
        terminalreporter.write_line(line)
    report = cache_root() / "report.txt"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines) + "\n")
    terminalreporter.write_line(f"(also in {report})")
