"""Build the device plugin's functional probe models: one tiny ONNX graph of our own, converted by
rknn-toolkit2 into an .rknn file per NPU family.

The graph is one 3x3 convolution (3 -> 4 channels, fixed weights) and a ReLU on an 8x8 RGB input:
enough for the NPU to load, initialise and run a real job on the core it is pinned to, small
enough to cost nothing (a few microseconds of NPU time). Nothing third-party goes in.

Run at image build (images/plugin-probe/Dockerfile), in an x86_64 Python with rknn-toolkit2 of the
image's librknnrt version installed (images/probe/install-toolkit2.sh; checked with 2.3.2 and 2.5.0):

    python make_probe_model.py --out /out        # probe-rk3588.rknn, probe-rk3576.rknn, ...
    python make_probe_model.py --onnx-only --out DIR   # just probe.onnx (no toolkit needed)

The plugin finds the file for its SoC through ``--probe-model /opt/rknpu-probe/probe-{soc}.rknn``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

# One build per NPU family; the other SoC names of a family get a copy (the runtime accepts a
# model built for any SoC of the same NPU: RK3566 and RK3568 share RKNPU2-LITE).
TARGETS = {
    "rk3588": ("rk3588",),
    "rk3576": ("rk3576",),
    "rk3566": ("rk3566", "rk3568"),
    "rk3562": ("rk3562",),
}
INPUT_SHAPE = (1, 3, 8, 8)
OUTPUT_CHANNELS = 4
OPSET = 13


EXPECTED_FILE = "probe-expected.json"
"""What every core must answer for the probe's input (the plugin's probe child compares)."""
TOLERANCE = 0.01  # fp16 on the NPU: the toolkit's simulator is within 1.2e-4 of onnxruntime
INPUT_VALUE = 255  # every input byte: 1.0 after the model's /255, so the weights dominate the output


def probe_parameters() -> tuple[Any, Any]:
    """The convolution's weights (4x3x3x3) and bias (4): deterministic, small, of mixed sign."""
    import numpy as np

    channels = INPUT_SHAPE[1]
    # Each output channel weighs the input with its own sign pattern, so a core returning garbage
    # or zeros shows up as wrong values, not just as a shape.
    pattern = np.array([1.0, -0.5, 0.25, 0.5], dtype=np.float32)
    weights = np.empty((OUTPUT_CHANNELS, channels, 3, 3), dtype=np.float32)
    for out_channel in range(OUTPUT_CHANNELS):
        for in_channel in range(channels):
            weights[out_channel, in_channel] = pattern[(out_channel + in_channel) % len(pattern)] / 9.0
    bias = np.linspace(0.0, 0.3, OUTPUT_CHANNELS, dtype=np.float32)
    return weights, bias


def expected_output() -> Any:
    """The graph's output (1x4x8x8) for an image of INPUT_VALUE bytes, normalised as the .rknn does (/255)."""
    import numpy as np

    weights, bias = probe_parameters()
    x = np.pad(np.full(INPUT_SHAPE[1:], INPUT_VALUE / 255.0, dtype=np.float64), ((0, 0), (1, 1), (1, 1)))
    height, width = INPUT_SHAPE[2:]
    y = np.empty((OUTPUT_CHANNELS, height, width))
    for row in range(height):
        for col in range(width):
            window = x[:, row : row + 3, col : col + 3]
            y[:, row, col] = np.tensordot(weights.astype(np.float64), window, axes=3) + bias
    return np.maximum(y, 0.0)[np.newaxis]


def expected_json() -> str:
    values = expected_output()
    return json.dumps(
        {
            "schema": "rknpu.probe-expected/1",
            "input": {"nhwc_shape": [INPUT_SHAPE[0], *INPUT_SHAPE[2:], INPUT_SHAPE[1]], "value": INPUT_VALUE},
            "output": {"shape": list(values.shape), "values": [round(float(v), 6) for v in values.ravel()]},
            "tolerance": TOLERANCE,
        }
    )


def probe_onnx_bytes() -> bytes:
    """The probe graph (x: 1x3x8x8 float -> Conv 3x3 pad 1 -> Relu -> y: 1x4x8x8) as ONNX bytes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights, bias = probe_parameters()
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "rknpu_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, OUTPUT_CHANNELS, *INPUT_SHAPE[2:]])],
        initializer=[numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rknnlaunch"
    )
    model.ir_version = 8  # readable by the onnx versions rknn-toolkit2 2.5.0 supports
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def convert(onnx_path: Path, target: str, out: Path) -> None:
    """rknn-toolkit2: load the ONNX graph and export an fp16 .rknn for ``target`` (no dataset needed)."""
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    try:
        steps = [
            ("config", lambda: rknn.config(mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]],
                                           target_platform=target)),
            ("load_onnx", lambda: rknn.load_onnx(model=str(onnx_path))),
            ("build", lambda: rknn.build(do_quantization=False)),
            ("export_rknn", lambda: rknn.export_rknn(str(out))),
        ]  # fmt: skip
        for name, step in steps:
            code = step()
            if code not in (0, None):
                raise SystemExit(
                    f"make_probe_model: rknn-toolkit2 {name} failed for {target} (returned {code})"
                )
    finally:
        rknn.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for probe.onnx and probe-<soc>.rknn")
    parser.add_argument("--onnx-only", action="store_true", help="write probe.onnx only (no rknn-toolkit2)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    onnx_path = args.out / "probe.onnx"
    onnx_path.write_bytes(probe_onnx_bytes())
    (args.out / EXPECTED_FILE).write_text(expected_json() + "\n")
    print(f"wrote {onnx_path}, {EXPECTED_FILE}")
    if args.onnx_only:
        return 0
    for target, names in TARGETS.items():
        built = args.out / f"probe-{names[0]}.rknn"
        convert(onnx_path, target, built)
        for other in names[1:]:
            shutil.copyfile(built, args.out / f"probe-{other}.rknn")
        print(f"wrote {', '.join(f'probe-{name}.rknn' for name in names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
