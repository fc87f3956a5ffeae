"""A fake `rknnlite.api.RKNNLite` that behaves as rknn-toolkit-lite2 is documented to.

See docs/hardware.md#rknnlite-behaviour and #core-masks:

- every call returns 0 / -1 (or None for inference) and never raises; the reason goes to the log only:
  Python-layer lines through sys.stderr ("E init_runtime: ..."), librknnrt lines straight to fd 2
  ("E RKNN: ..."), as the real layers do;
- core masks per SoC from `rknnlaunch.npu.runtime_effective_mask`: RK3588 rejects 5/6 with "The core
  mode 5 is not supported currently.", RK3576 remaps 4->1 and 7->3 with a warning, single-core NPUs
  reject any non-zero mask with "The core_mask is only supported by ['RK3588', 'RK3576']";
- inputs are checked against the loaded file's header (parsed with our reader, which real
  rknn-toolkit2 files were checked against, docs/hardware.md#real-rknn-headers): the count of
  inputs and each one's dims as the runtime exchanges them (NHWC for image inputs, batch included),
  else inference logs and returns None; outputs have the header's output shapes, as float32 (what
  RKNNLite hands back by default);
- a model newer than the runtime fails with "Invalid RKNN model version 6";
- concurrent `init_runtime` calls are detected (the real driver has crashed on them): each init waits
  up to `init_window` seconds for another init to overlap it, and if one does, both fail.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rknnlaunch.npu import SocSpec, models_compatible, runtime_effective_mask


def _log_python(line: str) -> None:
    sys.stderr.write(line + "\n")


def _log_native(line: str) -> None:
    os.write(2, (line + "\n").encode())


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("+")[0].split(".") if part.isdigit())


@dataclass
class FakeNpu:
    """The shared state behind every fake instance: the board's SoC, librknnrt version, the driver."""

    soc: SocSpec
    runtime_version: str = "2.3.2"
    output_shapes: tuple[tuple[int, ...], ...] = ()
    """Empty: the loaded model's outputs (runtime shapes), else a YOLOv8 head's ``(1, 6, 8400)``."""
    init_window: float = 0.05
    reads_device_tree: bool = False
    """Like the real Python layer: init_runtime reads /proc/device-tree/compatible to learn the SoC."""
    instances: list[FakeRKNNLite] = field(default_factory=list)
    concurrent_init_detected: bool = False
    max_concurrent_inits: int = 0
    _in_init: set[int] = field(default_factory=set)
    _overlapped: set[int] = field(default_factory=set)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def factory(self) -> FakeRKNNLite:
        instance = FakeRKNNLite(self)
        self.instances.append(instance)
        return instance

    def enter_init(self, instance: object) -> bool:
        """True when another init_runtime overlapped this one (either started first)."""
        with self._cond:
            if self._in_init:
                self._overlapped.update(self._in_init)
                self._overlapped.add(id(instance))
                self.concurrent_init_detected = True
            self._in_init.add(id(instance))
            self.max_concurrent_inits = max(self.max_concurrent_inits, len(self._in_init))
            self._cond.notify_all()
            return self._cond.wait_for(lambda: id(instance) in self._overlapped, timeout=self.init_window)

    def leave_init(self, instance: object) -> None:
        with self._cond:
            self._in_init.discard(id(instance))
            self._overlapped.discard(id(instance))


