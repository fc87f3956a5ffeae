"""The real-thing checks' plugin (tests/realchecks.py): a table always, and no silent skip in strict mode."""

from __future__ import annotations

import pytest

SUITE = """
import pytest

@pytest.mark.slow
def test_arm64_toolkit_imports():
    pass

@pytest.mark.slow
@pytest.mark.skipif(True, reason="runc is not installed")
def test_runc_takes_the_allocate_answer():
    pass

def test_fast():
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("RKNNLAUNCH_SKIP_REAL_CHECKS", raising=False)
    pytester.makeini("[pytest]\nmarkers =\n    slow: real-thing checks\n")
    pytester.makepyfile(test_checks=SUITE)
    return pytester


def test_strict_run_fails_on_a_skip_without_opt_out_and_says_why(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "realchecks", "-m", "slow", "--real-checks-strict")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*real-thing checks (tests marked slow)*",
            "passed   test_checks.py::test_arm64_toolkit_imports",
            "skipped  test_checks.py::test_runc_takes_the_allocate_answer  (runc is not installed)",
            "2 selected: 1 ran (1 passed, 0 failed), 1 skipped (0 opted out by RKNNLAUNCH_SKIP_REAL_CHECKS)*",
            "FAIL (strict): test_checks.py::test_runc_takes_the_allocate_answer skipped without opt-out: "
            "runc is not installed",
        ]
    )


def test_the_opt_out_variable_is_the_one_accepted_skip(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RKNNLAUNCH_SKIP_REAL_CHECKS", "runc, toolkit2")
    result = suite.runpytest("-p", "realchecks", "-m", "slow", "--real-checks-strict")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "skipped  test_checks.py::test_runc_takes_the_allocate_answer  "
            "(opted out by RKNNLAUNCH_SKIP_REAL_CHECKS=runc)",
            "*1 skipped (1 opted out by RKNNLAUNCH_SKIP_REAL_CHECKS)*",
        ]
    )
    result.stdout.no_fnmatch_line("*FAIL (strict)*")


def test_strict_run_fails_when_no_real_check_is_selected(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "realchecks", "-m", "not slow", "--real-checks-strict")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["FAIL (strict): no real-thing check was selected (run with -m slow)"])


def test_without_strict_a_skip_is_still_listed_but_does_not_fail(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "realchecks", "-m", "slow")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["skipped  test_checks.py::test_runc_takes_the_allocate_answer  (runc*"])


def test_a_failing_check_is_listed_as_failed(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_broken="import pytest\n\n@pytest.mark.slow\ndef test_breaks():\n    assert False\n")
    result = suite.runpytest("-p", "realchecks", "-m", "slow", "--real-checks-strict", "test_broken.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["failed   test_broken.py::test_breaks  (call failed)", "1 selected: 1 ran*"])


def test_default_runs_without_slow_tests_print_nothing(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "realchecks", "-m", "not slow")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*real-thing checks*")
