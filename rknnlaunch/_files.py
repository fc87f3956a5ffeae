"""The one input-file rule and the one output-path rule for models, images and reports (the base
layer: every layer may use them): an input must be an existing regular file; an output must be a
file name in an existing folder this process may write, with an extension its writer supports."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from pathlib import Path

from ._errors import RknnLaunchError, UsageError

Access = Callable[[str | os.PathLike[str], int], bool]
"""`os.access`'s signature; tests inject one to check the writability rule as root too."""

PLOT_SUFFIXES = (".png", ".svg", ".svgz", ".pdf", ".eps", ".ps", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")
"""What matplotlib's Agg canvas saves in every release we support (3.7+), without LaTeX (.pgf) or a
raw buffer (.raw/.rgba); a test pins it against the installed matplotlib, which is never imported
just to check a path."""


def require_file(path: str | os.PathLike[str], what: str, fix: str, error: type[RknnLaunchError]) -> Path:
    """``path`` as a Path when it is a regular file; else ``error`` saying it is missing or not a
    file (a folder, a device, a FIFO whose open would block)."""
    file = Path(path)
    if not file.is_file():
        state = "is not a regular file" if file.exists() else "does not exist"
        raise error(f"{what} {file} {state}", fix)
    return file


def require_readable(path: str | os.PathLike[str], what: str, error: type[RknnLaunchError]) -> None:
    """``error`` saying Permission denied (and how to fix it) when this process cannot read ``path``."""
    try:
        with open(path, "rb") as handle:
            handle.read(0)
    except PermissionError:
        raise error(
            f"{what} {path}: Permission denied (uid {os.getuid()} cannot read it)",
            f"make it readable, e.g. chmod a+r {path}, or run as a user who may read it",
        ) from None


def check_output(
    path: str | os.PathLike[str] | None,
    flag: str,
    *,
    suffixes: Collection[str] | None = None,
    writer_has: Callable[[str], bool] | None = None,
    example: str = "report.json",
    access: Access = os.access,
) -> None:
    """Refuse an output path before any work (`UsageError`, exit 2, with a fix): its folder must
    exist and be writable by this process (a real access check: root-owned is not writable for a
    user), the path must not be a folder, an existing file must be writable, and its extension must
    be one of ``suffixes`` (case-insensitive) or accepted by ``writer_has``. None: nothing to check."""
    if path is None:
        return
    target = Path(path)
    shown = f"{flag} {path}"
    if target.is_dir():
        raise UsageError(
            f"{shown} is a folder; {flag} names the file to write",
            f"name a file in it, e.g. {flag} {target / example}",
        )
    folder = target.resolve().parent
    if not folder.is_dir():
        state = "is not a folder" if folder.exists() else "does not exist"
        raise UsageError(
            f"{shown}: the folder {target.parent} {state}",
            f"create it (mkdir -p {target.parent}) or pick another {flag}",
        )
    if not access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"{shown}: Permission denied: uid {os.getuid()} cannot write in {target.parent}",
            f"pick a folder you can write, e.g. {flag} {Path.cwd() / target.name}",
        )
    if target.exists() and not access(target, os.W_OK):
        raise UsageError(
            f"{shown}: Permission denied: the file exists and uid {os.getuid()} cannot overwrite it",
            f"remove it or pick another {flag}",
        )
    if suffixes is None and writer_has is None:
        return
    suffix = target.suffix.lower()
    known = suffixes is not None and suffix in suffixes
    if not known and writer_has is not None and suffix:
        known = writer_has(str(target))
    if not known:
        listed = ", ".join(suffixes) if suffixes is not None else ".jpg, .png"
        what = f"the extension {suffix!r}" if suffix else "no extension"
        raise UsageError(
            f"{shown}: {what} is not a format this can write (one of {listed})",
            f"end the name in one of them, e.g. {flag} {target.with_suffix(Path(example).suffix)}",
        )