class FakeRKNNLite:
    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7
    NPU_CORE_ALL = 0xFFFF

    def __init__(self, npu: FakeNpu) -> None:
        self.npu = npu
        self.data: bytes | None = None
        self.initialised = False
        self.released = False
        self.requested_mask: int | None = None
        self.effective_mask: int | None = None
        self.inference_threads: set[int] = set()
        self.inference_count = 0
        self.model_inputs: tuple[tuple[int, ...], ...] = ()
        self.model_outputs: tuple[tuple[int, ...], ...] = ()
        self.last_inputs: list[np.ndarray] = []

    def load_rknn(self, path: str) -> int:
        if not os.path.exists(path):
            _log_python(f"E load_rknn: Invalid RKNN model path: {path}")
            return -1
        with open(path, "rb") as handle:
            self.data = handle.read()
        self.model_inputs, self.model_outputs = _io_shapes(self.data)
        return 0

    def _check_inputs(self, inputs: list[Any]) -> np.ndarray | None:
        """The first input when ``inputs`` fit the model (as librknnrt checks them), else None (logged)."""
        arrays = [np.asarray(x) for x in inputs]
        wanted = self.model_inputs
        if wanted and len(arrays) != len(wanted):
            _log_python(f"E inference: The input number {len(arrays)} is wrong, the model has {len(wanted)}")
            return None
        for index, array in enumerate(arrays):
            rank = len(wanted[index]) if wanted else 4
            if array.ndim != rank:
                _log_python("E inference: Catch exception when setting inputs.")
                _log_python(
                    f"E inference: The input shape {array.shape} is wrong, expect {rank} dims like "
                    f"{wanted[index] if wanted else (1, 640, 640, 3)}"
                )
                return None
            if wanted and any(w > 0 and w != g for w, g in zip(wanted[index], array.shape, strict=True)):
                _log_native(f"E RKNN: [fake] input {index} shape {array.shape} != model {wanted[index]}")
                return None
        return arrays[0] if arrays else None

    def output_shapes(self) -> tuple[tuple[int, ...], ...]:
        return self.npu.output_shapes or self.model_outputs or ((1, 6, 8400),)

    def init_runtime(
        self,
        target: str | None = None,
        device_id: str | None = None,
        async_mode: bool = False,
        core_mask: int = 0,
    ) -> int:
        if self.data is None:
            _log_python(
                "E init_runtime: Model is not loaded yet, this interface should be called after load_rknn!"
            )
            return -1
        overlapped = self.npu.enter_init(self)
        try:
            if overlapped:
                _log_native(
                    "E RKNN: [fake] rknn_init: another context is initialising concurrently (driver crash)"
                )
                return -1
            self.requested_mask = core_mask
            if self.npu.reads_device_tree:
                try:
                    with open("/proc/device-tree/compatible", "rb") as handle:
                        compatible = handle.read()
                except OSError:
                    _log_python("E init_runtime: Please specify the target in init_runtime!")
                    return -1
                if f"rockchip,{self.npu.soc.name}".encode() not in compatible:
                    _log_python("E init_runtime: Unsupported run platform")
                    return -1
            if self.data[:4] != b"RKNN":
                _log_native("E RKNN: [fake] Invalid RKNN model file, please check the model!")
                return -1
            meta = _metadata(self.data)
            model_version = str(meta.get("version", "0"))
            if _version(model_version) > _version(self.npu.runtime_version):
                _log_native(
                    f"E RKNN: [fake] The model version {model_version} is newer than librknnrt "
                    f"{self.npu.runtime_version}"
                )
                _log_native("E RKNN: [fake] Invalid RKNN model version 6")
                return -1
            targets = [str(t).lower() for t in meta.get("target_platform", [])]
            if targets and not any(models_compatible(t, self.npu.soc) for t in targets):
                _log_native(
                    f"E RKNN: [fake] The model is built for {targets[0]}, but the current platform "
                    f"is {self.npu.soc.name}"
                )
                return -1
            effective = runtime_effective_mask(self.npu.soc, core_mask)
            if effective is None:
                if not self.npu.soc.core_mask_settable:
                    _log_python("E init_runtime: The core_mask is only supported by ['RK3588', 'RK3576']")
                else:
                    _log_python(f"E init_runtime: The core mode {core_mask} is not supported currently.")
                return -1
            if effective != core_mask and core_mask != self.NPU_CORE_ALL:
                _log_python(
                    f"W init_runtime: core mode {core_mask} is not supported, use {effective} instead"
                )
            self.effective_mask = effective
            self.initialised = True
            return 0
        finally:
            self.npu.leave_init(self)

    def inference(
        self,
        inputs: list[Any],
        data_type: Any = None,
        data_format: Any = None,
        inputs_pass_through: Any = None,
        get_frame_id: bool = False,
    ) -> list[np.ndarray] | None:
        if not self.initialised or self.released:
            _log_python(
                "E inference: Runtime environment is not inited, please call init_runtime to init it first!"
            )
            return None
        x = self._check_inputs(inputs)
        if x is None:
            return None
        self.inference_threads.add(threading.get_ident())
        self.inference_count += 1
        self.last_inputs = [np.array(a) for a in inputs]
        # Outputs carry the first input's mean, so tests can check which frame produced which result.
        value = float(x.mean())
        return [np.full(shape, value, dtype=np.float32) for shape in self.output_shapes()]

    def release(self) -> None:
        self.released = True
        self.initialised = False


