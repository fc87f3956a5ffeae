"""The functional probe's child process: one inference on one NPU core through rknnlaunch's runtime.

Run by `_probe.ProbeRunner` as ``python -m rknpu_node._probe_child``, never in the
plugin's own process: librknnrt can hang its caller (a wedged core never answers) or crash it, and
the parent must survive both. The verdict is one JSON object written to the original stdout when
the child ends; everything else (the runtime's log included) goes to stderr, which the parent
keeps the tail of for the reason.

``--check`` answers whether probing can work here at all (rknn-toolkit-lite2 importable,
librknnrt.so installed), so a node without them is "probe off", never "every core broken".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

RESULT_SCHEMA = "rknpu.probe/1"
EXPECTED_FILE = "probe-expected.json"
"""Beside the models (images/probe/make_probe_model.py): the input to feed and the output every core
must give. Without it the probe feeds all-ones and checks only that outputs are finite."""


def read_expected(model: str) -> dict[str, Any] | None:
    """The expected answer for ``model``'s folder, or None when there is none (or it is unreadable)."""
    path = os.path.join(os.path.dirname(os.path.abspath(model)), EXPECTED_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = json.load(handle)
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def output_problem(outputs: Sequence[Any], expected: dict[str, Any] | None) -> str | None:
    """Why ``outputs`` are not a working core's answer, or None. Pure (numpy only)."""
    import numpy as np

    if not outputs:
        return "the inference returned no outputs"
    arrays = [np.asarray(output, dtype=np.float64) for output in outputs]
    if not all(np.all(np.isfinite(array)) for array in arrays):
        return "the inference returned non-finite values"
    if expected is None:
        return None
    try:
        want = np.asarray(expected["output"]["values"], dtype=np.float64)
        shape = tuple(int(d) for d in expected["output"]["shape"])
        tolerance = float(expected.get("tolerance", 0.01))
    except (KeyError, TypeError, ValueError):
        return None  # a malformed expectations file judges nothing
    got = arrays[0]
    if got.size != want.size:
        return f"output 0 has {got.size} values ({got.shape}), expected {want.size} {shape}"
    worst = float(np.abs(got.ravel() - want).max())
    if worst > tolerance:
        return (
            f"output 0 differs from the expected values by up to {worst:.4g} (tolerance {tolerance:g}): "
            "the core computes wrong results"
        )
    return None


def _report(fd: int, payload: dict[str, Any]) -> None:
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps({"schema": RESULT_SCHEMA, **payload}) + "\n")


def nhwc_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """The NHWC input RKNNLite takes for a model whose metadata gives ``shape``.

    Converted ONNX models may record their input as NCHW (``1x3x8x8``): a 4-D shape whose
    channel axis (1) is small while the last is not is read as NCHW and transposed.
    """
    dims = tuple(int(d) for d in shape)
    if len(dims) == 4 and dims[1] in (1, 3, 4) and dims[3] not in (1, 3, 4):
        return (dims[0], dims[2], dims[3], dims[1])
    return dims


def check(library_root: str, model: str | None = None) -> dict[str, Any]:
    """Whether a probe can run in this container (not whether a core works): rknn-toolkit-lite2
    importable, librknnrt.so installed, and (with ``model``) at least as new as the toolkit that
    built the model, which every core would otherwise refuse alike."""
    from rknnlaunch import RknnLaunchError
    from rknnlaunch.model import read_rknn
    from rknnlaunch.npu import LIBRKNNRT_PATH, HostRoot, find_librknnrt, version_tuple

    if importlib.util.find_spec("rknnlite") is None:
        return {
            "available": False,
            "reason": "rknn-toolkit-lite2 (rknnlite) is not installed in the plugin image; use the "
            "probe image variant",
        }
    try:
        runtime = find_librknnrt(HostRoot(library_root))
    except OSError as exc:
        return {"available": False, "reason": f"cannot read {LIBRKNNRT_PATH}: {exc}"}
    if runtime is None:
        return {
            "available": False,
            "reason": f"no librknnrt.so at {LIBRKNNRT_PATH} in the plugin image; use the probe image variant",
        }
    if model is not None:
        try:
            built_by = read_rknn(model).toolkit_version
        except RknnLaunchError as exc:
            return {
                "available": False,
                "reason": f"the probe model is unusable: {exc.problem.splitlines()[0]}",
            }
        if built_by and runtime.version and version_tuple(built_by) > version_tuple(runtime.version):
            return {
                "available": False,
                "reason": f"the probe model {model} was built by rknn-toolkit2 {built_by}, newer than "
                f"librknnrt {runtime.version}: rebuild the probe image with matching versions",
            }
    return {"available": True, "runtime": runtime.version_line or runtime.version}


