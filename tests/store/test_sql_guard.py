"""`mpg sql` is read-only and confined to its output unless the operator lifts it.

Each attack seen in issue 10 (a COPY that overwrote an output partition,
reading /etc/passwd, INSTALL httpfs) and its neighbours run against a real
pipeline output through the CLI, and must fail with a message that says why
and how to lift it, leaving every file as it was. Normal queries, including
reading the output's own Parquet files, keep working. `lock_down` is also
checked on a bare in-memory connection, the way a caller builds views and then
locks them. Last, where a query comes from (argument, `-f FILE`, standard
input) and the Markdown format.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from fleet_goodput.cli import main
from fleet_goodput.store.sql_guard import QueryRefused, lock_down, read_only_statements

UNSAFE = "--unsafe-allow-writes-and-files"


@pytest.fixture(scope="module")
def output(worked_example_run, tmp_path_factory) -> Path:
    """A copy of `mpg run`'s output over the worked example (tests/conftest.py)."""
    return Path(shutil.copytree(worked_example_run[1], tmp_path_factory.mktemp("out") / "out"))


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _partition(output: Path) -> Path:
    return next((output / "tables" / "job_window").glob("date=*/*.parquet"))


@pytest.mark.parametrize(
    "name, query, message",
    [
        (
            "copy over an output partition",
            "copy (select 1 as x) to '{partition}' (format parquet)",
            "copy statements are refused",
        ),
        ("copy outside the output", "copy (select 1 as x) to '{elsewhere}/stolen.csv'", "copy statements are refused"),
        ("export the database", "export database '{output}/exported'", "export statements are refused"),
        ("attach a new database in the output", "attach '{output}/new.duckdb'", "attach statements are refused"),
        ("install an extension", "install httpfs", "install and load statements are refused"),
        ("load an extension", "load httpfs", "install and load statements are refused"),
        ("lift the lock with set", "set enable_external_access = true", "set statements are refused"),
        (
            "a write hidden after a query",
            "select 1; copy (select 1) to '{elsewhere}/x.csv'",
            "copy statements are refused",
        ),
        (
            "explain analyze runs its statement",
            "explain analyze copy (select 1) to '{output}/x.csv'",
            "explain statements are refused",
        ),
        ("create a table", "create table t as select 1", "create statements are refused"),
        ("read /etc/passwd", "select * from read_text('/etc/passwd')", 'Cannot access file "/etc/passwd"'),
        ("climb out of the output", "select * from read_text('{output}/../../../../etc/passwd')", "Cannot access file"),
        ("list another folder", "select * from glob('/etc/*')", "Cannot access file"),
        ("read over the network", "select * from read_csv('https://example.com/x.csv')", "Cannot access file"),
        (
            "read a file beside the output with a shared prefix",
            "select * from read_text('{output}-old/secret')",
            "Cannot access file",
        ),
    ],
)
def test_each_attack_is_refused_with_a_reason_and_changes_nothing(output, tmp_path, capsys, name, query, message):
    before = _snapshot(output)
    text = query.format(partition=_partition(output), elsewhere=tmp_path, output=output)
    assert main(["sql", "--output", str(output), text]) == 2, name
    err = capsys.readouterr().err
    assert message in err and UNSAFE in err, err
    assert _snapshot(output) == before
    assert list(tmp_path.iterdir()) == []


def test_a_symbolic_link_in_the_output_does_not_lead_out_of_it(output, capsys):
    link = output / "etc-link"
    link.symlink_to("/etc")
    try:
        assert main(["sql", "--output", str(output), f"select * from read_text('{link}/passwd')"]) == 2
        assert "Cannot access file" in capsys.readouterr().err
    finally:
        link.unlink()


