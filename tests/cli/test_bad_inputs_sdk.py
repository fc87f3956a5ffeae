"""The bad-input table of the `rknnlaunch` CLI (issue 27): every command with bad paths, permissions,
out-of-range and non-finite numbers, wrong file types and bad environment values. Each row must
end with a non-zero exit, no traceback, the cause named (``says``) and a ``fix:`` line. Rows run
in-process through `main(argv)` (fast); a few run as real processes, some as an unprivileged user,
where the permission rules can only be seen for real."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from convert.tiny_onnx import write_yolov8_onnx
from filemodes import setpriv_prefix
from sdk.rknnfile_builder import rknn_bytes

from rknnlaunch.cli._main import main
from rknnlaunch.npu import HostRoot

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "tiny_rknn"
ENV_NAMES = (
    "RKNN_NPU_CORE_MASK",
    "RKNN_NPU_CORES",
    "RKNN_NPU_SOC",
    "RKNN_NPU_DEVICE",
    "RKNN_NPU_COMPATIBLE_FILE",
    "RKNN_NPU_LIBRKNNRT_SOURCE",
    "RKNNLAUNCH_ROOT",
    "RKNNLAUNCH_LOG_LEVEL",
)


@dataclass(frozen=True)
class Row:
    """One bad input: the words after `rknnlaunch` ({name} is a file of `inputs`), the environment,
    and what the error must say."""

    argv: str
    says: str
    env: dict[str, str] = field(default_factory=dict)
    code: int | None = None
    """The exit code when it matters (None: any non-zero)."""
    not_says: str = ""
    """What the output must not say (empty: nothing checked)."""


def png(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width`` x ``height`` (the 69-byte forgery of issue 27 when large)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    idat = zlib.compress(b"\0")
    body = struct.pack(">I", len(idat)) + b"IDAT" + idat + struct.pack(">I", zlib.crc32(b"IDAT" + idat))
    return b"\x89PNG\r\n\x1a\n" + chunk + body + b"\0\0\0\0IEND\xaeB`\x82"


def make_inputs(folder: Path) -> dict[str, str]:
    """The files the rows name: good ones and every kind of bad one."""
    import numpy as np

    cv2 = pytest.importorskip("cv2")
    folder.mkdir(parents=True, exist_ok=True)
    ok, encoded = cv2.imencode(".png", np.full((48, 64, 3), 90, np.uint8))
    assert ok
    files: dict[str, tuple[str, bytes]] = {  # key in the rows: (file name, bytes)
        "image": ("image.png", encoded.tobytes()),
        "huge": ("huge.png", png(65535, 65535)),
        "cut": ("cut.png", png(64, 64)[:40]),
        "text": ("text", b"hello, this is a text file\n"),
        "text_png": ("text.png", b"hello, this is a text file\n"),
        "empty": ("empty", b""),
        "good_rknn": ("good.rknn", rknn_bytes()),
        "truncated_rknn": ("truncated.rknn", rknn_bytes()[:100]),
        "text_rknn": ("text.rknn", b"hello, not a model\n"),
    }
    corrupt = bytearray(rknn_bytes())
    corrupt[64:200] = b"\xaa" * 136
    files["corrupt_rknn"] = ("corrupt.rknn", bytes(corrupt))
    paths = {}
    for key, (name, data) in files.items():
        (folder / name).write_bytes(data)
        paths[key] = str(folder / name)
    (folder / "dir").mkdir(exist_ok=True)
    (folder / "noimages").mkdir(exist_ok=True)
    (folder / "noimages" / "notes.txt").write_text("no images here")
    os.mkfifo(folder / "fifo")
    onnx = write_yolov8_onnx(folder / "yolo.onnx", ["person", "car"])
    (folder / "onnx_as.rknn").write_bytes(onnx.read_bytes()[:200])
    paths |= {
        "onnx_as_rknn": str(folder / "onnx_as.rknn"),
        "fifo": str(folder / "fifo"),
        "dir": str(folder / "dir"),
        "noimages": str(folder / "noimages"),
        "missing": str(folder / "missing"),
        "tmp": str(folder),
        "onnx": str(onnx),
    }
    return paths


GOOD = "--model {onnx} --no-progress"
CONTRADICTION = {"RKNN_NPU_CORE_MASK": "3", "RKNN_NPU_CORES": "2"}
VALIDATE = "validate {good_rknn} --reference {onnx}"
CONVERT = "convert {onnx} --target rk3588 --fp16"
ROWS: dict[str, Row] = {
    # --- bench: counts (each bounded, with its reason) and numbers ---------------------------
    "bench -n 0": Row("bench -n 0", "-n 0 is too small", code=2),
    "bench -n negative": Row("bench -n -5", "-n -5 is too small", code=2),
    "bench -n huge": Row("bench -n 99999999999999999999", "is too large (at most 100000", code=2),
    "bench -n 100001": Row("bench -n 100001", "at most 100000: the report keeps every frame", code=2),
    "bench -n text": Row("bench -n abc", "invalid int value: 'abc'", code=2),
    "bench -n nan": Row("bench -n nan", "invalid int value: 'nan'", code=2),
    "bench -n float": Row("bench -n 2.5", "invalid int value: '2.5'", code=2),
    "bench --warmup -1": Row("bench --warmup -1", "use --warmup 0 or more", code=2),
    "bench --warmup huge": Row("bench --warmup 10001", "--warmup 10001 is too large (at most 10000", code=2),
    "bench --threads 0": Row("bench --threads 0", "--threads 0 is too small", code=2),
    "bench --threads huge": Row("bench --threads 100000", "--threads 100000 is too large", code=2),
    "bench --conf nan": Row(f"bench {GOOD} --conf nan", "thresholds must lie in 0..1", code=2),
    "bench --conf 1.5": Row(f"bench {GOOD} --conf 1.5", "thresholds must lie in 0..1", code=2),
    "bench --iou inf": Row(f"bench {GOOD} --iou inf", "thresholds must lie in 0..1", code=2),
    "bench --iou -0.1": Row(f"bench {GOOD} --iou -0.1", "thresholds must lie in 0..1", code=2),
    "bench --pad 256": Row(f"bench {GOOD} --pad 256", "pad value", code=2),
    "bench --pad -1": Row(f"bench {GOOD} --pad -1", "pad value", code=2),
    "bench --backend gpu": Row("bench --backend gpu", "invalid choice: 'gpu'", code=2),
    "bench --backend npu, no NPU": Row(f"bench {GOOD} --backend npu", "no Rockchip NPU found", code=1),
    "bench unknown flag": Row("bench --no-such-flag", "unrecognized arguments: --no-such-flag", code=2),
    # --- bench: model and image paths ---------------------------------------------------------
    "bench --model missing": Row("bench --model {missing}", "does not exist", code=2),
    "bench --model folder": Row("bench --model {dir}", "is not a regular file", code=2),
    "bench --model text": Row("bench --model {text_rknn}", "is not an .rknn model", code=1),
    "bench --model corrupt": Row("bench --model {corrupt_rknn}", "is corrupt", code=1),
    "bench --model truncated": Row("bench --model {truncated_rknn}", "is truncated", code=1),
    "bench .rknn on the CPU": Row(
        "bench --model {good_rknn} --backend cpu", "the CPU backend needs an ONNX model", code=1
    ),
    "bench --image missing": Row(f"bench {GOOD} --image {{missing}}", "--image", code=2),
    "bench --image text": Row(f"bench {GOOD} --image {{text_png}}", "is not a JPEG, PNG", code=2),
    "bench --image huge header": Row(f"bench {GOOD} --image {{huge}}", "claims 65535x65535 pixels", code=2),
    "bench --image empty": Row(f"bench {GOOD} --image {{empty}}", "(it is empty)", code=2),
    "bench --image folder": Row(f"bench {GOOD} --image {{dir}}", "is not a regular file", code=2),
    "bench --image fifo": Row(f"bench {GOOD} --image {{fifo}}", "is not a regular file", code=2),
    "bench --model fifo": Row("bench --model {fifo}", "is not a regular file", code=2),
    "bench --image an .rknn": Row(f"bench {GOOD} --image {{good_rknn}}", "starts with b'RKNN", code=2),
    "bench --image cut": Row(f"bench {GOOD} --image {{cut}}", "header is there but the data is not", code=2),
    # --- bench: output paths, checked before any work ------------------------------------------
    "bench --json no folder": Row("bench --json {tmp}/no/such/b.json", "does not exist", code=2),
    "bench --json folder": Row("bench --json {dir}", "is a folder", code=2),
    "bench --json under a file": Row("bench --json {text}/b.json", "is not a folder", code=2),
    "bench --plot .xyz": Row("bench --plot {tmp}/out.xyz", "'.xyz' is not a format this can write", code=2),
    "bench --plot folder": Row("bench --plot {dir}", "--plot names the file to write", code=2),
    "bench --plot no extension": Row("bench --plot {tmp}/out", "no extension", code=2),
    "bench --plot no folder": Row("bench --plot {tmp}/no/such/b.png", "does not exist", code=2),
    # --- bench: the environment ---------------------------------------------------------------
    "bench mask banana": Row("bench", "cannot read 'banana'", {"RKNN_NPU_CORE_MASK": "banana"}, 2),
    "bench mask 8": Row("bench", "no supported SoC has more than 3", {"RKNN_NPU_CORE_MASK": "8"}, 2),
    "bench mask -1": Row("bench", "cannot read '-1'", {"RKNN_NPU_CORE_MASK": "-1"}, 2),
    "bench mask huge": Row("bench", "is larger than 0xffff", {"RKNN_NPU_CORE_MASK": "0x10000"}, 2),
    "bench cores twice": Row("bench", "names a core twice", {"RKNN_NPU_CORES": "0,0"}, 2),
    "bench cores 7": Row("bench", "names core(s) 7", {"RKNN_NPU_CORES": "7"}, 2),
    "bench soc unknown": Row("bench", "unknown SoC 'rk9999'", {"RKNN_NPU_SOC": "rk9999"}, 2),
    "bench log level": Row("bench", "RKNNLAUNCH_LOG_LEVEL='loud'", {"RKNNLAUNCH_LOG_LEVEL": "loud"}, 2),
    # --- detect -------------------------------------------------------------------------------
    "detect no image": Row("detect", "the following arguments are required: IMAGE", code=2),
    "detect missing": Row("detect {missing}", "does not exist", code=2),
    "detect text": Row("detect {text}", "is not a JPEG, PNG", code=2),
    "detect huge header": Row("detect {huge}", "claims 65535x65535 pixels", code=2),
    "detect folder": Row("detect {dir}", "is not a regular file", code=2),
    "detect fifo": Row("detect {fifo}", "is not a regular file", code=2),
    "detect --out under a file": Row("detect {image} --out {text}/x.jpg", "is not a folder", code=2),
    "detect cut": Row("detect {cut}", "header is there but the data is not", code=2),
    "detect --out .xyz": Row("detect {image} --out {tmp}/x.xyz", "'.xyz' is not a format", code=2),
    "detect --out folder": Row("detect {image} --out {dir}", "is a folder", code=2),
    "detect --out no folder": Row("detect {image} --out {tmp}/no/x.jpg", "does not exist", code=2),
    "detect --out no extension": Row("detect {image} --out {tmp}/annotated", "no extension", code=2),
    "detect --conf nan": Row(
        "detect {image} --model {onnx} --conf nan", "thresholds must lie in 0..1", code=2
    ),
    "detect --pad 300": Row("detect {image} --model {onnx} --pad 300", "pad value", code=2),
    "detect --model missing": Row("detect {image} --model {missing}", "--model", code=2),
    "detect --model corrupt": Row("detect {image} --model {corrupt_rknn}", "is corrupt", code=1),
    "detect --task banana": Row("detect {image} --task banana", "invalid choice: 'banana'", code=2),
    "detect mask banana": Row("detect {image}", "cannot read 'banana'", {"RKNN_NPU_CORE_MASK": "banana"}, 2),
    # --- an allocation that contradicts itself: refused by every command, no NPU needed (issue 32)
    "bench mask vs cores": Row(
        "bench --no-progress", "means cores 0,1 but RKNN_NPU_CORES='2'", CONTRADICTION, 2
    ),
    "detect mask vs cores": Row("detect {image}", "means cores 0,1 but RKNN_NPU_CORES='2'", CONTRADICTION, 2),
    "run mask vs cores": Row("run -- true", "means cores 0,1 but RKNN_NPU_CORES='2'", CONTRADICTION, 2),
    "run --no-check mask vs cores": Row("run --no-check -- true", "means cores 0,1", CONTRADICTION, 2),
    "validate mask vs cores": Row(f"{VALIDATE} --images {{image}}", "means cores 0,1", CONTRADICTION, 2),
    "doctor mask vs cores": Row("doctor", "means cores 0,1 but RKNN_NPU_CORES='2'", CONTRADICTION, 1),
    # --- doctor -------------------------------------------------------------------------------
    "doctor --root missing": Row("doctor --root {missing}", "is not a folder", code=2),
    "doctor --root a file": Row("doctor --root {text}", "is not a folder", code=2),
    "doctor --model missing": Row("doctor --model {missing}.rknn", "--model", code=2),
    "doctor --model corrupt": Row("doctor --model {corrupt_rknn}", "is corrupt", code=1),
    "doctor --model fifo": Row("doctor --model {fifo}", "is not a regular file: it is a FIFO", code=2),
    "doctor --model text": Row("doctor --model {text_rknn}", "is not an .rknn model", code=1),
    "doctor --model onnx bytes": Row("doctor --model {onnx_as_rknn}", "looks like an ONNX model", code=1),
    # One failure, not also an "unset" warning for the mask it could not read.
    "doctor mask banana": Row(
        "doctor", "cannot read 'banana'", {"RKNN_NPU_CORE_MASK": "banana"}, 1, not_says="unset"
    ),
    "doctor mask 8": Row("doctor", "names core(s) 3", {"RKNN_NPU_CORE_MASK": "8"}, 1),
    "doctor mask -1": Row("doctor", "cannot read '-1'", {"RKNN_NPU_CORE_MASK": "-1"}, 1),
    "doctor cores x": Row("doctor", "RKNN_NPU_CORES='x'", {"RKNN_NPU_CORES": "x"}, 1),
    "doctor soc": Row("doctor", "RKNN_NPU_SOC='rk9999'", {"RKNN_NPU_SOC": "rk9999"}, 1),
    "doctor device missing": Row(
        "doctor", "RKNN_NPU_DEVICE=/dev/nope: that path does not exist", {"RKNN_NPU_DEVICE": "/dev/nope"}, 1
    ),
    "doctor unknown flag": Row("doctor --bogus", "unrecognized arguments: --bogus", code=2),
    # --- model inspect ------------------------------------------------------------------------
    "model no action": Row("model", "`rknnlaunch model` needs an action", code=2),
    "model inspect missing": Row("model inspect {missing}", "does not exist", code=2),
    "model inspect folder": Row("model inspect {dir}", "is a folder", code=2),
    "model inspect corrupt": Row("model inspect {corrupt_rknn}", "is corrupt", code=1),
    "model inspect text": Row("model inspect {text_rknn}", "is not an .rknn model", code=1),
    "model inspect empty": Row("model inspect {empty}", "is not an .rknn model", code=1),
    "model inspect truncated": Row("model inspect {truncated_rknn}", "is truncated", code=1),
    "model inspect fifo": Row("model inspect {fifo}", "is not a regular file", code=2),
    "model inspect image": Row(
        "model inspect {image}", "is not an .rknn model: it starts with b'\\x89PNG", code=1
    ),
    # --- convert (every input is checked before rknn-toolkit2 is looked for) -----------------
    "convert missing onnx": Row("convert {missing}.onnx --target rk3588 --fp16", "does not exist", code=2),
    "convert unknown target": Row("convert {onnx} --target rk9999 --fp16", "unknown target SoC", code=2),
    "convert no target": Row(
        "convert {onnx} --fp16", "the following arguments are required: --target", code=2
    ),
    "convert -o .onnx": Row(f"{CONVERT} -o {{tmp}}/m.onnx", "(one of .rknn)", code=2),
    "convert -o folder": Row(f"{CONVERT} -o {{dir}}", "is a folder", code=2),
    "convert -o no folder": Row(f"{CONVERT} -o {{tmp}}/no/m.rknn", "does not exist", code=2),
    "convert --mean nan": Row(f"{CONVERT} --mean nan", "--mean 'nan' is not three numbers", code=2),
    "convert --std inf": Row(f"{CONVERT} --std inf,1,1", "--std 'inf,1,1' is not three numbers", code=2),
    "convert --std 0": Row(f"{CONVERT} --std 0,1,1", "--std '0,1,1'", code=2),
    "convert --pad 999": Row(f"{CONVERT} --pad 999", "--pad 999 is not a pixel value", code=2),
    "convert --min-agreement 2": Row(f"{CONVERT} --min-agreement 2", "is not a ratio", code=2),
    "convert --min-agreement nan": Row(f"{CONVERT} --min-agreement nan", "is not a ratio", code=2),
    "convert --json no folder": Row(f"{CONVERT} --json {{tmp}}/no/r.json", "does not exist", code=2),
    "convert --input-size": Row(f"{CONVERT} --input-size banana", "is not a size", code=2),
    "convert text calibration": Row(
        "convert {onnx} --target rk3588 --quant-images {text_png}", "text.png is not a JPEG", code=2
    ),
    "convert empty calibration": Row(
        "convert {onnx} --target rk3588 --quant-images {noimages}", "the folder has no images", code=2
    ),
    "convert calibration fifo": Row(
        "convert {onnx} --target rk3588 --quant-images {fifo}", "is not a regular file or folder", code=2
    ),
    "convert an .rknn": Row("convert {good_rknn} --target rk3588 --fp16", "already an .rknn", code=2),
    "convert a text file": Row("convert {text} --target rk3588 --fp16", "is not an ONNX model"),
    # --- validate (named before "no NPU") -------------------------------------------------------
    "validate missing reference": Row(
        "validate {good_rknn} --reference {missing}.onnx --images {image}", "--reference", code=2
    ),
    "validate reference is an rknn": Row(
        "validate {good_rknn} --reference {good_rknn} --images {image}", "is an .rknn model", code=2
    ),
    "validate text among images": Row(
        f"{VALIDATE} --images {{image}} {{text_png}}", "1 of 2 images are not images", code=2
    ),
    "validate huge among images": Row(f"{VALIDATE} --images {{huge}}", "claims 65535x65535", code=2),
    "validate missing image": Row(f"{VALIDATE} --images {{missing}}.png", "does not exist", code=2),
    "validate folder without images": Row(f"{VALIDATE} --images {{noimages}}", "has no images", code=2),
    "validate --min-agreement nan": Row(
        f"{VALIDATE} --images {{image}} --min-agreement nan", "is not a ratio", code=2
    ),
    "validate --plot .xyz": Row(f"{VALIDATE} --images {{image}} --plot {{tmp}}/v.xyz", "'.xyz'", code=2),
    "validate --json folder": Row(f"{VALIDATE} --images {{image}} --json {{dir}}", "is a folder", code=2),
    "validate onnx first": Row(
        "validate {onnx} --reference {onnx} --images {image}", "is the ONNX; validate compares", code=2
    ),
    "validate corrupt model": Row(
        "validate {corrupt_rknn} --reference {onnx} --images {image}", "is corrupt", code=1
    ),
    "validate --pad 999": Row(f"{VALIDATE} --images {{image}} --pad 999", "--pad 999 is not a pixel", code=2),
    "validate --conf nan": Row(
        f"{VALIDATE} --images {{image}} --conf nan", "--conf nan is not a threshold", code=2
    ),
    "validate --iou 2": Row(f"{VALIDATE} --images {{image}} --iou 2", "--iou 2.0 is not a threshold", code=2),
    "validate reference is an image": Row(
        "validate {good_rknn} --reference {image} --images {image}", "is not an ONNX model", code=2
    ),
    "validate reference is text": Row(
        "validate {good_rknn} --reference {text} --images {image}", "is not an ONNX model", code=2
    ),
    "validate reference is a folder": Row(
        "validate {good_rknn} --reference {dir} --images {image}", "is not a regular file", code=2
    ),
    "validate image is a fifo": Row(
        f"{VALIDATE} --images {{fifo}}", "is not a regular file or folder", code=2
    ),
    "validate no NPU": Row(f"{VALIDATE} --images {{image}}", "no NPU to run good.rknn on", code=2),
    # --- run, completion, the command itself --------------------------------------------------
    "run no command": Row("run", "needs a command to start", code=2),
    "run mask banana": Row("run -- true", "cannot read 'banana'", {"RKNN_NPU_CORE_MASK": "banana"}),
    "completion fish": Row("completion fish", "invalid choice: 'fish'", code=2),
    "completion none": Row("completion", "the following arguments are required: shell", code=2),
    "no command": Row("", "no command given", code=2),
    "unknown command": Row("nope", "invalid choice: 'nope'", code=2),
    "unknown top flag": Row("--nope", "unrecognized arguments: --nope", code=2),
}


def words(argv: str, inputs: dict[str, str]) -> list[str]:
    return [word.format(**inputs) for word in argv.split()]


@pytest.fixture(scope="module")
def module_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_inputs(tmp_path_factory.mktemp("bad-inputs"))


@pytest.fixture
def clean_env(
    monkeypatch: pytest.MonkeyPatch, host_factory: Callable[[str], HostRoot]
) -> Iterator[pytest.MonkeyPatch]:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RKNNLAUNCH_ROOT", str(host_factory("no-npu").root))  # the same on any machine
    yield monkeypatch


def assert_refused(code: int, out: str, err: str, row: Row) -> None:
    text = out + err
    assert "Traceback" not in text, text
    assert code != 0, text
    if row.code is not None:
        assert code == row.code, text
    assert row.says in text, text
    assert "fix:" in text, text
    if row.not_says:
        assert row.not_says not in text, text


def test_the_table_has_the_rows_the_issue_asks_for() -> None:
    assert len(ROWS) >= 60
    commands = {row.argv.split()[0] for row in ROWS.values() if row.argv}
    assert commands >= {"bench", "detect", "doctor", "model", "convert", "validate", "run", "completion"}


@pytest.mark.parametrize("name", list(ROWS))
def test_bad_input_is_one_clear_line_with_a_fix(
    name: str,
    module_inputs: dict[str, str],
    clean_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    row = ROWS[name]
    for variable, value in row.env.items():
        clean_env.setenv(variable, value)
    code = main(words(row.argv, module_inputs))
    captured = capsys.readouterr()
    assert_refused(code, captured.out, captured.err, row)


# --- as real processes ---------------------------------------------------------------------------


def run_cli(argv: list[str], env: dict[str, str] | None = None, modes_bind: bool = False) -> tuple[int, str]:
    """``rknnlaunch argv`` as a process; ``modes_bind``: file modes apply to it even as root."""
    command = [sys.executable, "-m", "rknnlaunch", *argv]
    if modes_bind:
        command = [*setpriv_prefix(), *command]
    environment = {k: v for k, v in os.environ.items() if k not in ENV_NAMES}
    environment |= {"PYTHONPATH": f"{ROOT}:{ROOT / 'plugin'}", "HOME": "/tmp", **(env or {})}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment, cwd="/tmp")
    return done.returncode, done.stdout + done.stderr


PROCESS_ROWS: dict[str, Row] = {
    "bench --image huge header": Row(
        "bench --model {onnx} --no-progress --image {huge}", "claims 65535x65535", code=2
    ),
    "detect huge header": Row("detect {huge}", "claims 65535x65535", code=2),
    "doctor mask 8": Row("doctor", "no supported SoC has more than 3", {"RKNN_NPU_CORE_MASK": "8"}, 1),
    "model inspect corrupt": Row("model inspect {corrupt_rknn}", "is corrupt", code=1),
    "bench --plot .xyz": Row("bench --plot {tmp}/out.xyz", "is not a format this can write", code=2),
}


@pytest.mark.parametrize("name", list(PROCESS_ROWS))
def test_bad_input_as_a_process(name: str, module_inputs: dict[str, str], tmp_path: Path) -> None:
    row = PROCESS_ROWS[name]
    code, text = run_cli(words(row.argv, module_inputs), {"RKNNLAUNCH_ROOT": str(tmp_path), **row.env})
    assert_refused(code, text, "", row)


def test_a_report_folder_this_user_cannot_write_is_refused_before_the_run(tmp_path: Path) -> None:
    locked = tmp_path / "read-only"
    locked.mkdir(mode=0o555)  # denies its owner too; file modes apply to the run even as root
    code, text = run_cli(["bench", "-n", "1", "--json", str(locked / "x.json")], modes_bind=True)
    assert_refused(code, text, "", Row("", f"--json {locked / 'x.json'}: Permission denied", code=2))
    assert "cannot write in" in text and not (locked / "x.json").exists()


def test_an_image_with_mode_000_says_permission_denied(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    picture = tmp_path / "secret.png"
    picture.write_bytes(png(8, 8))
    picture.chmod(0o000)
    code, text = run_cli(["detect", str(picture)], modes_bind=True)
    assert_refused(code, text, "", Row("", "Permission denied", code=2))
    assert "is not a JPEG" not in text and "chmod a+r" in text


# --- one rule for inputs (issue 32): one error kind and exit code per mistake, whichever command ----

SAME_MISTAKE = {
    "a missing model": (
        ["bench --model {missing}.onnx", "detect {image} --model {missing}.onnx",
         "model inspect {missing}.onnx", "doctor --model {missing}.rknn",
         "validate {missing}.rknn --reference {onnx} --images {image}"],
        "does not exist",
    ),
    "a folder as the model": (
        ["bench --model {dir}", "detect {image} --model {dir}",
         "model inspect {dir}", "doctor --model {dir}"],
        "is not a regular file: it is a folder",
    ),
    "a missing image": (
        ["bench --model {onnx} --image {missing}.png", "detect {missing}.png",
         f"{VALIDATE} --images {{missing}}.png", "convert {onnx} --target rk3588 --quant-images {missing}"],
        "does not exist",
    ),
}  # fmt: skip


@pytest.mark.parametrize("mistake", list(SAME_MISTAKE))
def test_the_same_input_mistake_is_the_same_exit_code_in_every_command(
    mistake: str,
    module_inputs: dict[str, str],
    clean_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    commands, says = SAME_MISTAKE[mistake]
    for argv in commands:
        code = main(words(argv, module_inputs))
        captured = capsys.readouterr()
        assert_refused(code, captured.out, captured.err, Row(argv, says, code=2))


def locked_folder(tmp_path: Path, name: str = "locked") -> Path:
    """A folder with a file in it, then mode 000: nobody may enter it (root too, under setpriv)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "inside.png").write_bytes(png(8, 8))
    folder.chmod(0o000)
    return folder


