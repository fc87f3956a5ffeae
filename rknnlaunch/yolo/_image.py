"""Image files in and out for the CLI and the pipeline: OpenCV (the `vision` extra), imported on use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import UsageError
from .._files import require_file


def opencv() -> Any:
    """The `cv2` module, or a `UsageError` saying which extra installs it."""
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise UsageError(
            "OpenCV is needed to read, resize and draw images and is not installed",
            "pip install 'rknnlaunch[vision]'  (opencv-python-headless)",
        ) from exc
    return cv2


def read_image(path: str) -> npt.NDArray[np.uint8]:
    """Decode the image file at ``path`` as BGR uint8 (H x W x 3)."""
    require_file(path, "image file", "pass the path of a JPEG/PNG file", UsageError)
    cv2 = opencv()
    image = cv2.imread(path, cv2.IMREAD_COLOR)
    if image is None:
        raise UsageError(f"cannot read image {path}", "pass a JPEG/PNG file OpenCV can decode")
    return np.asarray(image, np.uint8)


def check_image_writable(path: str) -> None:
    """Fail before any work when ``path`` cannot be written as an image (folder, extension)."""
    folder = Path(path).parent
    if not folder.is_dir():
        raise UsageError(
            f"cannot write {path}: folder {folder} does not exist", "pass a path in an existing folder"
        )
    if not opencv().haveImageWriter(path):
        raise UsageError(
            f"cannot write {path}: OpenCV has no writer for that extension", "use a .jpg or .png name"
        )


def write_image(path: str, image: npt.NDArray[np.uint8]) -> None:
    """Encode ``image`` (BGR) to ``path``; the extension picks the format."""
    cv2 = opencv()
    try:
        written = bool(cv2.imwrite(path, image))
    except cv2.error as exc:
        raise UsageError(f"cannot write {path}: {exc}", "use a .jpg or .png name") from None
    if not written:
        raise UsageError(f"cannot write {path}", "use a .jpg or .png path in a writable folder")