@pytest.mark.parametrize(
    "query, expected",
    [
        ("select job_id, round(mpg, 4) as mpg from job_goodput", ["job_id,mpg", "j1,0.1724"]),
        ("with j as (select job_id from jobs) from j", ["job_id", "j1"]),
        ("select count(*) as files from glob('{output}/tables/jobs/date=*/*.parquet')", ["files", "1"]),
        ("select job_id from read_parquet('{output}/tables/jobs/date=*/*.parquet')", ["job_id", "j1"]),
        ("select column_name from (describe jobs) where column_name = 'job_id'", ["column_name", "job_id"]),
        ("select 1 as a; select 2 as b", ["b", "2"]),
    ],
)
def test_queries_and_reads_of_the_output_still_work(output, capsys, query, expected):
    assert main(["sql", "--output", str(output), "--format", "csv", query.format(output=output)]) == 0
    assert capsys.readouterr().out.splitlines() == expected


def test_the_unsafe_flag_lifts_the_lock(output, tmp_path, capsys):
    target = tmp_path / "copied.csv"
    assert main(["sql", "--output", str(output), UNSAFE, f"copy (select 42 as x) to '{target}'"]) == 0
    assert target.read_text().splitlines() == ["x", "42"]
    assert (
        main(
            [
                "sql",
                "--output",
                str(output),
                UNSAFE,
                "--format",
                "csv",
                "select count(*) > 0 as lines from read_text('/etc/passwd')",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines()[-2:] == ["lines", "True"]


def test_an_empty_query_is_a_usage_error(output, capsys):
    assert main(["sql", "--output", str(output), " ; "]) == 2
    assert "no SQL statement given" in capsys.readouterr().err


def test_lock_down_keeps_views_over_the_allowed_folder_and_closes_the_rest(tmp_path):
    allowed, outside = tmp_path / "out", tmp_path / "out-other"
    (allowed / "tables").mkdir(parents=True)
    outside.mkdir()
    connection = duckdb.connect()
    connection.execute(f"copy (select 7 as x) to '{allowed}/tables/t.parquet'")
    connection.execute(f"copy (select 8 as x) to '{outside}/t.parquet'")
    connection.execute(f"create view t as select * from read_parquet('{allowed}/tables/*.parquet')")
    lock_down(connection, [allowed])
    assert connection.execute("select x from t").fetchall() == [(7,)]
    with pytest.raises(duckdb.PermissionException, match="Cannot access file"):
        connection.execute(f"select * from read_parquet('{outside}/t.parquet')")
    with pytest.raises(duckdb.Error, match="configuration has been locked"):
        connection.execute("set enable_external_access = true")
    with pytest.raises(duckdb.Error, match="configuration has been locked"):
        connection.execute("reset lock_configuration")


@pytest.mark.parametrize(
    "query", ["select 1", "from t", "describe t", "show tables", "summarize t", "with a as (select 1) select * from a"]
)
def test_queries_parse_as_read_only(query):
    assert [s.type for s in read_only_statements(query)] == [duckdb.StatementType.SELECT]


@pytest.mark.parametrize(
    "query",
    [
        "insert into t values (1)",
        "update t set x = 1",
        "delete from t",
        "drop view t",
        "checkpoint",
        "vacuum",
        "pragma enable_profiling",
        "call pragma_version()",
        "begin",
        "detach db",
        "use db",
        "import database 'x'",
    ],
)
def test_other_statements_are_refused(query):
    with pytest.raises(QueryRefused, match="statements are refused"):
        read_only_statements(query)


def test_lock_down_allows_exactly_the_relative_files_the_views_read(tmp_path, monkeypatch):
    """Views may name files relative to `file_search_path`; DuckDB tries the working directory first, so only
    the views' own names are allowed, never a relative prefix."""
    allowed, cwd = tmp_path / "out", tmp_path / "cwd"
    (allowed / "tables").mkdir(parents=True)
    (cwd / "tables").mkdir(parents=True)
    connection = duckdb.connect()
    connection.execute(f"copy (select 7 as x) to '{allowed}/tables/t.parquet'")
    connection.execute(f"copy (select 'secret' as x) to '{cwd}/tables/secret.parquet'")
    monkeypatch.chdir(cwd)
    connection.execute(f"set file_search_path = '{allowed}'")
    connection.execute("create view t as select * from read_parquet(['tables/t.parquet'])")
    lock_down(connection, [allowed])
    assert connection.execute("select x from t").fetchall() == [(7,)]
    with pytest.raises(duckdb.PermissionException, match="Cannot access file"):
        connection.execute("select * from read_parquet('tables/secret.parquet')")


# ---- where the query comes from, and how rows print ----------------------------------------------------------

MPG_QUERY = "-- the worked example's one job\nselect job_id, round(mpg, 4) as mpg\nfrom job_goodput;\n"


def test_a_query_file_runs_like_the_argument(output, tmp_path, capsys):
    query_file = tmp_path / "mpg.sql"
    query_file.write_text(MPG_QUERY)
    assert main(["sql", "--output", str(output), "--format", "csv", "-f", str(query_file)]) == 0
    assert capsys.readouterr().out.splitlines() == ["job_id,mpg", "j1,0.1724"]


@pytest.mark.parametrize("source", [["-"], ["-f", "-"]], ids=["dash", "file-dash"])
def test_a_query_from_standard_input(output, capsys, monkeypatch, source):
    monkeypatch.setattr("sys.stdin", io.StringIO(MPG_QUERY))
    assert main(["sql", "--output", str(output), "--format", "csv", *source]) == 0
    assert capsys.readouterr().out.splitlines() == ["job_id,mpg", "j1,0.1724"]


def test_a_query_piped_into_the_command(output):
    """Through a real pipe into a real process, as `echo ... | mpg sql --output OUT -` runs."""
    done = subprocess.run(
        [sys.executable, "-m", "fleet_goodput.cli", "sql", "--output", str(output), "--format", "markdown", "-"],
        input=MPG_QUERY,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["| job_id | mpg |", "|---|---:|", "| j1 | 0.1724 |"]


def test_a_refused_statement_in_a_file_is_still_refused(output, tmp_path, capsys):
    before = _snapshot(output)
    query_file = tmp_path / "sneaky.sql"
    query_file.write_text(f"select 1;\ncopy (select 1 as x) to '{_partition(output)}' (format parquet);\n")
    assert main(["sql", "--output", str(output), "-f", str(query_file)]) == 2
    assert "copy statements are refused" in capsys.readouterr().err
    assert _snapshot(output) == before


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["select 1", "-f", "x.sql"], "not both"),
        ([], "not neither"),
        (["-f", "/no/such/file.sql"], "cannot read the SQL file /no/such/file.sql"),
    ],
)
def test_a_missing_or_doubled_query_is_a_usage_error(output, capsys, arguments, message):
    assert main(["sql", "--output", str(output), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_markdown_escapes_what_would_break_a_table(output, capsys):
    query = "select 'a|b' as \"x|y\", 'two\nlines' as text, 1.5 as n, null::double as missing"
    assert main(["sql", "--output", str(output), "--format", "markdown", query]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| x\\|y | text | n | missing |",
        "|---|---|---:|---:|",
        "| a\\|b | two<br>lines | 1.5 | NULL |",
    ]


def test_a_reader_that_stops_early_ends_mpg_sql_quietly(output):
    """`mpg sql … | head`: when the reader closes the pipe, mpg stops with the SIGPIPE status (141), no traceback."""
    mpg = Path(sys.executable).with_name("mpg")
    with subprocess.Popen(
        [str(mpg), "sql", "--output", str(output), "--format", "csv", "select range as n from range(2000000)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout.readline().strip() == b"n"
        process.stdout.close()  # what `head` does once it has its lines
        code = process.wait(60)
        err = process.stderr.read().decode()
    assert code == 141 and "Traceback" not in err, err
