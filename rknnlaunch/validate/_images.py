"""Image sets for calibration and validation: DIR or FILES -> sorted image paths, each checked by the
one image reader (`rknnlaunch.yolo.check_image` / `read_image`) before any long work."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .._errors import UsageError
from .._files import require_file_or_folder
from ..yolo import check_image, read_image

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def image_files(sources: Sequence[str | Path], option: str) -> list[Path]:
    """Every image named by ``sources`` (folders are listed, not recursed), sorted by path.

    `UsageError` for a missing path, a folder without images, a file that is not an image (its
    header: a text file, an oversized or unreadable image), or nothing at all; ``option`` is the
    flag the paths came from, so the message says which to fix.
    """
    found: list[Path] = []
    for source in sources:
        path = require_file_or_folder(source, option, f"pass existing image files or folders to {option}")
        if path.is_dir():
            listed = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
            if not listed:
                raise UsageError(
                    f"{option} {path}: the folder has no images ({', '.join(IMAGE_SUFFIXES)})",
                    f"point {option} at a folder of JPEG/PNG images",
                )
            found.extend(listed)
        else:
            found.append(path)
    if not found:
        raise UsageError(f"{option} named no images", f"pass image files or a folder of images to {option}")
    files = sorted(dict.fromkeys(found))
    bad: list[str] = []
    for file in files:
        try:
            check_image(file, "file")
        except UsageError as exc:
            bad.append(exc.problem)
    _refuse(bad, len(files), option, "are not images that can be read")
    return files


def _refuse(bad: Sequence[str], total: int, option: str, state: str) -> None:
    """One `UsageError` naming the first five bad files of ``total``; nothing when none is bad."""
    if bad:
        shown = "; ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        denied = any("Permission denied" in problem for problem in bad)
        raise UsageError(
            f"{option}: {len(bad)} of {total} images {state}: {shown}",
            "make them readable (chmod a+r FILE) or remove them"
            if denied
            else "remove or replace them (JPEG/PNG files)",
        )


def decode_all(files: Sequence[Path], option: str) -> list[npt.NDArray[np.uint8]]:
    """Decode every file (BGR uint8) before any long work starts, through the one image reader;
    `UsageError` naming each file that does not decode."""
    images: list[npt.NDArray[np.uint8]] = []
    bad: list[str] = []
    for file in files:
        try:
            images.append(read_image(file, "image"))
        except UsageError as exc:
            bad.append(exc.problem)
    _refuse(bad, len(files), option, "do not decode")
    return images
