"""Keeps the Markdown docs true: the module names, repository paths and anchors they mention exist."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The folders and files a doc or a comment can name by a repository path.
TOP_FOLDERS = (
    ".ci",
    "benchmarks",
    "deploy",
    "docs",
    "images",
    "plugin",
    "proto",
    "rknnlaunch",
    "samples",
    "scripts",
    "tests",
)
TOP_FILES = (".pre-commit-config.yaml", "README.md", "pyproject.toml")

# `rknnlaunch.npu.parse_mask`, not `io.rknnlaunch.version` (an image label), `rknnlaunch.doctor/1`
# (a JSON schema) or `rknnlaunch.io/npu-type` (a Kubernetes label).
DOTTED = re.compile(r"(?<![\w.\-/])(?:rknnlaunch|rknpu_device_plugin)(?:\.[A-Za-z_]\w*)+(?![\w/-])")
REPO_PATH = re.compile(
    r"(?<![\w./\-])(?:(?:" + "|".join(re.escape(f) for f in TOP_FOLDERS) + r")/[\w./\-]*"
    r"|" + "|".join(re.escape(f) for f in TOP_FILES) + r")"
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A doc section cited from anywhere: docs/hardware.md#core-masks
CITATION = re.compile(r"(?<![\w./\-])docs/([\w\-]+\.md)#([\w\-]+)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
FACTS_FILE = "rknpu" + "-facts"  # spelled apart so this file does not cite it either


def markdown_files() -> list[Path]:
    """README.md, docs/*.md and every other Markdown file in the repository's own folders."""
    found = [ROOT / "README.md"]
    for folder in TOP_FOLDERS:
        found += sorted((ROOT / folder).rglob("*.md"))
    return found


def repository_text_files() -> Iterator[Path]:
    """Every text file in the repository's own folders (not .git, venvs or build output)."""
    yield from (ROOT / name for name in TOP_FILES if (ROOT / name).is_file())
    for folder in TOP_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.stat().st_size > 1_000_000:
                continue
            if b"\0" in path.read_bytes()[:8192]:
                continue
            yield path


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT))


def heading_slug(text: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every anchor a Markdown file defines: its headings (GitHub's slugs) and explicit <a id>s."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_code = not in_code
            continue
        if in_code:
            continue
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if match:
            slug = heading_slug(match.group(2))
            seen = counts.get(slug, 0)
            counts[slug] = seen + 1
            found.add(slug if seen == 0 else f"{slug}-{seen}")
    return found


def resolve_dotted(name: str) -> None:
    """Import the longest module prefix of ``name`` and look the rest up as attributes."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module_name = ".".join(parts[:end])
        try:
            value: object = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
                continue
            raise
        for attribute in parts[end:]:
            value = getattr(value, attribute)
        return
    raise ModuleNotFoundError(name)


def _paths_in(text: str) -> Iterator[str]:
    for match in REPO_PATH.finditer(text):
        path = match.group(0).rstrip(".")
        if text[match.end() : match.end() + 1] in ("*", "<", "{", "["):
            path = path[: path.rfind("/") + 1]  # a pattern such as tests/<area>/: check its folder
        yield path


@pytest.mark.parametrize("doc", markdown_files(), ids=_shown)
def test_every_module_name_a_doc_mentions_exists(doc: Path) -> None:
    missing = []
    for name in sorted(set(DOTTED.findall(doc.read_text()))):
        try:
            resolve_dotted(name)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{name} ({exc})")
    assert not missing, f"{_shown(doc)} names what does not exist: {missing}"


@pytest.mark.parametrize("doc", markdown_files(), ids=_shown)
def test_docs_point_users_at_public_names_only(doc: Path) -> None:
    private = sorted(
        {
            name
            for name in DOTTED.findall(doc.read_text())
            if any(part.startswith("_") and not part.endswith("__") for part in name.split("."))
        }
    )
    assert not private, (
        f"{_shown(doc)} points at private names {private}: export them in an __all__ or name the file"
    )


@pytest.mark.parametrize("doc", markdown_files(), ids=_shown)
def test_every_repository_path_a_doc_mentions_exists(doc: Path) -> None:
    missing = sorted({path for path in _paths_in(doc.read_text()) if not (ROOT / path).exists()})
    assert not missing, f"{_shown(doc)} mentions paths that are not in the repository: {missing}"


@pytest.mark.parametrize("doc", markdown_files(), ids=_shown)
def test_every_relative_link_and_anchor_resolves(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text())
        ):
            broken.append(target)
    assert not broken, f"{_shown(doc)} has links that lead nowhere: {broken}"


def test_every_cited_doc_section_exists() -> None:
    broken = []
    for path in repository_text_files():
        text = path.read_text(errors="replace")
        for page, anchor in CITATION.findall(text):
            target = ROOT / "docs" / page
            if not target.exists() or anchor not in anchors(target.read_text()):
                broken.append(f"{_shown(path)}: docs/{page}#{anchor}")
    assert not broken, f"citations of doc sections that do not exist: {broken}"


def test_nothing_cites_the_facts_file_outside_the_repository() -> None:
    citing = [
        _shown(path) for path in repository_text_files() if FACTS_FILE in path.read_text(errors="replace")
    ]
    assert not citing, (
        f"{citing} cite {FACTS_FILE}.md, which is not in this repository: cite docs/hardware.md"
    )


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("The .rknn file format", "the-rknn-file-format"),
        ("`rknnlaunch doctor`", "rknnlaunch-doctor"),
        ("The RKNN runtime (`librknnrt.so`)", "the-rknn-runtime-librknnrtso"),
        ("YOLO pipeline, `bench` and `detect`", "yolo-pipeline-bench-and-detect"),
    ],
)
def test_heading_slugs_follow_github(heading: str, slug: str) -> None:
    assert heading_slug(heading) == slug


def test_the_checks_catch_what_they_are_for() -> None:
    text = (
        "`rknnlaunch.npu.no_such_name` and `rknnlaunch.runtime._open.open`, not io.rknnlaunch.version "
        "nor rknnlaunch.doctor/1; see `tests/no_such_file.py` and tests/<area>/test_<area>_*.py."
    )
    assert DOTTED.findall(text) == ["rknnlaunch.npu.no_such_name", "rknnlaunch.runtime._open.open"]
    with pytest.raises(AttributeError):
        resolve_dotted("rknnlaunch.npu.no_such_name")
    resolve_dotted("rknnlaunch.runtime._open.open")
    assert list(_paths_in(text)) == ["tests/no_such_file.py", "tests/"]
    assert anchors('# A\n```\n# not a heading\n```\n## A\n<a id="x"></a>') == {"a", "a-1", "x"}


@pytest.mark.parametrize("package", ["rknnlaunch", "rknnlaunch.npu"])
def test_the_sdk_page_lists_the_whole_public_api(package: str) -> None:
    page = (ROOT / "docs" / "sdk.md").read_text()
    exported: list[str] = importlib.import_module(package).__all__
    unlisted = [name for name in exported if f"`{name}`" not in page]
    assert not unlisted, f"{package}.__all__ has names docs/sdk.md does not list: {unlisted}"


def test_the_license_file_is_the_apache_2_license_pyproject_declares() -> None:
    declared = re.search(
        r'^license\s*=\s*(?:\{\s*text\s*=\s*)?"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M
    )
    assert declared is not None and declared.group(1) == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:2] == ["Apache", "License"]
    assert "Version 2.0, January 2004" in text and "http://www.apache.org/licenses/" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text


# Keep a Changelog 1.1.0: "## [Unreleased]" first, then "## [1.2.3] - 2024-05-01" (ours says
# "unreleased" for a version not yet released), each with "### Added"-style sections.
CHANGELOG_VERSION = re.compile(r"## \[(?:Unreleased|\d+\.\d+\.\d+)\](?: - (?:\d{4}-\d{2}-\d{2}|unreleased))?")
CHANGELOG_SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_changelog_keeps_a_changelog_with_an_unreleased_section() -> None:
    lines = (ROOT / "CHANGELOG.md").read_text().splitlines()
    assert lines[0] == "# Changelog"
    assert "keepachangelog.com" in "\n".join(lines[:10])
    versions = [line for line in lines if line.startswith("## ")]
    assert versions and versions[0] == "## [Unreleased]", versions
    assert all(CHANGELOG_VERSION.fullmatch(line) for line in versions), versions
    sections = {line[4:].strip() for line in lines if line.startswith("### ")}
    assert sections and sections <= CHANGELOG_SECTIONS, sections
