"""Paths are data, never code: any legal folder name works for the input and the output.

Each hostile name below is both the input folder's and the output folder's
name. One `mpg run` per name over the worked example (tests/worked_example.py),
then `mpg sql`, `mpg report` for its day and the stored `goodput.duckdb`; the
figures must equal those of the plain-path run (tests/conftest.py). A name
pasted into SQL breaks on `'`; one read as a glob reads nothing under `[1]`;
one taken from a percent-encoded file URI finds no file under a space, `%`,
`#` or a letter outside ASCII.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import duckdb
import markupsafe
import pytest
from apache_beam.io.filesystem import FileSystem

import worked_example
from fleet_goodput.cli import main
from fleet_goodput.quoting import literal_pattern
from fleet_goodput.telemetry.avro_io import write_events

pytestmark = pytest.mark.slow  # one pipeline run and one report per name

DAY = "2026-01-01"
# A handful of (input folder, output folder) names, each combining characters a path may hold and code
# must not interpret. An output's path cannot hold `[`, `]`, `?` or `%` and two hex digits (Delta Lake and
# DuckDB cannot keep a table or a database there): `mpg run` refuses it before writing anything (below).
HOSTILE_NAMES = {
    "quotes and spaces": ('it\'s a "quoted" run', 'it\'s a "quoted" run'),
    "glob characters": ("fleet[1] *?", "fleet * {a,b}"),
    "unicode, shell, percent and hash": ("ünï cødé $(echo x) 100% #1 %41", "ünï cødé $(echo x) `id` 100% #1 %zz"),
}
QUERY = "select job_id, sg, rg, pg, mpg, lifetime_chip_s, productive_chip_s from job_goodput order by job_id"


def _sql(output: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["sql", "--output", str(output), "--format", "csv", QUERY]) == 0
    return capsys.readouterr().out


def _database(output: Path) -> list[tuple]:
    """The figures as the stored goodput.duckdb gives them, opened directly as the DuckDB CLI would."""
    with duckdb.connect(str(output / "goodput.duckdb"), read_only=True) as connection:
        return (
            connection.execute(QUERY).fetchall()
            + connection.execute("select * from fleet_daily order by all").fetchall()
        )


def _report(output: Path) -> dict[str, str]:
    """The report's CSV figures, file by file."""
    assert main(["report", "--output", str(output), "--date", DAY]) == 0
    return {path.name: path.read_text() for path in sorted((output / "reports" / DAY).glob("*.csv"))}


@pytest.fixture(scope="module")
def plain(worked_example_run, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A copy of the plain-path run's output, and its report's figures."""
    output = tmp_path_factory.mktemp("plain") / "out"
    shutil.copytree(worked_example_run[1], output)
    return output, _report(output)


@pytest.mark.parametrize("names", HOSTILE_NAMES.values(), ids=HOSTILE_NAMES.keys())
def test_any_folder_name_gives_the_plain_paths_figures(names, plain, tmp_path, capsys):
    source, output = tmp_path / names[0] / "in" / names[0], tmp_path / names[1] / "out" / names[1]
    for stream, records in worked_example.records().items():
        write_events(source / stream / "part-0.avro", stream, records)
    assert main(["run", "--input", str(source), "--output", str(output)]) == 0
    plain_output, plain_report = plain
    assert _sql(output, capsys) == _sql(plain_output, capsys)
    assert _database(output) == _database(plain_output)
    assert _report(output) == plain_report
    page = (output / "reports" / DAY / "index.html").read_text()
    assert markupsafe.escape(f"mpg sql --output {shlex.quote(str(output))} --run 1") in page  # a command to copy


def test_an_output_delta_lake_or_duckdb_cannot_keep_is_refused_before_anything_is_written(
    worked_example_run, tmp_path, capsys
):
    output = tmp_path / "fleet[1]?"
    reason = (
        f"{output} cannot hold the output: its path contains '?' '[' ']' (the Delta Lake library cannot keep a "
        "table under a path with [ ] ^ | \\, a control character or % and two hex digits, and DuckDB reads a ? "
        "in a database file's path as its options); choose another output folder"
    )
    assert main(["run", "--input", str(worked_example_run[0]), "--output", str(output)]) == 2
    assert capsys.readouterr().err.strip() == f"mpg run: {reason}"
    assert not output.exists()
    for command in (["sql", "select 1"], ["report", "--date", DAY], ["validate", "--date", DAY], ["runs"]):
        assert main([command[0], "--output", str(output), *command[1:]]) == 2
        assert capsys.readouterr().err.strip() == f"mpg {command[0]}: {reason}"
    assert not output.exists()


# Python's re warns that `[[]` may one day read as a nested set; Beam compiles the same pattern today.
@pytest.mark.filterwarnings("ignore:Possible nested set:FutureWarning")
@pytest.mark.parametrize("path", ["gs://b/fleet[1]/x.avro", "gs://b/a*b?/[!x]/x.avro", "/data/it's ] [/x.avro"])
def test_a_quoted_path_matches_itself_alone_as_beam_reads_a_pattern(path):
    """Beam's GCS file system matches `gs://` inputs with this translation; a sibling differing where the
    path has a pattern character must not match."""
    pattern = re.compile(FileSystem.translate_pattern(literal_pattern(path)))
    assert pattern.match(path)
    for sibling in {path.replace(c, "x", 1) for c in "[*?]" if c in path}:
        assert not pattern.match(sibling)


def test_a_star_in_the_outputs_name_lets_mpg_sql_read_no_other_folder(worked_example_run, tmp_path, capsys):
    """`mpg sql` allows the output both as written and as the pattern its views use; DuckDB checks each
    file a glob matches too, so the output's own `*` does not reach a sibling folder."""
    output = tmp_path / "fleet *"
    shutil.copytree(worked_example_run[1], output)
    secret = tmp_path / "fleet secrets" / "secret.parquet"
    secret.parent.mkdir()
    duckdb.sql(f"copy (select 'secret' as s) to '{secret}'")
    assert "j1" in _sql(output, capsys)
    assert main(["sql", "--output", str(output), f"select * from read_parquet('{output}/secret.parquet')"]) == 2
    assert f'Permission Error: Cannot access file "{secret}"' in capsys.readouterr().err
