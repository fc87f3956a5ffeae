"""The one input-file rule for models, images and reports (the base layer: every layer may use it):
the path must name an existing regular file."""

from __future__ import annotations

import os
from pathlib import Path

from ._errors import RknnLaunchError


def require_file(path: str | os.PathLike[str], what: str, fix: str, error: type[RknnLaunchError]) -> Path:
    """``path`` as a Path when it is a regular file; else ``error`` saying it is missing or not a
    file (a folder, a device, a FIFO whose open would block)."""
    file = Path(path)
    if not file.is_file():
        state = "is not a regular file" if file.exists() else "does not exist"
        raise error(f"{what} {file} {state}", fix)
    return file