def probe(model: str, core: int, root: str, soc: str, compatible_file: str | None) -> dict[str, Any]:
    """Open ``model`` pinned to ``core``, run one inference and compare with the expected answer."""
    import numpy as np

    import rknnlaunch
    from rknnlaunch import (
        BackendUnavailableError,
        DiscoveryError,
        ModelError,
        RknnLaunchError,
        UsageError,
        load_settings,
    )
    from rknnlaunch.model import read_rknn

    env = {"RKNN_NPU_CORES": str(core), "RKNN_NPU_SOC": soc, "RKNNLAUNCH_ROOT": root}
    if compatible_file:
        env["RKNN_NPU_COMPATIBLE_FILE"] = compatible_file
    started = time.monotonic()
    try:
        settings = load_settings(env)
        info = read_rknn(model)
        if not info.inputs or not info.inputs[0].shape:
            return {"ok": False, "reason": f"the probe model {model} names no input tensor shape"}
        expected = read_expected(model)
        value = int(expected.get("input", {}).get("value", 1)) if expected else 1
        x = np.full(nhwc_shape(info.inputs[0].shape), value, dtype=np.uint8)
        with rknnlaunch.open(model, backend="npu", settings=settings) as runtime:
            infer_started = time.monotonic()
            outputs = runtime.infer(x)
            infer_seconds = time.monotonic() - infer_started
    except RknnLaunchError as exc:
        lines = getattr(exc, "log_lines", ()) or ()
        said = f" (runtime said: {' | '.join(lines[-3:])})" if lines else ""
        first = exc.problem.splitlines()[0] if exc.problem else type(exc).__name__
        # Settings, discovery, model or a missing backend fail every core alike: the probe cannot
        # judge the core, so it says so instead of a verdict.
        unusable = isinstance(exc, (UsageError, DiscoveryError, ModelError, BackendUnavailableError))
        return {
            "ok": False,
            "unusable": unusable,
            "reason": f"{first}{said}",
            "seconds": time.monotonic() - started,
        }
    except Exception as exc:  # the real RKNNLite may raise where the docs say it returns -1/None
        return {"ok": False, "reason": f"{type(exc).__name__}: {exc}", "seconds": time.monotonic() - started}
    problem = output_problem(outputs, expected)
    if problem is not None:
        return {"ok": False, "reason": problem, "seconds": time.monotonic() - started}
    return {"ok": True, "seconds": time.monotonic() - started, "infer_seconds": infer_seconds}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rknpu-probe-child")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--model")
    parser.add_argument("--core", type=int)
    parser.add_argument("--root", default="/")
    parser.add_argument("--soc")
    parser.add_argument("--compatible-file")
    # Where librknnrt.so is looked for: the container's own /usr/lib (tests point it elsewhere).
    parser.add_argument("--library-root", default=os.environ.get("RKNNLAUNCH_ROOT", "/"))
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    # The verdict gets the real stdout; anything the runtime prints goes to stderr with its log.
    result_fd = os.dup(1)
    os.dup2(2, 1)
    if args.check:
        _report(result_fd, check(args.library_root, args.model))
        return 0
    if args.model is None or args.core is None or args.soc is None:
        _report(result_fd, {"ok": False, "reason": "probe child needs --model, --core and --soc"})
        return 2
    _report(
        result_fd,
        {"core": args.core, **probe(args.model, args.core, args.root, args.soc, args.compatible_file)},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
