"""Every `from <our package> import name` in the source names something that package really has.

mypy cannot see this: a package's lazy `_LAZY` table (PEP 562 `__getattr__`) returns `Any` for any
name, so a name missing from the table type-checks and then fails at import time (the integration
of issue 22 found one: the kubelet service imported `check_shared_request` through `devices`).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OURS = ("rknnlaunch", "rknpu_device_plugin", "rknpu_serverkit", "rknpu_dra_driver")
SOURCES = ("rknnlaunch", "plugin/rknpu_device_plugin", "plugin/rknpu_serverkit", "plugin/rknpu_dra_driver")


def _module_parts(path: Path) -> list[str]:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[0] == "plugin":
        parts = parts[1:]
    return parts


def _imports() -> list[tuple[str, str, str]]:
    """(where, module, name) for every from-import of our packages, at any depth of a file."""
    found: list[tuple[str, str, str]] = []
    for source in SOURCES:
        for path in sorted((REPO / source).rglob("*.py")):
            if "_kubeapi" in path.parts:
                continue
            parts = _module_parts(path)
            package = parts[:-1]  # a module's package; for an __init__, the package itself
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module.split(".")[0] not in OURS:
                    continue
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                found.extend((where, module, alias.name) for alias in node.names if alias.name != "*")
    return found


IMPORTS = _imports()


def test_the_scan_finds_the_imports() -> None:
    assert len(IMPORTS) > 300


@pytest.mark.parametrize("module", sorted({module for _, module, _ in IMPORTS}))
def test_every_imported_name_exists(module: str) -> None:
    imported = importlib.import_module(module)
    missing = []
    for where, name_module, name in IMPORTS:
        if name_module != module or hasattr(imported, name):
            continue
        try:
            importlib.import_module(f"{module}.{name}")  # `from package import submodule`
        except ImportError:
            missing.append(f"{where}: {module} has no {name!r}")
    assert not missing, (
        "names imported from a package that does not have them (add each to the package's "
        "_LAZY table, its TYPE_CHECKING import and __all__):\n" + "\n".join(missing)
    )
