"""Pure decisions of `convert`: target, input size, the float16 head tail, the quantisation config
edit and the toolkit-log summary."""

from __future__ import annotations

import pytest

from rknnlaunch import ModelError, UsageError
from rknnlaunch.convert import GraphNode, float_tail, summarise_log, with_float_layers
from rknnlaunch.convert._plan import check_target, fix_for, input_size, parse_size


def node(op: str, inputs: str, outputs: str) -> GraphNode:
    return GraphNode(op, tuple(inputs.split()), tuple(outputs.split()))


# The tail of an Ultralytics YOLOv8 head after rknn-toolkit2 2.5.0's graph optimisation (names as
# the toolkit writes them in its *.model file).
HEAD = [
    node("Conv", "feat w b", "box2"),
    node("Conv", "feat w2 b2", "cls2"),
    node("Concat", "box2 cls2", "cat2"),
    node("Concat", "cat0 cat1 cat2", "cat3-rs"),
    node("Reshape", "cat3-rs shape", "cat3_rs"),
    node("Split", "cat3_rs split", "split0-rs split1-rs"),
    node("Reshape", "split0-rs c", "dfl_reshape"),
    node("Sigmoid", "split1-rs", "sigmoid-rs"),
    node("exSoftmax13", "dfl_reshape", "dfl_softmax"),
    node("Conv", "dfl_softmax dflw", "dfl_conv"),
    node("Split", "dfl_conv s", "lt-rs rb-rs"),
    node("Sub", "anchors lt-rs", "sub-rs"),
    node("Add", "anchors rb-rs", "add-rs"),
    node("Add", "sub-rs add-rs", "add2-rs"),
    node("Mul", "add2-rs half", "div-rs"),
    node("Sub", "add-rs sub-rs", "sub1-rs"),
    node("Concat", "div-rs sub1-rs", "cat4-rs"),
    node("Mul", "cat4-rs strides", "mul2-rs"),
    node("Concat", "mul2-rs sigmoid-rs", "output0-rs"),
    node("Reshape", "output0-rs s", "output0_int8"),
    node("exDataConvert", "output0_int8", "output0"),
]


def test_float_tail_starts_at_the_box_score_split() -> None:
    tail = float_tail(HEAD, "output0")
    assert tail[:2] == ("split0-rs", "split1-rs")
    assert set(tail) == {
        "split0-rs", "split1-rs", "dfl_reshape", "sigmoid-rs", "dfl_softmax", "dfl_conv", "lt-rs", "rb-rs",
        "sub-rs", "add-rs", "add2-rs", "div-rs", "sub1-rs", "cat4-rs", "mul2-rs", "output0-rs",
        "output0_int8", "output0",
    }  # fmt: skip
    assert "cat3_rs" not in tail and "box2" not in tail


def test_a_graph_without_the_split_is_refused_not_built_blind() -> None:
    with pytest.raises(ModelError, match="--fp16"):
        float_tail([node("Conv", "x w", "y"), node("Sigmoid", "y", "output0")], "output0")
    with pytest.raises(ModelError, match="no node producing"):
        float_tail(HEAD, "nope")


CONFIG = """custom_quantize_layers: {}
quantize_parameters:
    images:
        qtype: asym
"""


def test_float_layers_replace_the_custom_block() -> None:
    edited = with_float_layers(CONFIG, ["a/b-rs", "output0", "we'ird:name"])
    assert edited.startswith(
        "custom_quantize_layers:\n    a/b-rs: float16\n    output0: float16\n    'we''ird:name': float16\n"
        "quantize_parameters:\n"
    )
    again = with_float_layers(edited, ["x"])
    assert again.startswith("custom_quantize_layers:\n    x: float16\nquantize_parameters:")
    assert with_float_layers("quantize_parameters: {}\n", ["x"]).startswith(
        "custom_quantize_layers:\n    x: float16"
    )


def test_log_summary_counts_the_known_regtask_lines_and_keeps_real_errors() -> None:
    regtask = (
        "E RKNN: [08:26:39.110] REGTASK: The bit width of field value exceeds the limit, target: v2, "
        "offset: 0x405c, shift = 0, limit: 0x1fff, value: 0x20cf"
    )
    lines = [regtask] * 32 + [
        "I Loading : 100%|████| 144/144 [00:00<00:00, 4366.19it/s]",
        "W load_onnx: The config.mean_values is None, zeros will be set for input 0!",
        "W Set temperate env rknn_compute_order=WidthFirst",
        "E load_onnx: The input name x is not exists.",
        "E load_onnx: The input name x is not exists.",
        "E rknn-toolkit2 version: 2.5.0",
    ]
    summary = summarise_log(lines)
    assert summary.regtask_lines == 32
    assert summary.errors == ("load_onnx: The input name x is not exists.",)
    assert summary.warnings == ("load_onnx: The config.mean_values is None, zeros will be set for input 0!",)
    described = summary.describe()
    assert "32 x" in described[0] and "harmless" in described[0]
    assert fix_for(summary, "load").startswith("check that the file is a valid ONNX")


