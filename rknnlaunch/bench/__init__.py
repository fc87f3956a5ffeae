"""The benchmark engine behind `rknnlaunch bench`: timed cases, statistics, tables, JSON and plots."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._board import PublishedFigure, governor_warnings, published_figure, read_governors
    from ._engine import (
        TABLE_HEADER,
        BenchCase,
        BenchRuntime,
        CaseResult,
        OpenPool,
        OpenRuntime,
        StreamPool,
        plain_table,
        plot,
        pool_case,
        report_json,
        run_cases,
        single_case,
        stream_case,
        table_rows,
    )

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "BenchCase": "._engine",
    "BenchRuntime": "._engine",
    "CaseResult": "._engine",
    "OpenPool": "._engine",
    "OpenRuntime": "._engine",
    "StreamPool": "._engine",
    "TABLE_HEADER": "._engine",
    "plain_table": "._engine",
    "plot": "._engine",
    "pool_case": "._engine",
    "report_json": "._engine",
    "run_cases": "._engine",
    "single_case": "._engine",
    "stream_case": "._engine",
    "table_rows": "._engine",
    "PublishedFigure": "._board",
    "governor_warnings": "._board",
    "published_figure": "._board",
    "read_governors": "._board",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BenchCase",
    "BenchRuntime",
    "CaseResult",
    "OpenPool",
    "OpenRuntime",
    "PublishedFigure",
    "StreamPool",
    "TABLE_HEADER",
    "governor_warnings",
    "plain_table",
    "plot",
    "pool_case",
    "published_figure",
    "read_governors",
    "report_json",
    "run_cases",
    "single_case",
    "stream_case",
    "table_rows",
]
