"""The rknn-toolkit2 seam: the calls `convert` makes, the lazy import with clear errors, and each
stage run with the toolkit's log captured (its errors become `ModelError`s with a fix)."""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from collections.abc import Callable
from typing import Any, Protocol

from .._errors import ModelError, UsageError
from ..runtime import capture_runtime_log
from ._plan import LogSummary, disableable_rule, fix_for, summarise_log, toolkit_frame

INSTALL = "bash scripts/install-toolkit2.sh (in a venv of its own; see the script's header)"


class ToolkitLike(Protocol):
    """What `convert` calls on an `rknn.api.RKNN` instance (rknn-toolkit2 2.x)."""

    def config(self, **kwargs: Any) -> Any: ...

    def load_onnx(self, model: str, inputs: Any = ..., input_size_list: Any = ...) -> int: ...

    def build(self, do_quantization: bool = ..., dataset: str | None = ...) -> int: ...

    def hybrid_quantization_step1(self, dataset: str = ..., proposal: bool = ...) -> int: ...

    def hybrid_quantization_step2(
        self, model_input: str, data_input: str, model_quantization_cfg: str
    ) -> int: ...

    def export_rknn(self, export_path: str) -> int: ...

    def init_runtime(self, target: str | None = ...) -> int: ...

    def inference(self, inputs: list[Any], data_format: str | None = ...) -> list[Any] | None: ...

    def release(self) -> None: ...


ToolkitFactory = Callable[[], ToolkitLike]


def load_toolkit() -> ToolkitFactory:
    """The real `rknn.api.RKNN`, imported only now (it imports torch); `UsageError` with the fix."""
    machine = platform.machine().lower()
    if sys.platform != "linux" or machine not in ("x86_64", "amd64"):
        raise UsageError(
            f"rknn-toolkit2 (the compiler behind `convert`) runs on x86_64 Linux only; this is "
            f"{sys.platform}/{machine}",
            "convert on an x86_64 Linux machine, copy the .rknn to the board, and run "
            "`rknnlaunch validate` there",
        )
    try:
        from rknn.api import RKNN  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise UsageError(f"rknn-toolkit2 is not importable ({exc})", INSTALL) from None
    except Exception as exc:  # a broken install (torch, protobuf or onnx of the wrong version)
        raise UsageError(f"rknn-toolkit2 failed to import: {type(exc).__name__}: {exc}", INSTALL) from None

    def make() -> ToolkitLike:
        instance: ToolkitLike = RKNN(verbose=False)
        return instance

    return make


def toolkit_version() -> str | None:
    try:
        return importlib.metadata.version("rknn-toolkit2")
    except importlib.metadata.PackageNotFoundError:
        return None


class ToolkitRuleError(ModelError):
    """A toolkit stage failed in one of its optimiser rules, which its log says can be disabled."""

    def __init__(self, problem: str, fix: str | None, rule: str) -> None:
        super().__init__(problem, fix)
        self.rule = rule

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.problem, self.fix, self.rule))


class StageRunner:
    """Runs toolkit calls with fd 1/2 captured; keeps every line for the final summary."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self.lines: list[str] = []

    def run(self, stage: str, what: str, call: Callable[[], Any]) -> Any:
        """``call()``; a -1 return or an exception becomes `ModelError` with the toolkit's errors."""
        failure: str | None = None
        frame: str | None = None
        result: Any = None
        with capture_runtime_log(echo=self.verbose) as log:
            try:
                result = call()
            except Exception as exc:  # the toolkit raises bare ValueError/RuntimeError with a traceback text
                failure = (
                    f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
                )
                frame = toolkit_frame(str(exc))
                if frame is not None:
                    failure += f" in its graph optimiser, {frame}"

        self.lines.extend(log.lines)
        if failure is None and isinstance(result, int) and result != 0:
            failure = f"returned {result}"
        if failure is not None:
            summary = summarise_log(log.lines)
            shown = summary.errors[-5:] or (failure,)
            problem = f"rknn-toolkit2 failed to {what} ({failure})\n  toolkit said:\n" + "\n".join(
                f"    {line}" for line in shown
            )
            rule = disableable_rule(log.lines)
            if rule is not None:
                raise ToolkitRuleError(problem, fix_for(summary, stage, frame), rule)
            raise ModelError(problem, fix_for(summary, stage, frame))
        return result

    def summary(self) -> LogSummary:
        return summarise_log(self.lines)