def _io_shapes(data: bytes) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """(input runtime shapes, output runtime shapes) the header lists; empty when it lists none."""
    from rknnlaunch._errors import ModelError
    from rknnlaunch.model._rknnfile import parse_rknn

    try:
        info = parse_rknn(data)
    except ModelError:
        return (), ()
    return (
        tuple(t.runtime_shape() for t in info.inputs),
        tuple(t.runtime_shape() for t in info.outputs),
    )


def _metadata(data: bytes) -> dict[str, Any]:
    try:
        version = struct.unpack_from("<Q", data, 8)[0]
        header = 24 if version <= 1 else 64
        block = struct.unpack_from("<Q", data, 16)[0]
        length = struct.unpack_from("<Q", data, header + block)[0]
        start = header + block + 8
        parsed = json.loads(data[start : start + length])
        return parsed if isinstance(parsed, dict) else {}
    except (struct.error, ValueError):
        return {}


# --- The simulated NPU: latency per core set, per-core exclusivity, GIL-held share ----------------

PUBLISHED_SINGLE_CORE_FPS = {"yolov8n": 73.5, "yolov8s": 38.0, "yolo11n": 60.0, "yolo11s": 33.0}
"""rknn_model_zoo, RK3588 at maximum NPU frequency, inference only (docs/hardware.md)."""
YOLOV8S_MULTI_CORE_MS = {1: 32.0, 2: 23.0, 3: 18.0}
"""YOLOv8s in ONE context on 1/2/3 RK3588 cores: how much a multi-core context speeds a frame up."""


