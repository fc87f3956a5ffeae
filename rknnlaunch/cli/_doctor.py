"""`rknnlaunch doctor`: the preflight report (text or a stable JSON schema); exit 0 ok, 1 failure, 2 usage."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from .._errors import ModelError, SettingsError, UsageError
from .._files import require_file
from ..preflight import exit_code, report_json, report_text, run_checks
from ..settings import ENV_NAMES, NpuSettings, load_settings


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    parser.description = (
        "Checks SoC and cores, the allocation and mask, device nodes, driver, librknnrt, "
        "rknn-toolkit-lite2, the device-tree compatible file and (with --model) the model. "
        "Exit 0 when nothing fails, 1 when a check fails, 2 on usage errors."
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as JSON (schema rknnlaunch.doctor/1)"
    )
    parser.add_argument("--model", type=Path, metavar="FILE", help="also check this .rknn model")
    parser.add_argument(
        "--root", metavar="DIR", help="inspect the host under DIR (default: RKNNLAUNCH_ROOT or /)"
    )
    parser.set_defaults(handler=run)


def settings_with_root(root: str | None) -> tuple[NpuSettings, SettingsError | None]:
    """The environment's settings (or defaults plus the error, so the report can show it), root applied."""
    error: SettingsError | None = None
    try:
        settings = load_settings()
    except SettingsError as exc:
        settings, error = _readable_settings(), exc
    if root is not None:
        if not Path(root).is_dir():
            raise UsageError(
                f"--root {root} is not a folder", "pass the folder the host is mounted at, e.g. /host"
            )
        settings = settings.model_copy(update={"root": root})
    return settings, error


def _readable_settings() -> NpuSettings:
    """The environment's settings without the variables that cannot be read, so the report still
    looks where RKNNLAUNCH_ROOT points and uses the readable hints (each variable parses alone)."""
    readable: dict[str, str] = {}
    for name in ENV_NAMES.values():
        value = os.environ.get(name)
        if value is None:
            continue
        try:
            load_settings({name: value})
        except SettingsError:
            continue
        readable[name] = value
    try:
        return load_settings(readable)
    except SettingsError as exc:  # variables readable alone that contradict each other: without them
        return load_settings({k: v for k, v in readable.items() if k not in exc.variables})


def run(args: argparse.Namespace) -> int:
    if args.model is not None:  # the one input rule, as in bench/detect/model inspect (exit 2)
        require_file(args.model, "--model", "pass the path of an existing .rknn file", ModelError)
    settings, error = settings_with_root(args.root)
    results = run_checks(settings, error, args.model)
    if args.json:
        print(json.dumps(report_json(results, settings.root), indent=2))
    else:
        print(report_text(results, settings.root))
    return exit_code(results)