@pytest.mark.parametrize(
    ("shape", "given", "expected"),
    [
        ((1, 3, 640, 640), None, (640, 640)),
        ((1, 3, 384, 640), None, (640, 384)),
        ((1, 3, "h", "w"), (320, 320), (320, 320)),
    ],
)
def test_input_size(
    shape: tuple[object, ...], given: tuple[int, int] | None, expected: tuple[int, int]
) -> None:
    assert input_size(shape, given) == expected  # type: ignore[arg-type]


def test_dynamic_input_says_which_size_to_give() -> None:
    with pytest.raises(UsageError, match="dynamic size") as caught:
        input_size((1, 3, "height", "width"), None)
    assert "--input-size 640" in (caught.value.fix or "")
    with pytest.raises(ModelError, match="not an NCHW image"):
        input_size((1, 8400), None)


def test_sizes_and_targets() -> None:
    assert parse_size("640") == (640, 640) and parse_size("640x384") == (640, 384)
    for bad in ("abc", "641", "16", "640x"):
        with pytest.raises(UsageError):
            parse_size(bad)
    assert check_target("RK3588") == "rk3588"
    with pytest.raises(UsageError, match="unknown target SoC 'rk9999'") as caught:
        check_target("rk9999")
    assert "rk3576" in (caught.value.fix or "")


@pytest.mark.parametrize("layout", ["ultralytics", "ultralytics-seg", "ultralytics-pose", "ultralytics-obb"])
def test_every_ultralytics_table_head_gets_the_hybrid_build(layout: str) -> None:
    """Issue 19: the YOLO11s-seg (table + protos: two outputs) was built plain int8, agreement 0.000."""
    from rknnlaunch.convert._convert import quantization_choice

    quantization, why = quantization_choice(layout, fp16=False)
    assert quantization == "int8-hybrid" and layout in why
    assert quantization_choice(layout, fp16=True)[0] == "fp16"


@pytest.mark.parametrize("layout", ["rknn-6", "rknn-yolov5", "rknn-seg", "rknn-pose"])
def test_split_heads_stay_plain_int8(layout: str) -> None:
    from rknnlaunch.convert._convert import quantization_choice

    assert quantization_choice(layout, fp16=False)[0] == "int8"


def test_the_seg_table_tail_is_found_past_the_protos_output() -> None:
    """A seg graph's outputs are the table and the protos; the tail is the table's."""
    from rknnlaunch.convert._convert import _table_tail

    protos = [node("Conv", "feat pw", "protos")]
    tail = _table_tail([*protos, *HEAD], ("protos", HEAD[-1].outputs[0]))
    assert tail == float_tail(HEAD, HEAD[-1].outputs[0])
    with pytest.raises(ModelError, match="box/score Split"):
        _table_tail(protos, ("protos",))


def test_a_plain_int8_seg_table_is_warned_about() -> None:
    """What captcha-recognizer's YOLO11s-seg was built as before: output0 [1, 4+nc+32, N] int8 beside
    its float protos (two outputs: the old check looked at single-output models only)."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))
    from rknnfile_builder import flatbuffer_block, rknn_bytes

    from rknnlaunch.model._rknnfile import parse_rknn

    outputs = (("output0", (1, 38, 8400), "int8", "NCHW"), ("output1", (1, 32, 160, 160), "int8", "NCHW"))
    block = flatbuffer_block(
        {13: json.dumps({"output0": {"dtype": "int8", "layout": "NCHW"}, "output1": {"dtype": "int8"}})}
    )
    [(problem, fix)] = parse_rknn(rknn_bytes(outputs=outputs, block=block)).warnings()
    assert "output0 [1x38x8400] is int8" in problem and "Ultralytics [1, 4+nc(+extra), N] table" in problem
    assert "rknnlaunch convert" in fix


def _failed_report(model: str, warnings: list[str]) -> object:
    from rknnlaunch.validate._compare import Totals
    from rknnlaunch.validate._run import ValidateReport

    total = Totals(6, 7, 0, 0, 0.0, None, None, None, {}, (0.99, 0.9), (0.99, 0.9))
    return ValidateReport(
        model, "m.onnx", "npu", {}, [], total, ["output0", "output1"], ["s"], None, None, "bgr", {}, warnings
    )


def test_validate_names_a_plain_int8_table_head_as_the_likely_cause() -> None:
    """What the corpus' YOLO11s-seg said when built plain int8 (agreement 0.000): "quantisation error".
    The model's own header explains it first."""
    import io

    from rknnlaunch.validate._run import print_report

    warning = "output output0 [1x38x8400] is int8: in an Ultralytics [1, 4+nc(+extra), N] table ..."
    out = io.StringIO()
    print_report(_failed_report("seg.rknn", [warning]), out)  # type: ignore[arg-type]
    text = out.getvalue()
    assert "FAIL" in text and "likely cause: a plain-int8 Ultralytics table head" in text
    assert "--quant-images" in text and text.count("likely cause:") == 1
    out = io.StringIO()
    print_report(_failed_report("other.rknn", []), out)  # type: ignore[arg-type]
    assert "likely cause: the colour order is swapped" in out.getvalue()  # the input hypothesis, as before
