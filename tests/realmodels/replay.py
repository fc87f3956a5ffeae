"""`ReplayRKNNLite`: an RKNNLite stand-in that answers with outputs recorded from Rockchip's simulator.

The artifact behind it: rknn-toolkit2 2.5.0 builds each corpus model (tests/realmodels/record.py)
and, in the same process, runs it on its simulator (``init_runtime()`` without a target: the
simulator refuses a .rknn loaded from disk). Every input tensor the user paths produced is answered
there and stored with its outputs, keyed by a hash of its bytes, beside the .rknn the build wrote.
Replaying returns those outputs bit for bit, so `Pool`, `Detector`, `detect`, `bench` and
`validate` can be checked on real files in a venv without the toolkit (and in process workers).

Like RKNNLite (tests/sdk/rknnlite_fake.py, docs/hardware.md#rknnlite-behaviour) every call returns
0 / -1 / None and logs the reason; an input that was never recorded is such a failure, logged with
its hash and what to rerun.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

MANIFEST = "manifest.json"
INPUTS = "inputs.npz"
OUTPUTS = "outputs.npz"
MODEL = "model.rknn"
VALIDATE_ROWS: list[dict[str, Any]] = []
"""`validate`'s figures per replayed build (tests/realmodels/conftest.py prints them as a table)."""
RECORD_COMMAND = "python tests/realmodels/record.py (in the rknn-toolkit2 venv; .ci/run's slow step)"


