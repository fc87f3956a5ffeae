"""The bench's `Opener`: its runtimes and detector pools, opened from the one launch plan."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..pipeline import Detector, ModelPipeline
from ..runtime import LaunchPlan, RknnLiteFactory, open_plan
from ..settings import NpuSettings
from ._cases import BenchCase
from ._engine import BenchRuntime, StreamPool


@dataclass(frozen=True)
class PlanOpener:
    """The bench's `Opener`: every runtime and pool opens from the one plan (discovered and
    checked once), on exactly the case's cores."""

    plan: LaunchPlan
    settings: NpuSettings
    pipeline: ModelPipeline
    rknnlite: RknnLiteFactory | None = None

    def open_runtime(self, cores: frozenset[int] | None) -> BenchRuntime:
        case_plan = self.plan if cores is None else dataclasses.replace(self.plan, groups=(cores,))
        return open_plan(case_plan, self.settings.compatible_file, self.rknnlite)[0]

    def open_pool(self, case: BenchCase) -> StreamPool:
        detector: StreamPool = Detector(
            self.plan.model,
            case.cores,
            settings=self.settings,
            rknnlite=self.rknnlite,
            contexts_per_core=case.contexts_per_core,
            workers="process" if case.workers == "process" else "thread",
            conf=self.pipeline.conf,
            iou=self.pipeline.iou,
            pad=self.pipeline.pad_value,
            launch_plan=self.plan,
        )
        return detector
