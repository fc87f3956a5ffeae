"""Image sets for calibration and validation: DIR or FILES -> sorted image paths, each checked."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .._errors import UsageError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def image_files(sources: Sequence[str | Path], option: str) -> list[Path]:
    """Every image named by ``sources`` (folders are listed, not recursed), sorted by path.

    `UsageError` for a missing path, a folder without images, or nothing at all; ``option`` is the
    flag the paths came from, so the message says which to fix.
    """
    found: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            listed = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
            if not listed:
                raise UsageError(
                    f"{option} {path}: the folder has no images ({', '.join(IMAGE_SUFFIXES)})",
                    f"point {option} at a folder of JPEG/PNG images",
                )
            found.extend(listed)
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(
                f"{option} {path} does not exist", f"pass existing image files or folders to {option}"
            )
    if not found:
        raise UsageError(f"{option} named no images", f"pass image files or a folder of images to {option}")
    return sorted(dict.fromkeys(found))


def decode_all(files: Sequence[Path], option: str) -> list[npt.NDArray[np.uint8]]:
    """Decode every file (BGR uint8) before any long work starts; `UsageError` naming each bad one."""
    from ..yolo import opencv

    cv2 = opencv()
    images: list[npt.NDArray[np.uint8]] = []
    bad: list[str] = []
    for file in files:
        image = cv2.imread(str(file), cv2.IMREAD_COLOR)
        if image is None:
            bad.append(str(file))
        else:
            images.append(np.asarray(image, np.uint8))
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise UsageError(
            f"{option}: {len(bad)} of {len(files)} images do not decode: {shown}",
            "remove or replace them (JPEG/PNG files OpenCV can read)",
        )
    return images