@dataclass(frozen=True)
class SimulatedNpu:
    """A picklable factory of simulated RKNNLite instances (usable in process workers).

    Every instance behaves as `FakeRKNNLite` (return codes, masks, logs) and adds:
    - latency: ``single_core_ms`` on one core, scaled for multi-core contexts by the published
      YOLOv8s 32/23/18 ms figures;
    - per-core exclusivity as the driver queues jobs (docs/hardware.md#throughput): each core keeps
      the time its queued work ends in ``lock_dir/core<N>.lock`` (read and written under ``flock``,
      across threads and processes alike). A job starts when it is submitted or when the core's
      previous job ends, whichever is later, and the calling context sleeps until its job ends. So
      two contexts on one core take turns, and a job queued behind another starts the moment that
      one ends: the driver commits it from the completion interrupt, with no process to wake;
    - ``gil_ms`` of CPU work holding the GIL per call (half before, half after the NPU part), like
      the binding's own input/output conversion;
    - ``init_runtime`` holds ``lock_dir/init.lock`` without waiting: an overlapping init in another
      process fails as the driver is reported to (crash), so the SDK must serialise inits;
    - outputs: ``"value"`` = the model's output shapes filled with the frame's centre pixel (tests
      track frames), ``"yolo"`` = rknn_model_zoo YOLOv8 outputs with two objects (real decode);
    - faults by frame: a frame whose centre pixel is ``crash_value`` kills the process (SIGKILL),
      one whose centre pixel is ``none_value`` makes inference return None.
    """

    lock_dir: str
    soc: str = "rk3588"
    single_core_ms: float = 1000.0 / 73.5
    gil_ms: float = 0.0
    outputs: str = "value"
    output_shapes: tuple[tuple[int, ...], ...] = ()
    """Empty: the loaded model's output shapes (see `FakeNpu.output_shapes`)."""
    runtime_version: str = "2.3.2"
    """The simulated librknnrt's version (a model built by a newer toolkit fails to init)."""
    crash_value: int | None = None
    none_value: int | None = None
    trace: bool = False
    """Append ``core start end`` (time.monotonic, system-wide) per NPU job to lock_dir/trace-<pid>."""
    cycle_kb: int = 0
    """Each inference leaves a reference cycle holding this many kB (what the public RKNNLite
    memory-growth report traced its ~42 kB per inference to): only a garbage collection frees it."""

    def latency_ms(self, core_count: int) -> float:
        scale = YOLOV8S_MULTI_CORE_MS.get(core_count, YOLOV8S_MULTI_CORE_MS[3]) / YOLOV8S_MULTI_CORE_MS[1]
        return self.single_core_ms * scale

    def __call__(self) -> SimRKNNLite:
        return SimRKNNLite(self, _process_npu(self))


_NPUS: dict[SimulatedNpu, FakeNpu] = {}
_NPUS_LOCK = threading.Lock()


def _process_npu(config: SimulatedNpu) -> FakeNpu:
    """The per-process shared state for ``config`` (in-process init overlap detection)."""
    from rknnlaunch.npu import soc_by_name

    with _NPUS_LOCK:
        npu = _NPUS.get(config)
        if npu is None:
            soc = soc_by_name(config.soc)
            assert soc is not None
            npu = _NPUS[config] = FakeNpu(
                soc,
                runtime_version=config.runtime_version,
                output_shapes=config.output_shapes,
                init_window=0.0,
            )
        return npu


_GIL_LOOPS_PER_MS: list[float] = []


def hold_gil(ms: float) -> None:
    """Burn about ``ms`` of CPU in one C call (``sum`` over a range never lets the GIL go).

    Calibrated on this thread's CPU time, best of five: wall-clock calibration on a busy machine
    counted preemption as work and made every later call short by that much.
    """
    if ms <= 0:
        return
    if not _GIL_LOOPS_PER_MS:
        import time

        best = float("inf")
        for _ in range(5):
            start = time.thread_time()
            sum(range(200_000))
            best = min(best, time.thread_time() - start)
        _GIL_LOOPS_PER_MS.append(200_000 / max(best * 1000.0, 1e-6))
    sum(range(int(_GIL_LOOPS_PER_MS[0] * ms)))


_YOLO_OUTPUTS: list[list[np.ndarray]] = []


def _yolo_outputs() -> list[np.ndarray]:
    if not _YOLO_OUTPUTS:
        from rknnlaunch.yolo.testing import SynthObject, encode_rknn

        objects = [
            SynthObject((100.0, 140.0, 300.0, 400.0), 0, 0.9),
            SynthObject((400.0, 300.0, 460.0, 380.0), 2, 0.7),
        ]
        _YOLO_OUTPUTS.append(encode_rknn(objects))
    return _YOLO_OUTPUTS[0]


