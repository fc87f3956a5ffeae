"""`rknnlaunch run [--no-check] -- CMD ARGS...`: preflight, normalised env, compatible fix, then exec.

The base image's ENTRYPOINT. After the checks the process *becomes* the command (os.execvpe), so
signals reach it directly and its exit status is the container's.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from .._errors import RknnLaunchError, UsageError
from ..npu import HostRoot
from ..runtime import child_environment as dtcompat_environment
from ..runtime import replacement_for
from ..settings import NpuSettings, NpuTarget, find_npu, load_settings, normalised_env

if TYPE_CHECKING:
    from ..preflight import Findings

EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    parser.description = (
        "Runs the doctor checks (unless --no-check) and stops with the report if one fails; "
        "exports RKNN_NPU_CORE_MASK/CORES/SOC/DEVICE in canonical form; makes RKNNLite in Python "
        "children read the plugin's device-tree compatible file; then execs CMD, so signals and the "
        "exit status pass straight through."
    )
    parser.add_argument("--no-check", action="store_true", help="skip the preflight checks")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    parser.set_defaults(handler=run)


def child_environment(
    settings: NpuSettings, base: dict[str, str], checked: Findings | None = None
) -> tuple[dict[str, str], str | None]:
    """``base`` plus the normalised RKNN_NPU_* values and, when needed, the compatible-file shim.

    ``checked``: what the preflight found (its NPU and allocation are reused, not discovered again).
    """
    env = dict(base)
    description: str | None = None
    target: NpuTarget | None
    if checked is not None and checked.info is not None and checked.allocation is not None:
        target = NpuTarget(HostRoot(settings.root), checked.info, checked.allocation)
    else:
        try:
            target = find_npu(settings)
        except RknnLaunchError as exc:  # only reachable with --no-check: start anyway, env as given
            if settings.injected or settings.soc or settings.device:
                print(f"rknnlaunch: warning: RKNN_NPU_* passed on unchecked: {exc.problem}", file=sys.stderr)
            target = None
    if target is not None:
        env.update(normalised_env(settings, target.allocation, target.info))
        description = f"NPU {target.info.soc.name} {target.allocation.describe()}"
    if settings.compatible_file:
        try:
            local = target.host.open_path(settings.compatible_file) if target else None
        except OSError:
            local = None
        replacement = replacement_for(settings.compatible_file, local)
        if replacement is not None:
            env = dtcompat_environment(env, replacement)
    return env, description


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UsageError("`rknnlaunch run` needs a command to start", "rknnlaunch run -- python app.py")
    settings = load_settings()
    checked: Findings | None = None
    if not args.no_check:
        # Imported here: `run --no-check` (every container's ENTRYPOINT in a hurry) skips its cost.
        from ..preflight import Findings, overall, report_text, run_checks

        checked = Findings()
        results = run_checks(settings, found=checked)
        status = overall(results)
        if status == "fail":
            print(report_text(results, settings.root), file=sys.stderr)
            print(
                f"rknnlaunch run: preflight failed, not starting {command[0]} "
                "(fix the above, or pass --no-check to start anyway)",
                file=sys.stderr,
            )
            return 1
        for result in results:
            if result.status == "warn":
                print(f"rknnlaunch: warning: {result.id}: {result.summary}", file=sys.stderr)
    env, description = child_environment(settings, dict(os.environ), checked)
    if description is not None and settings.log_level in ("debug", "info"):
        print(f"rknnlaunch: {description}; starting {' '.join(command)}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        print(f"rknnlaunch run: command not found: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except PermissionError:
        print(f"rknnlaunch run: permission denied: {command[0]} is not executable", file=sys.stderr)
        return EXIT_NOT_EXECUTABLE
    except OSError as exc:
        print(f"rknnlaunch run: cannot start {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_NOT_EXECUTABLE
    return 0  # pragma: no cover - execvpe only returns by raising
