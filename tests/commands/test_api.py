"""The Python API as a notebook uses it: simulate, run twice, open, query with pandas.

One small simulated fleet is cut at 02:00 and run as two consecutive runs,
the way telemetry arrives. The latest run's figures are checked against the
simulator's truth (computed from its timeline, not from the events) and
against what `mpg sql` prints; run 1 is then opened again as it was.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import duckdb
import pandas as pd
import pytest

import fleet_goodput as fg
from fleet_goodput.cli import main
from fleet_goodput.core.figure_vector import CATEGORIES
from fleet_goodput.simulator import START_US
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.sql_guard import QueryRefused
from fleet_goodput.telemetry.avro_io import split_by_time

CUT = datetime(2026, 1, 1, 2, 0)  # no time zone: taken as UTC
CUT_US = START_US + 2 * 3600 * 1_000_000
HOURS = 4
RELATIVE = 1e-9


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    root = tmp_path_factory.mktemp("notebook")
    summary = fg.simulate(root / "fleet", seed=2, hours=HOURS, jobs=40)
    first, second = split_by_time(root / "fleet", [CUT_US], root / "arrivals")
    output = root / "goodput"
    runs = [fg.run(first, output, as_of=CUT), fg.run(second, output, as_of="2026-01-01T04:00:00Z")]
    return summary, runs, root, output


def _mpg_sql(capsys, output, query, *options) -> list[list[str]]:
    assert main(["sql", "--output", str(output), "--format", "csv", *options, query]) == 0
    return list(csv.reader(io.StringIO(capsys.readouterr().out)))


def _as_csv(columns: list[str], rows: list[tuple]) -> list[list[str]]:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(columns)
    writer.writerows(rows)
    return list(csv.reader(io.StringIO(text.getvalue())))


def test_each_run_returns_its_committed_run(notebook):
    summary, (first, second), _, _ = notebook
    assert [o.committed for o in (first, second)] == [True, True]
    assert (first.run.run_id, first.run.as_of_us) == (1, CUT_US)
    assert (second.run.run_id, second.run.as_of_us) == (2, summary.as_of_us)
    assert (
        second.manifest["reconciles"] and second.manifest["streams"]["scheduler"]["read"] == summary.events["scheduler"]
    )


def test_the_latest_run_equals_the_simulators_truth_per_job_window_and_category(notebook):
    _, _, root, output = notebook
    columns = [f"{c}_chip_s" for c in CATEGORIES]
    with fg.open(output) as connection:
        got = connection.sql(f"select job_id, window_start, {', '.join(columns)} from job_window").df()
    truth = pd.read_parquet(root / "fleet" / "truth" / "job_window.parquet")[["job_id", "window_start", *columns]]
    both = truth.merge(got, on=["job_id", "window_start"], how="outer", suffixes=("_truth", "_got"), indicator=True)
    assert (both["_merge"] == "both").all(), both[both["_merge"] != "both"].head()
    for column in columns:
        expected, actual = both[f"{column}_truth"].fillna(0), both[f"{column}_got"].fillna(0)
        assert ((expected - actual).abs() <= RELATIVE * expected.abs().clip(lower=1e-6)).all(), column


def test_a_query_in_the_notebook_prints_what_mpg_sql_prints(notebook, capsys):
    *_, output = notebook
    query = (
        "select job_id, workload, coalesce(sg, -1) as sg, coalesce(rg, -1) as rg, coalesce(mpg, -1) as mpg, "
        "lost_chip_s from job_goodput order by job_id"
    )
    with fg.open(output) as connection:
        relation = connection.sql(query)
        mine = _as_csv(relation.columns, relation.fetchall())
    assert len(mine) > 10 and mine == _mpg_sql(capsys, output, query)


def test_an_earlier_run_opens_as_it_was(notebook, capsys):
    *_, output = notebook
    # Rounded: a float sum's last digit depends on the order DuckDB's threads add in.
    query = (
        "select count(*) as windows, max(window_start) as last_window, "
        "round(sum(productive_chip_s), 6) as productive from job_window"
    )
    with fg.open(output, run=1) as connection:
        first = connection.sql(query).fetchall()
        latest_window = connection.execute("select max(window_start) from job_window").fetchall()[0][0]
    with fg.open(output) as connection:
        latest = connection.sql(query).fetchall()
    assert latest_window < datetime.fromtimestamp(CUT_US / 1e6, tz=timezone.utc)
    assert first != latest
    assert _as_csv(["windows", "last_window", "productive"], first) == _mpg_sql(capsys, output, query, "--run", "1")


def test_open_is_confined_to_the_output_unless_lifted(notebook):
    *_, output = notebook
    with fg.open(output) as connection:
        with pytest.raises(duckdb.PermissionException, match="Cannot access file"):
            connection.sql("select * from read_text('/etc/passwd')").fetchall()
        with pytest.raises(QueryRefused, match="set statements are refused"):
            connection.execute("set enable_external_access = true")
        # The output's own files stay readable, and a notebook's own data joins in.
        assert (
            connection.execute(
                f"select count(*) from read_parquet('{output}/tables/jobs/date=*/*.parquet')"
            ).fetchall()[0][0]
            > 0
        )
        owners = connection.sql("select distinct team from job_goodput where team is not null").df()
        owners["owner"] = "someone@example.com"
        connection.register("owners", owners)
        assert connection.execute(
            "select count(*) = count(owner) from job_goodput left join owners using (team) where team is not null"
        ).fetchall() == [(True,)]
    with fg.open(output, confined=False) as connection:
        assert connection.execute("select count(*) > 0 from read_text('/etc/passwd')").fetchall() == [(True,)]


def test_open_writes_nothing_into_the_store_whatever_the_sql(notebook, capsys):
    """DuckDB may write wherever it may read: COPY over a partition's file, EXPORT DATABASE into the output, a
    relation written to a file, or the same SQL through a cursor or a relation's query, are refused before
    they run, and the store is intact afterwards."""
    *_, output = notebook
    data_file = next((output / "tables" / "jobs").glob("date=*/*.parquet"))
    before = data_file.read_bytes()
    with fg.open(output) as connection:
        attempts = [
            lambda: connection.execute(f"copy (select 1 as x) to '{data_file}' (format parquet)"),
            lambda: connection.sql(f"export database '{output / 'exported'}'"),
            lambda: connection.cursor().execute(f"copy (select 1) to '{output / 'x.csv'}'"),
            lambda: connection.sql("select 1 as x").write_parquet(str(data_file)),
            lambda: connection.sql("select 1 as x").to_csv(str(output / "x.csv")),
            lambda: connection.sql("select 1 as x").query("v", f"copy v to '{data_file}' (format parquet)"),
        ]
        for attempt in attempts:
            with pytest.raises(QueryRefused):
                attempt()
        assert connection.sql("select count(*) > 0 from jobs").fetchall() == [(True,)]
    assert data_file.read_bytes() == before
    assert not (output / "exported").exists() and not (output / "x.csv").exists()
    assert main(["check", "--output", str(output)]) == 0
    capsys.readouterr()


def test_running_the_same_files_again_commits_nothing(notebook):
    _, _, root, output = notebook
    again = fg.run(root / "arrivals" / "part-01", output)
    assert not again.committed and again.run.run_id == 2 and len(again.skipped) > 0


@pytest.mark.parametrize(
    "as_of, message",
    [
        (12, "as_of must be a datetime or an ISO-8601 string, not int"),
        ("yesterday", "not an ISO-8601 time"),
    ],
)
def test_a_bad_as_of_is_refused_before_anything_runs(tmp_path, notebook, as_of, message):
    _, _, root, _ = notebook
    with pytest.raises((TypeError, ValueError), match=message):
        fg.run(root / "fleet", tmp_path / "out", as_of=as_of)
    assert not (tmp_path / "out").exists()


def test_an_as_of_before_the_last_run_is_an_error(notebook):
    _, _, root, output = notebook
    earlier = datetime(2026, 1, 1, 5, 0, tzinfo=timezone(timedelta(hours=2)))  # 03:00Z, before run 2's 04:00Z
    with pytest.raises(StoreError, match="earlier than run 2's as-of"):
        fg.run(root / "fleet", output, as_of=earlier)


def test_open_names_what_is_missing(tmp_path, notebook):
    *_, output = notebook
    with pytest.raises(FileNotFoundError, match="no committed run"):
        fg.open(tmp_path)
    with pytest.raises(StoreError):
        fg.open(output, run=99)


def test_simulate_keeps_telemetry_already_there(notebook):
    _, _, root, _ = notebook
    with pytest.raises(FileExistsError, match="overwrite=True"):
        fg.simulate(root / "fleet", seed=3, hours=1, jobs=2)


def test_importing_the_package_loads_neither_beam_nor_great_expectations_nor_duckdb():
    imported = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import fleet_goodput"], capture_output=True, text=True, check=True
    ).stderr
    modules = {line.rsplit("|", 1)[-1].strip() for line in imported.splitlines() if "|" in line}
    assert "fleet_goodput.api" in modules
    assert {m.split(".")[0] for m in modules} & {"apache_beam", "great_expectations", "duckdb"} == set()