class SimRKNNLite(FakeRKNNLite):
    """One simulated RKNNLite context (see `SimulatedNpu`)."""

    def __init__(self, config: SimulatedNpu, npu: FakeNpu) -> None:
        super().__init__(npu)
        self.config = config
        self._core_fds: list[int] = []
        self._cores: list[int] = []

    def init_runtime(
        self,
        target: str | None = None,
        device_id: str | None = None,
        async_mode: bool = False,
        core_mask: int = 0,
    ) -> int:
        import fcntl
        import time

        fd = os.open(os.path.join(self.config.lock_dir, "init.lock"), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _log_native(
                    "E RKNN: [sim] rknn_init: another process is initialising concurrently (driver crash)"
                )
                return -1
            time.sleep(0.002)  # an init takes a while: overlaps must be able to happen
            code = super().init_runtime(target, device_id, async_mode, core_mask)
        finally:
            os.close(fd)
        if code == 0:
            mask = self.effective_mask or 1  # mask 0 (single-core SoCs): core 0
            cores = [core for core in range(3) if mask & (1 << core)]
            self._cores = cores
            self._core_fds = [
                os.open(os.path.join(self.config.lock_dir, f"core{core}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
                for core in cores
            ]
        return code

    def inference(
        self,
        inputs: list[Any],
        data_type: Any = None,
        data_format: Any = None,
        inputs_pass_through: Any = None,
        get_frame_id: bool = False,
    ) -> list[np.ndarray] | None:
        import signal
        import time

        if not self.initialised or self.released:
            _log_python(
                "E inference: Runtime environment is not inited, please call init_runtime to init it first!"
            )
            return None
        x = self._check_inputs(inputs)
        if x is None:
            return None
        # An image's centre survives a letterbox; other inputs: their first element.
        first = int(x[0, x.shape[1] // 2, x.shape[2] // 2, 0]) if x.ndim == 4 else int(x.flat[0])
        if self.config.crash_value is not None and first == self.config.crash_value:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.config.none_value is not None and first == self.config.none_value:
            _log_native("E RKNN: [sim] failed to submit!")
            return None
        hold_gil(self.config.gil_ms / 2)
        latency = self.config.latency_ms(len(self._core_fds)) / 1000.0
        if latency > 0:
            started, ends = self._queue_job(latency)
            time.sleep(max(0.0, ends - time.monotonic()))
            if self.config.trace:
                line = "".join(f"{core} {started} {ends}\n" for core in self._cores)
                with open(os.path.join(self.config.lock_dir, f"trace-{os.getpid()}"), "a") as log:
                    log.write(line)
        self.inference_count += 1
        if self.config.cycle_kb:
            cycle: dict[str, Any] = {"data": bytearray(self.config.cycle_kb * 1024)}
            cycle["self"] = cycle
        if self.config.outputs == "yolo":
            outputs = [output.copy() for output in _yolo_outputs()]
        else:
            outputs = [np.full(shape, float(first), dtype=np.float32) for shape in self.output_shapes()]
        hold_gil(self.config.gil_ms / 2)
        return outputs

    def _queue_job(self, latency: float) -> tuple[float, float]:
        """Queue one job on this context's cores: (start, end) on the system-wide monotonic clock."""
        import fcntl
        import struct
        import time

        for fd in self._core_fds:  # ascending core order: no deadlock between multi-core contexts
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            free_at = [struct.unpack("d", os.pread(fd, 8, 0).ljust(8, b"\0"))[0] for fd in self._core_fds]
            started = max(time.monotonic(), *free_at)
            ends = started + latency
            for fd in self._core_fds:
                os.pwrite(fd, struct.pack("d", ends), 0)
            return started, ends
        finally:
            for fd in reversed(self._core_fds):
                fcntl.flock(fd, fcntl.LOCK_UN)

    def release(self) -> None:
        super().release()
        if self.initialised is False and self._core_fds:
            # Tests check every context was released, also in worker processes.
            marker = os.path.join(self.config.lock_dir, f"released-{os.getpid()}-{id(self)}")
            with open(marker, "w", encoding="utf-8") as handle:
                handle.write(",".join(str(fd) for fd in self._core_fds))
        for fd in self._core_fds:
            os.close(fd)
        self._core_fds = []