def test_an_unreadable_onnx_says_permission_denied_with_the_flag_and_the_fix(
    module_inputs: dict[str, str], tmp_path: Path
) -> None:
    secret = tmp_path / "secret.onnx"
    secret.write_bytes(Path(module_inputs["onnx"]).read_bytes())
    secret.chmod(0o000)
    for argv, named in (
        (["bench", "--model", str(secret), "-n", "1", "--no-progress"], "--model"),
        (["detect", module_inputs["image"], "--model", str(secret)], "--model"),
        (["model", "inspect", str(secret)], "model file"),
    ):
        code, text = run_cli(argv, modes_bind=True)
        assert_refused(code, text, "", Row("", f"{named} {secret}: Permission denied", code=2))
        assert "chmod a+r" in text and "system error" not in text


def test_inputs_and_outputs_in_a_folder_this_user_cannot_enter_name_the_flag(
    module_inputs: dict[str, str], tmp_path: Path
) -> None:
    locked = locked_folder(tmp_path)
    try:
        onnx, image = module_inputs["onnx"], module_inputs["image"]
        rows = (
            (["bench", "--model", onnx, "-n", "1", "--plot", str(locked / "x.png")], "--plot"),
            (["bench", "--model", onnx, "-n", "1", "--json", str(locked / "x.json")], "--json"),
            (["detect", image, "--model", onnx, "--out", str(locked / "a.jpg")], "--out"),
            (["detect", str(locked / "inside.png"), "--model", onnx], "image file"),
            (["bench", "--model", str(locked / "m.onnx")], "--model"),
            (["convert", onnx, "--target", "rk3588", "--quant-images", str(locked)], "--quant-images"),
            (["validate", module_inputs["good_rknn"], "--reference", onnx, "--images", str(locked)],
             "--images"),
        )  # fmt: skip
        for argv, flag in rows:
            code, text = run_cli(argv, modes_bind=True)
            assert_refused(code, text, "", Row("", f"{flag} ", code=2))
            assert "Permission denied" in text and "Traceback" not in text, text
            assert str(locked) in text, text
    finally:
        locked.chmod(0o755)


def test_an_unreadable_image_in_a_folder_of_images_is_named_with_the_chmod_fix(
    module_inputs: dict[str, str], tmp_path: Path
) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "a.png").write_bytes(png(8, 8))
    (photos / "b.png").write_bytes(png(8, 8))
    (photos / "b.png").chmod(0o000)
    argv = [
        "validate",
        module_inputs["good_rknn"],
        "--reference",
        module_inputs["onnx"],
        "--images",
        str(photos),
    ]
    code, text = run_cli(argv, modes_bind=True)
    assert_refused(code, text, "", Row("", "--images: 1 of 2 images are not images that can be read", code=2))
    assert f"{photos / 'b.png'}: Permission denied" in text and "chmod a+r" in text