def input_key(inputs: list[Any]) -> str:
    """A hash of the tensors' dtypes, shapes (a leading batch of 1 dropped) and bytes."""
    digest = hashlib.sha256()
    for tensor in inputs:
        array = np.ascontiguousarray(np.asarray(tensor))
        shape = array.shape[1:] if array.ndim >= 2 and array.shape[0] == 1 else array.shape
        digest.update(f"{array.dtype.str}{shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _log(line: str) -> None:
    sys.stderr.write(line + "\n")


@dataclass
class Recording:
    """One model build's recorded answers: input key -> (inputs, outputs), plus the manifest."""

    folder: Path
    manifest: dict[str, Any]
    inputs: dict[str, list[np.ndarray]]
    outputs: dict[str, list[np.ndarray]]

    @property
    def model(self) -> Path:
        return self.folder / MODEL

    def sources(self, prefix: str = "") -> dict[str, str]:
        """Input key -> where it came from (e.g. ``detector:astronaut.png``), filtered by prefix."""
        found: dict[str, str] = self.manifest["sources"]
        return {key: source for key, source in found.items() if source.startswith(prefix)}

    @classmethod
    def load(cls, folder: Path) -> Recording:
        manifest = json.loads((folder / MANIFEST).read_text())
        return cls(folder, manifest, _unpack(folder / INPUTS), _unpack(folder / OUTPUTS))

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        np.savez(self.folder / INPUTS, **_pack(self.inputs))
        np.savez(self.folder / OUTPUTS, **_pack(self.outputs))
        (self.folder / MANIFEST).write_text(json.dumps(self.manifest, indent=1, sort_keys=True))


def _pack(table: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    return {f"{key}__{index}": array for key, arrays in table.items() for index, array in enumerate(arrays)}


def _unpack(path: Path) -> dict[str, list[np.ndarray]]:
    table: dict[str, list[np.ndarray]] = {}
    with np.load(path) as stored:
        for name in sorted(stored.files, key=lambda n: (n.rpartition("__")[0], int(n.rpartition("__")[2]))):
            table.setdefault(name.rpartition("__")[0], []).append(stored[name])
    return table


_LOADED: dict[str, Recording] = {}


def load_recording(folder: str) -> Recording:
    """Once per process (worker processes each load their own)."""
    if folder not in _LOADED:
        _LOADED[folder] = Recording.load(Path(folder))
    return _LOADED[folder]


class _Answers(Protocol):
    def answer(self, inputs: list[Any]) -> list[np.ndarray] | None: ...


class _StandIn:
    """RKNNLite's call protocol (load_rknn / init_runtime / inference / release, 0/-1/None)."""

    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7
    NPU_CORE_ALL = 0xFFFF

    def __init__(self, answers: _Answers, model_sha256: str) -> None:
        self._answers = answers
        self._sha256 = model_sha256
        self.loaded = False
        self.initialised = False
        self.core_mask: int | None = None
        self.inference_count = 0

    def load_rknn(self, path: str) -> int:
        if not os.path.isfile(path):
            _log(f"E load_rknn: Invalid RKNN model path: {path}")
            return -1
        got = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        if got != self._sha256:
            _log(
                f"E load_rknn: [replay] {path} (sha256 {got[:12]}) is not the recorded model "
                f"({self._sha256[:12]})"
            )
            return -1
        self.loaded = True
        return 0

    def init_runtime(
        self,
        target: str | None = None,
        device_id: str | None = None,
        async_mode: bool = False,
        core_mask: int = 0,
    ) -> int:
        if not self.loaded:
            _log("E init_runtime: Model is not loaded yet, this interface should be called after load_rknn!")
            return -1
        self.core_mask = core_mask
        self.initialised = True
        return 0

    def inference(self, inputs: list[Any], *args: Any, **kwargs: Any) -> list[np.ndarray] | None:
        if not self.initialised:
            _log("E inference: Runtime environment is not inited, please call init_runtime to init it first!")
            return None
        self.inference_count += 1
        return self._answers.answer(list(inputs))

    def release(self) -> None:
        self.initialised = False


@dataclass(frozen=True)
class ReplayNpu:
    """A picklable RKNNLite factory over one recording folder (usable by process workers)."""

    folder: str

    def __call__(self) -> ReplayRKNNLite:
        return ReplayRKNNLite(load_recording(self.folder))


class ReplayRKNNLite(_StandIn):
    """Answers each input with its recorded simulator outputs (copies: callers may write to them)."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        super().__init__(self, str(recording.manifest["rknn_sha256"]))

    def answer(self, inputs: list[Any]) -> list[np.ndarray] | None:
        key = input_key(inputs)
        outputs = self.recording.outputs.get(key)
        if outputs is None:
            shapes = ", ".join(f"{np.asarray(t).dtype}{tuple(np.asarray(t).shape)}" for t in inputs)
            _log(
                f"E inference: [replay] no recording for input {key[:16]} ({shapes}) in "
                f"{self.recording.folder} ({len(self.recording.outputs)} recorded); the inputs the "
                f"user paths make changed: rerun {RECORD_COMMAND}"
            )
            return None
        return [output.copy() for output in outputs]


class Simulate(Protocol):
    """One inference on rknn-toolkit2's simulator (`rknnlaunch.convert.Converted.infer`)."""

    def __call__(self, nhwc: Any) -> list[Any]: ...


class RecordingRKNNLite(_StandIn):
    """The recorder's stand-in: answers from the simulator and keeps every (input, outputs) pair.

    The simulator handle lives in this process (it cannot be pickled): use thread workers.
    """

    def __init__(self, simulate: Simulate, recording: Recording, source: str) -> None:
        self.simulate = simulate
        self.recording = recording
        self.source = source
        super().__init__(self, str(recording.manifest["rknn_sha256"]))

    def answer(self, inputs: list[Any]) -> list[np.ndarray] | None:
        return record(self.simulate, self.recording, inputs, self.source)


def record(simulate: Simulate, recording: Recording, inputs: list[Any], source: str) -> list[np.ndarray]:
    """The simulator's outputs for ``inputs`` (once per distinct input), stored in ``recording``."""
    key = input_key(inputs)
    if key not in recording.outputs:
        if len(inputs) != 1:
            raise ValueError("the simulator seam (Converted.infer) takes one image input")
        batch = np.asarray(inputs[0])
        recording.outputs[key] = [np.asarray(o).copy() for o in simulate(batch)]
        # a copy: Letterboxer reuses its buffer for the next frame
        recording.inputs[key] = [np.array(batch[0] if batch.ndim == 4 else batch, copy=True)]
    recording.manifest.setdefault("sources", {}).setdefault(key, source)
    return [output.copy() for output in recording.outputs[key]]
