"""Put first on PYTHONPATH by `rknnlaunch run`: lets RKNNLite read the plugin-provided compatible file.

Loads rknnlaunch/runtime/_dtcompat.py by path (not the rknnlaunch package: interpreter start-up stays
cheap) and installs its redirect, then runs the next `sitecustomize` on sys.path so an image's
own sitecustomize still works. Never fails the interpreter: any problem is reported on stderr.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _install_redirect() -> None:
    replacement = os.environ.get("RKNNLAUNCH_COMPATIBLE_REDIRECT")
    if not replacement:
        return
    spec = importlib.util.spec_from_file_location("_rknnlaunch_dtcompat", _HERE.parent / "_dtcompat.py")
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_rknnlaunch_dtcompat", module)
    spec.loader.exec_module(module)
    module.install_redirect(replacement)


def _chain_next_sitecustomize() -> None:
    others = [entry for entry in sys.path if entry and Path(entry).resolve() != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _install_redirect()
except Exception as exc:  # pragma: no cover - start-up must never break the child
    print(f"rknnlaunch: could not redirect the device-tree compatible file: {exc}", file=sys.stderr)
try:
    _chain_next_sitecustomize()
except Exception as exc:  # pragma: no cover
    print(f"rknnlaunch: the image's own sitecustomize failed: {exc}", file=sys.stderr)
