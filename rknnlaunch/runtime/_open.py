"""`rknnlaunch.open`: one RKNNLite context on the allocated NPU cores (or the CPU backend), with reasons.

Every RKNNLite return code is checked; -1 becomes a `RuntimeInitError` carrying the runtime's own
log lines. `init_runtime` runs under one process-wide lock (concurrent initialisation has crashed
the rknpu driver), and the mask passed is always the pinned mask the SoC accepts, never AUTO on a
multi-core NPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from .._errors import (
    DiscoveryError,
    InferenceError,
    ModelError,
    RuntimeInitError,
)
from .._files import require_file
from ..npu import (
    HostRoot,
    format_cores,
    mask_name,
    models_compatible,
    rknnlite_mask,
)
from ..settings import NpuTarget, find_npu
from . import _dtcompat
from ._choice import BACKENDS, LaunchPlan, Layout, choose_contexts
from ._closing import ClosesOnExit
from ._cpu import CpuRuntime
from ._frames import Frame, InputSpec, check_frame, input_specs
from ._rknnlite import RknnLiteFactory, RknnLiteLike, capture_runtime_log, load_rknnlite

if TYPE_CHECKING:
    from ..settings import NpuSettings

# Pool worker processes import this module to open their context: the settings and .rknn parsers
# (pydantic, ~0.3 s) are imported where a plan is made, not here, so workers start without them.

Backend = Literal["auto", "npu", "cpu"]

_INIT_LOCK = threading.Lock()
"""Serialises RKNNLite load/init across the whole process (and captures their log cleanly)."""

INIT_LOCK_FILE = Path(tempfile.gettempdir()) / "rknnlaunch-npu-init.lock"
"""Serialises load/init across processes too (process workers, several apps in one container)."""


@contextlib.contextmanager
def npu_init_lock(path: Path = INIT_LOCK_FILE) -> Iterator[None]:
    """Hold the process-wide init lock and an exclusive ``flock`` on ``path``.

    Concurrent `rknn_init` from several processes has crashed the rknpu driver (docs/hardware.md).
    The kernel drops a ``flock`` when its holder dies, so a worker killed mid-init cannot block
    the others. When the file cannot be opened at all, only the in-process lock is held.
    """
    with _INIT_LOCK:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                yield
                return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the last descriptor releases the lock


class Runtime(Protocol):
    """What `open` returns, NPU or CPU alike."""

    backend: str
    label: str
    cores: frozenset[int]
    inputs: tuple[InputSpec, ...]
    """What a frame is for this model: one `InputSpec` per input (empty: the model does not say)."""

    def infer(self, x: Frame) -> list[np.ndarray[Any, Any]]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Runtime: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


def make_compatible_visible(compatible_file: str | None, host: HostRoot) -> str | None:
    """Install the /proc/device-tree/compatible redirect when RKNNLite could not read it otherwise.

    ``compatible_file``: the plugin's copy of the node's compatible string (RKNN_NPU_COMPATIBLE_FILE).
    """
    if not compatible_file:
        return None
    try:
        local = host.open_path(compatible_file)
    except OSError:
        return None
    replacement = _dtcompat.replacement_for(compatible_file, local)
    if replacement is not None:
        _dtcompat.install_redirect(replacement)
    return replacement


class NpuRuntime(ClosesOnExit):
    """One initialised RKNNLite context pinned to a core set. Not for sharing across threads."""

    backend = "npu"

    def __init__(
        self,
        lite: RknnLiteLike,
        model: Path,
        soc: str,
        cores: frozenset[int],
        mask: int,
        inputs: tuple[InputSpec, ...] = (),
    ) -> None:
        self._lite = lite
        self.inputs = inputs
        self.model = model
        self.soc = soc
        self.cores = cores
        self.mask = mask
        word = "core" if len(cores) == 1 else "cores"
        self.label = f"NPU {soc} {word} {format_cores(cores)} (mask {mask})"
        self._lock = threading.Lock()
        self._closed = False

    def infer(self, x: Frame) -> list[np.ndarray[Any, Any]]:
        """Run the model on frame ``x`` (one array, or one per input; see `check_frame`); returns
        the outputs as RKNNLite returns them."""
        arrays = check_frame(x, self.inputs)
        with self._lock:
            if self._closed:
                raise InferenceError("this runtime is closed", "open a new one with rknnlaunch.open()")
            outputs = self._lite.inference(inputs=arrays)
        if outputs is None:
            given = ", ".join(f"{a.shape} {a.dtype}" for a in arrays)
            raise InferenceError(
                f"RKNNLite.inference returned no outputs on {self.label} for input {given}",
                "the runtime's reason is in its log on stderr; check the input matches the model "
                "(`rknnlaunch model inspect MODEL`)",
            )
        return [np.asarray(output) for output in outputs]

    def close(self) -> None:
        """Release the RKNNLite context (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._lite.release()

    def __del__(self) -> None:  # a forgotten close() must not leak the NPU context
        if not getattr(self, "_closed", True):
            with contextlib.suppress(Exception):
                self.close()

    def __repr__(self) -> str:
        return f"<NpuRuntime {self.label!r}>"


def diagnose(lines: Iterable[str], late_redirect: bool = False) -> str:
    """A fix for the most common RKNNLite failures, from the lines it logged."""
    text = "\n".join(lines).lower()
    if "invalid rknn model version" in text:
        return (
            "the model was built by a newer rknn-toolkit2 than /usr/lib/librknnrt.so: install a "
            "librknnrt.so at least as new as the toolkit (`rknnlaunch doctor --model MODEL`)"
        )
    if ("specify the target" in text or "unsupported run platform" in text) and late_redirect:
        return (
            "rknnlite was imported before rknnlaunch could redirect /proc/device-tree/compatible (its "
            "compiled modules cache `open` at import): call rknnlaunch.open() before importing rknnlite "
            "yourself, or start the program with `rknnlaunch run -- ...`"
        )
    if "specify the target" in text or "unsupported run platform" in text:
        return (
            "RKNNLite could not read /proc/device-tree/compatible: run in a pod that requests "
            "rockchip.com/npu (the plugin mounts RKNN_NPU_COMPATIBLE_FILE and rknnlaunch redirects "
            "RKNNLite to it)"
        )
    if "core mode" in text or "core_mask" in text:
        return "the runtime rejected the core mask: let rknnlaunch pick it (no cores=), or use Pool"
    if "does not support simulator" in text:
        return "RKNNLite only runs on the aarch64 board; on this machine use backend='cpu'"
    if "librknnrt" in text or "dynamic library" in text:
        return "install librknnrt.so at /usr/lib/librknnrt.so (the rknnlaunch base image does)"
    if "permission denied" in text or "failed to open" in text:
        return "the NPU device node is not usable here: run `rknnlaunch doctor` for the node and group to fix"
    return "run `rknnlaunch doctor --model MODEL` for a full check of driver, runtime, device nodes and model"


def _check_model(path: Path, target: NpuTarget) -> tuple[InputSpec, ...]:
    """Check ``path`` was built for the board; its inputs as the runtime exchanges them."""
    from ..model import read_rknn

    info = read_rknn(path)
    soc = target.info.soc
    if info.target_platforms and not any(models_compatible(p, soc) for p in info.target_platforms):
        raise ModelError(
            f"{path} was built for {', '.join(info.target_platforms)}, but this board is {soc.name}",
            f"re-export it with rknn-toolkit2 using rknn.config(target_platform='{soc.name}')",
        )
    return input_specs(info.inputs)


def open_npu(
    model: Path,
    target: NpuTarget,
    cores: frozenset[int],
    factory: RknnLiteFactory,
    late_redirect: bool = False,
    inputs: tuple[InputSpec, ...] = (),
) -> NpuRuntime:
    """Load and initialise one RKNNLite context on ``cores`` (must be runnable as one context).

    ``late_redirect``: the compatible redirect was installed after rknnlite was imported (it then
    cannot take effect; the error says so).
    """
    allocation = target.allocation
    mask = rknnlite_mask(allocation.soc, cores, allocation.core_count)
    lite = factory()
    try:
        with npu_init_lock():
            with capture_runtime_log() as load_log:
                code = lite.load_rknn(os.fspath(model))
            if code != 0:
                raise RuntimeInitError(
                    f"RKNNLite.load_rknn({os.fspath(model)!r}) returned {code}",
                    diagnose(load_log.lines),
                    load_log.lines,
                )
            with capture_runtime_log() as init_log:
                code = lite.init_runtime(core_mask=mask)
            if code != 0:
                raise RuntimeInitError(
                    f"RKNNLite.init_runtime(core_mask={mask} ({mask_name(mask)})) returned {code} on "
                    f"{allocation.soc.name} cores {format_cores(cores)}",
                    diagnose(init_log.lines, late_redirect),
                    init_log.lines,
                )
    except BaseException:
        lite.release()
        raise
    return NpuRuntime(lite, model, allocation.soc.name, cores, mask, inputs)


def onnx_for(model: Path) -> Path:
    """The ONNX model for the CPU backend: ``model`` itself, or the .onnx next to an .rknn file."""
    if model.suffix.lower() == ".onnx":
        return model
    require_file(model, "model file", "pass the path of an existing .rknn or .onnx file", ModelError)
    if model.suffix.lower() != ".rknn":
        raise ModelError(
            f"{model} is neither an .rknn nor an .onnx model (by its name)",
            "pass the .rknn export (NPU) or the .onnx model (CPU backend)",
        )
    from ..model import read_rknn

    read_rknn(model)  # a foreign, truncated or corrupt .rknn is named as what it is, not as "no .onnx"
    sibling = model.with_suffix(".onnx")
    if sibling.is_file():
        return sibling
    raise ModelError(
        f"the CPU backend needs an ONNX model, and there is no {sibling.name} next to {model}",
        "pass the .onnx export of the model, or put it next to the .rknn file with the same name",
    )


def plan(
    model: str | os.PathLike[str],
    cores: Iterable[int] | str | None,
    backend: str,
    settings: NpuSettings,
    layout: Layout = "one",
    contexts_per_core: int = 1,
) -> LaunchPlan:
    """Discover the NPU, let `choose_contexts` decide, then check the files the decision names.

    The edge around the pure decision: discovery and model-file reads happen here, nowhere else.
    """
    path = Path(model)
    npu: NpuTarget | DiscoveryError
    if backend == "cpu" or backend not in BACKENDS:
        npu = DiscoveryError("NPU discovery skipped", None)  # the decision never reads it
    else:
        try:
            npu = find_npu(settings)
        except DiscoveryError as exc:
            npu = exc
    chosen = choose_contexts(backend, path, npu, cores, layout, contexts_per_core)
    if chosen.backend == "cpu":
        return dataclasses.replace(chosen, model=onnx_for(path))
    if chosen.target is None:
        raise DiscoveryError("the NPU plan names no NPU", None)  # choose_contexts never does this
    return dataclasses.replace(chosen, inputs=_check_model(path, chosen.target))


def open_plan(
    the_plan: LaunchPlan, compatible_file: str | None, rknnlite: RknnLiteFactory | None
) -> list[Runtime]:
    """Open every runtime of ``the_plan``; on failure close the ones already open.

    ``compatible_file``: `NpuSettings.compatible_file` (the only setting opening needs).
    """
    if the_plan.backend == "cpu":
        return [CpuRuntime(the_plan.model, the_plan.cpu_reason or "", detail=the_plan.cpu_detail)]
    target = the_plan.target
    assert target is not None
    # Before rknnlite is imported: its compiled modules cache `open` at import time.
    imported_already = "rknnlite.api" in sys.modules and _dtcompat.redirect_target() is None
    late_redirect = make_compatible_visible(compatible_file, target.host) is not None and imported_already
    factory = rknnlite if rknnlite is not None else load_rknnlite()
    opened: list[Runtime] = []
    try:
        for group in the_plan.groups:
            opened.append(open_npu(the_plan.model, target, group, factory, late_redirect, the_plan.inputs))
    except BaseException:
        for runtime in opened:
            runtime.close()
        raise
    return opened


def open(
    model: str | os.PathLike[str],
    cores: Iterable[int] | str | None = None,
    backend: str = "auto",
    *,
    settings: NpuSettings | None = None,
    rknnlite: RknnLiteFactory | None = None,
) -> Runtime:
    """Open ``model`` on the NPU cores allocated to this container (or the CPU), ready for ``infer``.

    ``cores``: a subset of the allocation (``[0]``, ``"0,1"``, ``"0x3"``); default all allocated
    cores, which must run as one context (use `Pool` for {0,2}). ``backend``: ``"auto"`` (NPU,
    else the CPU when no NPU is found), ``"npu"`` or ``"cpu"``. ``settings`` defaults to the
    environment; ``rknnlite`` makes RKNNLite instances (default: the real rknn-toolkit-lite2).
    Raises a `RknnLaunchError` subclass whose message says what to do.
    """
    from ..settings import load_settings

    settings = settings if settings is not None else load_settings()
    the_plan = plan(model, cores, backend, settings)
    return open_plan(the_plan, settings.compatible_file, rknnlite)[0]
