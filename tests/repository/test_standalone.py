"""The repository stands alone: nothing in it points outside it, and what it cites is in it.

A fresh clone with nothing beside it must pass its tests and make sense to its
readers: the metric's specification is docs/metric.md, every reference to it
names a section it has, the public samples the tests and examples read are in
tests/data/public with their licences, and `mpg import --help` shows commands
that work from a checkout.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from fleet_goodput.commands.importer import EPILOG
from fleet_goodput.report.specification import section_id

ROOT = Path(__file__).parents[2]
SPECIFICATION = ROOT / "docs" / "metric.md"
PUBLIC = ROOT / "tests" / "data" / "public"
# Paths of the folder a checkout once sat in, and the specification's old name.
OUTSIDE = re.compile(r"\.\./shared|shared/data|shared/MPG|MPG\.md")
# "docs/metric.md section 3", "docs/metric.md §6", "[metric.md](metric.md#categories) section 3"
SECTION_REFERENCE = re.compile(r"metric\.md(?:\]\([^)]*\))?(?:,? section |\s?§)(\d+)")
LINK_TO_SPECIFICATION = re.compile(r"\]\((?:[\w./-]*/)?metric\.md(?:#([\w-]+))?\)")


def tracked_files() -> list[Path]:
    """The files of the repository: git's list in a clone, else every file outside the usual build and venv folders."""
    if (ROOT / ".git").exists():
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        return [ROOT / name for name in names.decode().split("\0") if name and (ROOT / name).is_file()]
    skipped = {".venv", "build", "dist", "__pycache__", ".pytest_cache"}
    return [
        path
        for path in ROOT.rglob("*")
        if path.is_file()
        and not skipped & set(path.relative_to(ROOT).parts)
        and not any(part.endswith(".egg-info") for part in path.parts)
    ]


def text_files() -> dict[Path, str]:
    texts = {}
    for path in tracked_files():
        try:
            texts[path] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, ValueError):
            continue  # a binary sample (gzip, Avro) cites nothing
    return texts


def specification_anchors() -> set[str]:
    return {section_id(heading) for heading in re.findall(r"^#{1,3} (.+)$", SPECIFICATION.read_text(), re.M)}


def test_no_file_points_outside_the_repository():
    this_file = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)}"
        for path, text in text_files().items()
        if path.resolve() != this_file
        for match in OUTSIDE.finditer(text)
    ]
    assert found == []


def test_the_readme_links_the_specification():
    assert "](docs/metric.md)" in (ROOT / "README.md").read_text()


def test_every_reference_to_the_specification_names_a_section_it_has():
    sections = set(re.findall(r"^## (\d+)\. ", SPECIFICATION.read_text(), re.M))
    assert sections == {"1", "2", "3", "4", "5", "6"}
    anchors = specification_anchors()
    references = links = 0
    for path, text in text_files().items():
        for number in SECTION_REFERENCE.findall(text):
            references += 1
            assert number in sections, f"{path.relative_to(ROOT)} cites section {number} of docs/metric.md"
        for anchor in LINK_TO_SPECIFICATION.findall(text):
            links += 1
            assert not anchor or anchor in anchors, f"{path.relative_to(ROOT)} links metric.md#{anchor}"
    assert references > 30 and links > 5, "the code and the docs cite the specification, by section"


def test_links_inside_the_specification_go_to_its_headings():
    text = SPECIFICATION.read_text()
    assert re.findall(r"\]\((?!#)", text) == [], "no links out of the page: a report carries it alone"
    assert set(re.findall(r"\]\(#([\w-]+)\)", text)) <= specification_anchors()


def test_the_docs_that_cite_the_metric_link_the_specification():
    for page in ("tables-and-views.md", "reports.md", "importers.md", "performance.md"):
        assert LINK_TO_SPECIFICATION.search((ROOT / "docs" / page).read_text()), page


def _import_examples(text: str) -> list[list[str]]:
    return [
        shlex.split(line.split("#")[0].split("&&")[0])
        for line in text.splitlines()
        if line.strip().startswith("mpg import ")
    ]


def test_import_examples_read_files_in_the_repository():
    """`mpg import --help` and docs/importers.md show commands that work from a checkout."""
    examples = _import_examples(EPILOG) + _import_examples((ROOT / "docs" / "importers.md").read_text())
    assert len(examples) == 22
    for words in examples:
        assert (ROOT / words[3]).exists(), " ".join(words)


def test_each_public_sample_keeps_its_licence_and_source():
    readme = (PUBLIC / "README.md").read_text()
    folders = sorted(path.name for path in PUBLIC.iterdir() if path.is_dir())
    assert folders == ["kineto", "megatron-deepspeed", "mlperf", "mlperf-results", "nemo", "openb", "philly"]
    for folder in folders:
        kept = {path.name for path in (PUBLIC / folder).iterdir()}
        assert kept & {"LICENSE", "LICENSE.md", "UPSTREAM_README.md"}, folder
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{folder}/` |"))
        source, licence, citation = (cell.strip() for cell in row.split("|")[3:6])
        assert source and citation, folder
        assert any(f"`{folder}/{name}`" in licence for name in kept), f"{folder}: the licence names its file"
