"""`rknnlaunch completion bash|zsh`: the script is generated from the parser, bash sources it,
registers it for `rknnlaunch`, and completes commands, actions, options and choices."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest

from rknnlaunch.cli._completion import completion_table, positionals
from rknnlaunch.cli._main import COMMANDS, build_parser, main


def generated(shell: str) -> str:
    from rknnlaunch.cli import _completion

    out = io.StringIO()
    args = build_parser("completion").parse_args(["completion", shell])
    assert _completion.run(args, out) == 0
    return out.getvalue()


def complete(script: Path, *words: str) -> list[str]:
    """What bash's completion function offers for ``words`` (the last is the word being completed)."""
    program = (
        f"source {script}\n"
        'COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()\n'
        "_rknnlaunch\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "-c", program, "bash", *words], capture_output=True, text=True, timeout=120, check=True
    )
    return [line for line in done.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    path = tmp_path_factory.mktemp("completion") / "rknnlaunch.bash"
    path.write_text(generated("bash"))
    return path


def test_bash_registers_the_function(bash_script: Path) -> None:
    done = subprocess.run(
        ["bash", "-c", f"source {bash_script} && complete -p rknnlaunch"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "complete -o default -F _rknnlaunch rknnlaunch"


def test_bash_completes_commands_actions_options_and_choices(bash_script: Path) -> None:
    assert complete(bash_script, "rknnlaunch", "be") == ["bench"]
    assert set(complete(bash_script, "rknnlaunch", "")) >= set(COMMANDS)
    assert complete(bash_script, "rknnlaunch", "bench", "--back") == ["--backend"]
    assert complete(bash_script, "rknnlaunch", "bench", "--backend", "") == ["auto", "npu", "cpu"]
    assert complete(bash_script, "rknnlaunch", "model", "i") == ["inspect"]
    assert complete(bash_script, "rknnlaunch", "model", "inspect", "--j") == ["--json"]
    assert complete(bash_script, "rknnlaunch", "detect", "--task", "s") == ["segment"]
    # A value that is a path: nothing offered, so bash's -o default completes file names.
    assert complete(bash_script, "rknnlaunch", "bench", "--model", "") == []
    assert complete(bash_script, "rknnlaunch", "completion", "z") == ["zsh"]


def test_positionals_complete_files_run_completes_commands_and_target_socs(bash_script: Path) -> None:
    """Issue 32: `model inspect <TAB>` and `detect <TAB>` offer files (nothing: bash's -o default),
    not options; `convert --target <TAB>` offers the SoCs of rknnlaunch.npu; `run -- <TAB>` commands."""
    from rknnlaunch.npu import SOCS

    assert complete(bash_script, "rknnlaunch", "model", "inspect", "") == []
    assert complete(bash_script, "rknnlaunch", "detect", "") == []
    assert complete(bash_script, "rknnlaunch", "detect", "--j") == ["--json"]  # options on a dash
    assert complete(bash_script, "rknnlaunch", "convert", "m.onnx", "--target", "") == [s.name for s in SOCS]
    assert complete(bash_script, "rknnlaunch", "convert", "m.onnx", "--target", "rk358") == ["rk3588"]
    assert "bash" in complete(bash_script, "rknnlaunch", "run", "--", "bas")
    assert "bash" in complete(bash_script, "rknnlaunch", "run", "--no-check", "--", "bas")
    assert complete(bash_script, "rknnlaunch", "run", "--", "bash", "") == []  # its arguments: files
    assert complete(bash_script, "rknnlaunch", "model", "") == ["inspect", "path"]
    assert "--model" in complete(bash_script, "rknnlaunch", "bench", "")  # no positional: options
    assert positionals(build_parser(all_commands=True)) == {
        "detect": "file",
        "run": "command",
        "model/inspect": "file",
        "convert": "file",
        "validate": "file",
        "watch": "file",  # its SOURCEs: files (URLs are typed)
    }


def test_the_table_follows_the_parser() -> None:
    words, choices = completion_table(build_parser(all_commands=True))
    assert set(words[""]) >= set(COMMANDS) | {"--version"}
    assert "--plot" in words["bench"] and "-o" in words["convert"] and words["model"][0] == "inspect"
    assert choices["bench|--backend"] == ["auto", "npu", "cpu"] and choices["bench|--json"] == []
    assert "bench|--no-pool" not in choices  # a flag takes no value
    assert choices["watch|--contexts-per-core"] == choices["bench|--contexts-per-core"] == ["1", "2"]


def test_zsh_script_uses_bashcompinit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "zsh"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("autoload -U +X bashcompinit && bashcompinit\n")
    assert "complete -o default -F _rknnlaunch rknnlaunch" in text
    assert main(["completion", "fish"]) == 2
