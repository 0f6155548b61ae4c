"""The documented columns of docs/tables-and-views.md are exactly those DESCRIBE shows."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from fleet_goodput.core.config import load_settings
from fleet_goodput.store.views import create_views

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "tables-and-views.md"
DIMENSIONS = ("workload", "size_class", "accelerator", "team", "framework", "queue", "cluster_queue")


def documented_columns() -> dict[str, list[str]]:
    """Section heading → the backticked names in the first cell of its table rows."""
    sections, current = {}, None
    for line in DOC.read_text().splitlines():
        heading = re.match(r"### (\w+)$", line)
        if heading:
            current = sections.setdefault(heading.group(1), [])
        elif current is not None and line.startswith("| `"):
            current.extend(re.findall(r"`(\w+)`", line.split("|")[1]))
    return sections


@pytest.fixture(scope="module")
def connection(tmp_path_factory):
    # Views over an output with no partitions yet: the raw layer falls back to
    # empty typed views, so the schema is the same as over real data.
    connection = duckdb.connect()
    create_views(connection, tmp_path_factory.mktemp("empty"), load_settings())
    return connection


def _describe(connection, view: str) -> list[str]:
    return [row[0] for row in connection.execute(f"describe {view}").fetchall()]


@pytest.mark.parametrize("view", sorted(documented_columns()))
def test_documented_columns_are_the_real_ones(connection, view):
    assert sorted(documented_columns()[view]) == sorted(_describe(connection, view))


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_dimension_views_are_the_segment_view_renamed(connection, dimension):
    segment_columns = _describe(connection, "goodput_by_segment")
    assert (
        _describe(connection, f"goodput_by_{dimension}")
        == [dimension] + segment_columns[segment_columns.index("segment") + 1 :]
    )


def test_every_view_is_documented(connection):
    views = {row[0] for row in connection.execute("select view_name from duckdb_views() where not internal").fetchall()}
    documented = set(documented_columns()) | {f"goodput_by_{d}" for d in DIMENSIONS}
    assert views == documented


def test_views_bound_at_first_read_are_the_views_bound_as_created(connection, tmp_path):
    """connect() defers binding where DuckDB can (fleet_goodput/store/views.py): the same views, names and types."""
    deferred = duckdb.connect()
    create_views(deferred, tmp_path, load_settings(), defer_binding=True)
    views = [
        row[0]
        for row in connection.execute("select view_name from duckdb_views() where not internal order by all").fetchall()
    ]
    assert len(views) > 20
    if tuple(int(part) for part in duckdb.__version__.split(".")[:2]) >= (2, 0):  # DuckDB 2 defers (constraints.txt)
        bound = deferred.execute("select view_name from duckdb_views() where not internal and is_bound").fetchall()
        assert sorted(bound) == [("observed_periods",), ("run_clock",), ("settings",), ("size_classes",)], (
            "every view but the settings, the size-class lookup, the observed periods and the run's clock is "
            "created unbound"
        )
    for view in views:
        assert deferred.execute(f"describe {view}").fetchall() == connection.execute(f"describe {view}").fetchall()


# A path of the repository, as the docs and the code's docstrings and comments name one.
REPOSITORY_PATH = re.compile(
    r"(?<![\w./-])((?:fleet_goodput|tests|docs|configs|sql|deploy|benchmarks|schemas|pipelines"
    r"|transforms|templates)/[\w./-]*\w)(?![\w{])"
)


def _written_paths() -> dict[str, set[str]]:
    """path named → the files naming it: in every Markdown file and the package's, pipelines', transforms' and
    benchmarks' code, SQL and settings (tests name the files they build, which need not exist)."""
    named: dict[str, set[str]] = {}
    sources = [
        *ROOT.glob("*.md"),
        *ROOT.glob("docs/*.md"),
        *ROOT.rglob("fleet_goodput/**/*.py"),
        *ROOT.glob("pipelines/*.py"),
        *ROOT.glob("transforms/*.py"),
        *ROOT.glob("sql/**/*.sql"),
        *ROOT.glob("configs/*.yaml"),
        *ROOT.glob("deploy/**/*"),
    ]
    for source in sources:
        relative = source.relative_to(ROOT).as_posix()
        if not source.is_file() or "/." in f"/{relative}":
            continue
        for found in REPOSITORY_PATH.finditer(source.read_text(encoding="utf-8", errors="replace")):
            named.setdefault(found.group(1), set()).add(relative)
    return named


def test_every_path_the_docs_and_the_code_name_exists():
    named = _written_paths()
    assert len(named) > 100  # the pattern finds the paths people write
    missing = {path: sorted(where) for path, where in named.items() if not (ROOT / path).exists()}
    assert missing == {}
