""".rknn metadata is validated, not trusted: wrong types, hostile nesting and huge numbers are
`ModelError`s naming the field for every reader (inspect, doctor, open, detect, bench); the custom
string and I/O info rknn-toolkit2 writes into the FlatBuffer block are read back."""

from __future__ import annotations

import contextlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rknnfile_builder import flatbuffer_block, rknn_bytes

from rknnlaunch import ModelError
from rknnlaunch.cli._main import main
from rknnlaunch.model import ModelFacts, encode_custom_string
from rknnlaunch.model._rknnfile import parse_rknn

SHA = "ab" * 32


def with_body(body: bytes) -> bytes:
    """A valid header + block followed by ``body`` as the trailing metadata."""
    good = rknn_bytes()
    (block,) = struct.unpack_from("<Q", good, 16)
    return good[: 64 + block] + struct.pack("<Q", len(body)) + body


def good_meta() -> dict[str, Any]:
    good = rknn_bytes()
    (block,) = struct.unpack_from("<Q", good, 16)
    parsed: dict[str, Any] = json.loads(good[64 + block + 8 :])
    return parsed


def facts(**overrides: Any) -> ModelFacts:
    values: dict[str, Any] = {
        "class_names": ["Normal", "Fall"],
        "input_size": (640, 640),
        "pad_value": 114,
        "output_layout": "ultralytics",
        "quantization": "int8-hybrid",
        "source_onnx_sha256": SHA,
        "calibration_sha256": SHA,
        "calibration_images": 13,
        "toolkit_version": "2.5.0",
    }
    values.update(overrides)
    return ModelFacts.model_validate(values)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda m: m.update(version=5), "metadata.version"),
        (lambda m: m["norm_tensor"][0].update(tensor_id={}), "metadata.norm_tensor[0].tensor_id"),
        (lambda m: m["norm_tensor"][1].update(size=[1, 10**30, 8400]), "metadata.norm_tensor[1].size[1]"),
        (lambda m: m["norm_tensor"][0].update(url=["images"]), "metadata.norm_tensor[0].url"),
        (lambda m: m["graph"][0].update(right_tensor_id="0"), "metadata.graph[0].right_tensor_id"),
        (lambda m: m.update(target_platform=[3588]), "metadata.target_platform"),
        (lambda m: m.update(graph={"left": "input"}), "metadata.graph"),
        (lambda m: m["norm_tensor"][0].update(dtype={"vx_type": 7}), "metadata.norm_tensor[0].dtype"),
    ],
)
def test_wrong_types_name_the_field(mutate: Any, field: str) -> None:
    meta = good_meta()
    mutate(meta)
    with pytest.raises(ModelError) as caught:
        parse_rknn(with_body(json.dumps(meta).encode()), "bad.rknn")
    assert f"the metadata is malformed: {field}" in str(caught.value)
    assert "bad.rknn" in str(caught.value) and caught.value.fix


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper than 16 levels"),
        (b'{"graph": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", "nests deeper"),
        (b'{"version": ' + b"9" * 5_000 + b"}", "not JSON"),  # beyond Python's int digit limit
        (b"[1, 2]", "a JSON list, not an object"),
        (b'"text"', "a JSON str, not an object"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_hostile_metadata_is_refused_before_parsing(body: bytes, says: str) -> None:
    with pytest.raises(ModelError, match=says):
        parse_rknn(with_body(body), "bad.rknn")


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    meta = good_meta()
    meta["name"] = '[[[[[[[[[[[[[[[[[[[[[[[[[[[{{{{{{{{{{{{{{{{{{{{{{ \\" [[['
    assert parse_rknn(with_body(json.dumps(meta).encode())).name == meta["name"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from(
        ["version", "target_platform", "name", "norm_tensor", "graph", "ori_network_platform"]
    ),
    tensor_key=st.sampled_from(["tensor_id", "size", "url", "dtype", "shape", "name"]),
    value=_json,
)
def test_any_json_value_anywhere_is_parsed_or_a_model_error(key: str, tensor_key: str, value: Any) -> None:
    for meta in (good_meta(), good_meta()):
        meta[key] = value
        meta["norm_tensor"] = meta.get("norm_tensor") if key == "norm_tensor" else good_meta()["norm_tensor"]
        if key != "norm_tensor":
            meta["norm_tensor"][0][tensor_key] = value
        try:
            info = parse_rknn(with_body(json.dumps(meta).encode()))
        except ModelError as exc:
            assert "metadata" in exc.problem and exc.fix
        else:
            assert all(isinstance(t.name, str) for t in info.inputs + info.outputs)
            assert all(isinstance(d, int) for t in info.inputs + info.outputs for d in t.shape)


def test_custom_string_and_io_info_are_read_from_the_flatbuffer() -> None:
    block = flatbuffer_block(
        {
            11: encode_custom_string(facts()),
            12: json.dumps({"images": {"dtype": "int8", "layout": "NHWC"}}),
            13: json.dumps({"output0": {"dtype": "float16", "layout": "NCHW"}}),
        }
    )
    info = parse_rknn(rknn_bytes(block=block, inputs=(("images", (1, 3, 640, 640)),)), "m.rknn")
    assert info.facts == facts()
    assert info.facts is not None and info.facts.class_names == ["Normal", "Fall"]
    assert [t.describe() for t in info.inputs] == ["images [1x640x640x3] NHWC int8"]
    assert [t.describe() for t in info.outputs] == ["output0 [1x6x8400] NCHW float16"]
    assert info.warnings() == []
    assert info.as_dict()["facts"]["pad_value"] == 114


def test_other_tools_custom_strings_are_kept_but_not_facts() -> None:
    for custom in ("hello", '{"author": "me"}', ""):
        info = parse_rknn(rknn_bytes(block=flatbuffer_block({11: custom})))
        assert info.facts is None and info.custom_string == (custom or None)


def test_malformed_facts_name_the_field() -> None:
    bad = json.dumps({"rknnlaunch": {**facts().as_dict(), "class_names": "Normal"}})
    with pytest.raises(ModelError, match=r"rknnlaunch\.class_names: Input should be a valid list"):
        parse_rknn(rknn_bytes(block=flatbuffer_block({11: bad})), "m.rknn")
    deep = '{"rknnlaunch": ' + "[" * 1000 + "]" * 1000 + "}"
    with pytest.raises(ModelError, match="nests deeper"):
        parse_rknn(rknn_bytes(block=flatbuffer_block({11: deep})), "m.rknn")


@settings(max_examples=200, deadline=None)
@given(block=st.binary(max_size=300), cut=st.integers(min_value=0, max_value=400))
def test_garbage_flatbuffer_blocks_never_raise_anything_but_model_error(block: bytes, cut: int) -> None:
    with contextlib.suppress(ModelError):
        parse_rknn(rknn_bytes(block=block[:cut]))


def test_int8_single_output_is_warned_about() -> None:
    block = flatbuffer_block({13: json.dumps({"output0": {"dtype": "int8", "layout": "NCHW"}})})
    info = parse_rknn(rknn_bytes(block=block))
    [(problem, fix)] = info.warnings()
    assert "every score rounds to 0" in problem and "rknnlaunch convert" in fix


def hostile_model(tmp_path: Path) -> Path:
    meta = good_meta()
    meta["norm_tensor"][0]["tensor_id"] = {}
    path = tmp_path / "hostile.rknn"
    path.write_bytes(with_body(json.dumps(meta).encode()))
    return path


def test_every_reader_reports_the_field_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], host_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = hostile_model(tmp_path)
    assert main(["model", "inspect", str(model)]) == 1
    err = capsys.readouterr().err
    assert "metadata.norm_tensor[0].tensor_id" in err and "Traceback" not in err
    host = host_factory("rk3588-drm")
    code = main(["doctor", "--json", "--root", str(host.root), "--model", str(model)])
    report = json.loads(capsys.readouterr().out)  # still prints its JSON
    check = next(c for c in report["checks"] if c["id"] == "model")
    assert code == 1 and check["status"] == "fail" and "tensor_id" in check["summary"]
    import rknnlaunch
    from rknnlaunch.settings._env import load_settings

    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    with pytest.raises(ModelError, match="tensor_id"):
        rknnlaunch.open(model, backend="npu", settings=settings, rknnlite=lambda: None)  # type: ignore[arg-type, return-value]
    capsys.readouterr()
    monkeypatch.setenv("RKNNLAUNCH_ROOT", str(host.root))
    cv2 = pytest.importorskip("cv2")
    import numpy as np

    image = tmp_path / "frame.png"
    cv2.imwrite(str(image), np.zeros((64, 64, 3), np.uint8))
    for argv in (["detect", str(image), "--model", str(model)], ["bench", "--model", str(model), "-n", "1"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "metadata.norm_tensor[0].tensor_id" in err and "Traceback" not in err


def test_inspect_shows_facts_layout_and_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.rknn"
    block = flatbuffer_block(
        {
            11: encode_custom_string(facts()),
            12: json.dumps({"images": {"dtype": "int8", "layout": "NHWC"}}),
            13: json.dumps({"output0": {"dtype": "int8", "layout": "NCHW"}}),
        }
    )
    model.write_bytes(rknn_bytes(block=block, inputs=(("images", (1, 3, 640, 640)),)))
    assert main(["model", "inspect", str(model)]) == 0
    out = capsys.readouterr().out
    assert "images [1x640x640x3] NHWC int8" in out
    assert "classes          Normal, Fall" in out and "int8-hybrid" in out and "ultralytics" in out
    assert "warning: output output0 [1x6x8400] is int8" in out


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from(
        [
            "class_names",
            "input_size",
            "pad_value",
            "output_layout",
            "quantization",
            "source_onnx_sha256",
            "calibration_images",
            "mean",
            "schema",
        ]
    ),
    value=_json,
)
def test_any_value_in_our_facts_is_read_or_a_model_error_naming_it(key: str, value: Any) -> None:
    text = json.dumps({"rknnlaunch": {**facts().as_dict(), key: value}})
    try:
        info = parse_rknn(rknn_bytes(block=flatbuffer_block({11: text})), "m.rknn")
    except ModelError as exc:
        assert f"rknnlaunch.{key}" in exc.problem and exc.fix
    else:
        assert info.facts is not None


def test_doctor_warns_about_a_blind_int8_model(host_factory: Any, tmp_path: Path) -> None:
    from rknnlaunch.preflight._checks import run_checks
    from rknnlaunch.settings._env import load_settings

    host = host_factory("rk3588-drm")
    model = tmp_path / "blind.rknn"
    block = flatbuffer_block({13: json.dumps({"output0": {"dtype": "int8", "layout": "NCHW"}})})
    model.write_bytes(rknn_bytes(block=block))
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root)})
    results = {
        r.id: r
        for r in run_checks(settings, None, model, opener=lambda _p: None, toolkit_version=lambda: None)
    }
    assert results["model"].status == "warn"
    assert "every score rounds to 0" in results["model"].summary and "--fp16" in (results["model"].fix or "")


@pytest.mark.parametrize("layout", ["ultralytics-seg", "ultralytics-pose", "ultralytics-obb"])
def test_ultralytics_task_heads_are_facts_convert_can_embed(layout: str) -> None:
    """`convert` detects these layouts (the corpus' YOLO11s-seg); the facts must take them."""
    assert facts(output_layout=layout).output_layout == layout
    task = {"ultralytics-seg": "segment", "ultralytics-pose": "pose", "ultralytics-obb": "obb"}[layout]
    # convert wrote task "detect" beside these layouts: the layout's task wins
    assert facts(output_layout=layout).task == facts(output_layout=layout, task="detect").task == task
