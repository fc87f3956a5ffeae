"""Test stand-in for `rknnlite.api.RKNNLite` in the plugin's probe child (a separate process).

It is `tests/sdk/rknnlite_fake.FakeRKNNLite` (load/init as rknn-toolkit-lite2 is documented to
behave) plus per-core faults read from the JSON file named by ``RKNNLITE_FAKE_CONFIG`` at each
instance, so a test can break a core and later heal it while the plugin runs:

    {"soc": "rk3588", "cores": {"1": "fail", "2": "hang"}, "record": "/tmp/x/probed.txt"}

- ``fail``: the job is refused as on boards whose cores 1 and 2 are broken: librknnrt logs
  ``failed to submit!`` on fd 2 and ``inference`` logs its error and returns None;
- ``hang``: ``inference`` never returns (a wedged core);
- ``crash``: the process dies with SIGSEGV inside ``inference``;
- ``garbage``: ``inference`` returns zeros (a core that runs but computes wrong results);
- ``answer``: a probe-expected.json whose output a healthy core returns (else the base fake's);
- ``record``: each inference appends ``<core>\\n`` to that file, so tests see which cores ran.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any

import numpy as np
from rknnlite_fake import FakeNpu, FakeRKNNLite, _log_native, _log_python

from rknnlaunch.npu import mask_to_cores, soc_by_name


def _config() -> dict[str, Any]:
    with open(os.environ["RKNNLITE_FAKE_CONFIG"], encoding="utf-8") as handle:
        loaded = json.load(handle)
    return loaded if isinstance(loaded, dict) else {}


class RKNNLite(FakeRKNNLite):
    def __init__(self, verbose: bool = False) -> None:
        self.config = _config()
        soc = soc_by_name(str(self.config.get("soc", "rk3588")))
        assert soc is not None
        super().__init__(FakeNpu(soc))

    def _core(self) -> int:
        mask = self.effective_mask or 0
        cores = sorted(mask_to_cores(mask)) if mask else [0]
        return cores[0]

    def inference(self, inputs: list[Any], *args: Any, **kwargs: Any) -> Any:
        if self.initialised:
            core = self._core()
            record = self.config.get("record")
            if record:
                with open(record, "a", encoding="utf-8") as handle:
                    handle.write(f"{core}\n")
            fault = self.config.get("cores", {}).get(str(core))
            if fault == "fail":
                _log_native(
                    "E RKNN: failed to submit!, op id: 1, op name: Conv:/conv/Conv, flags: 0x5, "
                    "task start: 0, task number: 1, run task counter: 0, int status: 0"
                )
                _log_python("E inference: rknn_run failed")
                return None
            if fault == "hang":
                threading.Event().wait()
            if fault == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            answer = self.config.get("answer")
            if answer:
                with open(answer, encoding="utf-8") as handle:
                    output = json.load(handle)["output"]
                values = np.asarray(output["values"], dtype=np.float32).reshape(output["shape"])
                return [np.zeros_like(values) if fault == "garbage" else values]
        return super().inference(inputs, *args, **kwargs)
