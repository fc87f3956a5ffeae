"""pytest plugin: the real-thing checks (tests marked `slow`) report loudly, and in CI no skip passes.

Every run that selects slow tests ends with a table of them: ran / passed / failed / skipped and why.
With `--real-checks-strict` (CI's slow step) the run fails when no slow test was selected, or when a
slow test skipped for any reason but the documented opt-out: RKNNLAUNCH_SKIP_REAL_CHECKS, a comma
list of words; a slow test whose id contains one of them is skipped with a reason naming the variable
(e.g. `RKNNLAUNCH_SKIP_REAL_CHECKS=arm64` on a machine without binfmt_misc). Loaded by
tests/conftest.py; tests/test_realchecks.py pins it with pytester.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

OPT_OUT_ENV = "RKNNLAUNCH_SKIP_REAL_CHECKS"
OPT_OUT_REASON = f"opted out by {OPT_OUT_ENV}"
STRICT_OPTION = "--real-checks-strict"


def opted_out_words(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """The words of RKNNLAUNCH_SKIP_REAL_CHECKS (empty when unset)."""
    return [word.strip() for word in environ.get(OPT_OUT_ENV, "").split(",") if word.strip()]


@dataclass
class Outcome:
    """What became of one slow test: the worst phase wins (a failed teardown fails a passed test)."""

    status: str = "not run"
    reason: str = ""

    @property
    def opted_out(self) -> bool:
        return self.status == "skipped" and self.reason.startswith(OPT_OUT_REASON)


class RealChecks:
    """The plugin's state and hooks for one run (registered by `pytest_configure`)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.selected: list[str] = []
        self.outcomes: dict[str, Outcome] = {}

    def record(self, report: pytest.TestReport) -> None:
        outcome = self.outcomes.setdefault(report.nodeid, Outcome())
        if report.failed:
            outcome.status, outcome.reason = "failed", f"{report.when} failed"
        elif report.skipped and outcome.status != "failed":
            outcome.status, outcome.reason = "skipped", skip_reason(report)
        elif report.passed and report.when == "call" and outcome.status == "not run":
            outcome.status = "passed"

    def problems(self) -> list[str]:
        """Why strict mode fails this run (empty: it does not)."""
        if not self.strict:
            return []
        if not self.selected:
            return ["no real-thing check was selected (run with -m slow)"]
        return [
            f"{nodeid} skipped without opt-out: {outcome.reason}"
            for nodeid, outcome in self.outcomes.items()
            if outcome.status == "skipped" and not outcome.opted_out
        ]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # Before the skip marks are evaluated: an opted-out check says so, not why it would skip.
        matched = [word for word in opted_out_words(os.environ) if word in item.nodeid]
        if item.get_closest_marker("slow") is not None and matched:
            pytest.skip(f"{OPT_OUT_REASON}={','.join(matched)}")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected = [item.nodeid for item in session.items if item.get_closest_marker("slow") is not None]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "slow" in report.keywords:  # a slow item's keywords carry its marker's name
            self.record(report)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.problems() and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.selected and not self.strict:
            return
        write = terminalreporter.write_line
        terminalreporter.section("real-thing checks (tests marked slow)")
        counts: dict[str, int] = {}
        for nodeid in self.selected:
            outcome = self.outcomes.get(nodeid, Outcome())
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
            why = f"  ({outcome.reason})" if outcome.reason and outcome.status != "passed" else ""
            write(f"{outcome.status:<8} {nodeid}{why}")
        ran = counts.get("passed", 0) + counts.get("failed", 0)
        opted = sum(1 for outcome in self.outcomes.values() if outcome.opted_out)
        write(
            f"{len(self.selected)} selected: {ran} ran ({counts.get('passed', 0)} passed, "
            f"{counts.get('failed', 0)} failed), {counts.get('skipped', 0)} skipped ({opted} opted out "
            f"by {OPT_OUT_ENV}), {counts.get('not run', 0)} not run"
        )
        for problem in self.problems():
            write(f"FAIL (strict): {problem}", red=True, bold=True)


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        STRICT_OPTION,
        action="store_true",
        help=f"fail the run when a slow (real-thing) check skips without {OPT_OUT_ENV}, or none ran",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(RealChecks(strict=bool(config.getoption(STRICT_OPTION))), "realchecks-run")
