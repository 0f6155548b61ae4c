"""The output store: portable, time-travelling, and honest about its as-of time."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import worked_example
from fleet_goodput.cli import main
from fleet_goodput.core.config import load_settings
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.views import DATABASE_FILE, connect
from fleet_goodput.telemetry.avro_io import write_events

pytestmark = pytest.mark.slow  # end to end, tens of seconds: scheduled first (tests/conftest.py)

T0 = worked_example.T0_US
DAY_US = 86_400 * 1_000_000


def _write(root, records: dict) -> None:
    for stream, rows in records.items():
        write_events(root / stream / "part-0.avro", stream, rows)


@pytest.fixture(scope="module")
def worked(worked_example_run, tmp_path_factory):
    """A folder whose `out` is a copy of `mpg run`'s output over the worked example (tests/conftest.py)."""
    root = tmp_path_factory.mktemp("store")
    shutil.copytree(worked_example_run[1], root / "out")
    return root


def _job(output) -> tuple:
    with connect(output) as connection:
        return connection.execute("select sg, rg, pg, mpg from job_goodput").fetchone()


def test_a_moved_or_copied_output_reads_its_own_tables(worked, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(worked / "out", moved)
    expected = _job(worked / "out")
    # The copy then diverges: a second run on it must not show in the original, nor the other way round.
    late_profile = {**worked_example.records()["profiler"][0], "event_id": "p-later", "event_time": T0 + 590_000_000}
    write_events(tmp_path / "more" / "profiler" / "part-1.avro", "profiler", [late_profile])
    run_batch(str(tmp_path / "more"), str(moved), load_settings())
    assert _job(worked / "out") == expected
    shutil.rmtree(worked / "out" / "tables")  # the original's files are gone: the copy does not need them
    try:
        assert _job(moved)[0] == pytest.approx(expected[0])
    finally:
        shutil.copytree(moved / "tables", worked / "out" / "tables")  # the runs of `moved` include the original's


def test_goodput_duckdb_opens_from_inside_the_output_with_the_oldest_declared_storage(worked):
    cwd = os.getcwd()
    os.chdir(worked / "out")
    try:
        with duckdb.connect(DATABASE_FILE, read_only=True) as connection:
            (sg,) = connection.execute("select sg from job_goodput").fetchone()
            storage = connection.execute(
                "select tags from duckdb_databases() where database_name = 'goodput'"
            ).fetchone()
    finally:
        os.chdir(cwd)
    assert sg == pytest.approx(380 / 580)
    # Written in the storage format DuckDB 1.0 and later read (pyproject.toml declares duckdb>=1.1).
    assert storage == ({"storage_version": "v1.0.0+"},)


def test_goodput_duckdb_reads_from_any_working_directory(worked, tmp_path):
    """Opened by its path from elsewhere (the DuckDB CLI's `duckdb OUT/goodput.duckdb` is this open),
    the file finds its tables in its own folder, moved or not; no "No files found"."""
    moved = tmp_path / "moved"
    shutil.copytree(worked / "out", moved)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for database in (worked / "out" / DATABASE_FILE, Path("moved") / DATABASE_FILE):
            with duckdb.connect(str(database), read_only=True) as connection:
                (sg,) = connection.execute("select sg from job_goodput").fetchone()
            assert sg == pytest.approx(380 / 580), database
    finally:
        os.chdir(cwd)


def _database_views(database: Path) -> dict[str, tuple]:
    """Every view of a goodput.duckdb: its columns and types as stored, and its rows (read from its output)."""
    cwd = os.getcwd()
    os.chdir(database.parent)
    try:
        with duckdb.connect(str(database), read_only=True) as connection:
            names = [
                name
                for (name,) in connection.execute(
                    "select view_name from duckdb_views() where not internal order by all"
                ).fetchall()
            ]
            return {
                name: (
                    connection.execute(
                        "select column_name, data_type from duckdb_columns() "
                        "where table_name = $name order by column_index",
                        {"name": name},
                    ).fetchall(),
                    connection.execute(f"select * from {name} order by all").fetchall(),
                )
                for name in names
            }
    finally:
        os.chdir(cwd)


def _tamper(database: Path, *statements: str) -> None:
    with duckdb.connect(str(database)) as connection:
        for statement in statements:
            connection.execute(statement)


def test_goodput_duckdb_after_a_later_run_is_the_file_built_afresh(worked, tmp_path):
    """A run keeps the registry's views of the last goodput.duckdb, bound once, and replaces those that
    name its files and settings (fleet_goodput/store/views.py): the views, their columns and every row
    are those of a file built afresh. A file from other views (its fingerprint), whose replaced views
    change their columns, or holding what no build makes (a table made in the DuckDB CLI), is built afresh."""
    from fleet_goodput.store.views import build_database

    output = tmp_path / "out"
    shutil.copytree(worked / "out", output)
    late_profile = {**worked_example.records()["profiler"][0], "event_id": "p-later", "event_time": T0 + 590_000_000}
    write_events(tmp_path / "more" / "profiler" / "part-1.avro", "profiler", [late_profile])
    run_batch(
        str(tmp_path / "more"), str(output), load_settings(), given_as_of_us=T0 + 600_000_000
    )  # the sample counts
    refreshed = _database_views(output / DATABASE_FILE)
    (output / DATABASE_FILE).unlink()
    build_database(output, load_settings())
    assert _database_views(output / DATABASE_FILE) == refreshed
    assert refreshed != _database_views(worked / "out" / DATABASE_FILE)  # the run changed them

    # A registry view the fingerprint vouches for is kept as it is: the file is not built afresh.
    stand_in = "create or replace view job_goodput as select 1 as stand_in"
    _tamper(output / DATABASE_FILE, stand_in)
    build_database(output, load_settings())
    assert _database_views(output / DATABASE_FILE)["job_goodput"] == ([("stand_in", "INTEGER")], [(1,)])
    for tampering in (
        "comment on macro goodput_file is 'fleet-goodput views of another registry'",
        "create or replace view late as select 1 as a_column_no_run_gives",
        "create table scratch as select 1 as made_by_hand",
    ):
        _tamper(output / DATABASE_FILE, stand_in, tampering)
        build_database(output, load_settings())
        assert _database_views(output / DATABASE_FILE) == refreshed, tampering


def test_every_table_exists_with_its_schema_from_the_first_run(worked):
    """The worked example rejects nothing and has nothing late: those tables exist all the same, empty."""
    import polars as pl
    from deltalake import DeltaTable

    from fleet_goodput.store.layout import delta_schema
    from fleet_goodput.store.tables import TABLES

    for name, table in TABLES.items():
        path = str(worked / "out" / "tables" / name)
        assert pa.schema(DeltaTable(path).schema().to_arrow()) == delta_schema(table), name
        frame = pl.read_delta(path)
        assert frame.columns == delta_schema(table).names
        assert (frame.height == 0) == (name in ("rejected", "rejected_pending", "late", "queue_quota")), name


def test_a_reader_undoes_what_a_killed_run_left_but_leaves_a_run_in_progress_alone(worked, tmp_path):
    """A run killed after committing job_window leaves that table a version ahead of its last run: the
    next reader puts it back, so polars reads the committed rows; while a run holds the output, it waits."""
    import polars as pl
    from deltalake import DeltaTable, write_deltalake

    from fleet_goodput.store.delta_store import Store

    output = tmp_path / "out"
    shutil.copytree(worked / "out", output)
    path = str(output / "tables" / "job_window")
    committed = DeltaTable(path).to_pyarrow_table()
    write_deltalake(path, committed, mode="append")  # what the killed run committed: every row again
    with Store(output).lock():  # a run in progress
        connect(output).close()
        assert pl.read_delta(path).height == 2 * committed.num_rows
    connect(output).close()
    assert pl.read_delta(path).height == committed.num_rows
    assert DeltaTable(path).version() > Store(output).latest().versions["job_window"]  # restored: a new version


def test_sql_reads_an_earlier_run(worked, tmp_path, capsys):
    output = tmp_path / "out"
    shutil.copytree(worked / "out", output)
    # An ALLOCATE of a job never submitted: it moves the scheduler's clock, and is rejected.
    allocate = next(r for r in worked_example.records()["scheduler"] if r["type"] == "ALLOCATE")
    extra = {**allocate, "event_id": "s-next", "event_time": T0 + 600_000_000, "job_id": "j9"}
    write_events(tmp_path / "next" / "scheduler" / "part-1.avro", "scheduler", [extra])
    run_batch(str(tmp_path / "next"), str(output), load_settings())
    assert main(["runs", "--output", str(output)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split()[:3] == ["run", "committed_at", "mode"] and len(listed) == 3
    assert main(["sql", "--output", str(output), "--run", "1", "--format", "csv", "select count(*) from rejected"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "0"
    assert main(["sql", "--output", str(output), "--format", "csv", "select count(*) from rejected"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "1"
    assert main(["sql", "--output", str(output), "--run", "7", "select 1"]) == 2
    assert "no run 7" in capsys.readouterr().err


def test_the_default_as_of_follows_the_scheduler_to_the_microsecond(tmp_path):
    """Orphan events 30 days on, one of the runtime and one of the scheduler (a clock far ahead),
    do not move the as-of time (docs/metric.md, "Time and the as-of time"): they wait, counted,
    rejected by no one. A FINISH at 580 s and 175 µs is the job's end, not an event after a
    millisecond-rounded as-of."""
    records = worked_example.records()
    records["runtime"].append(
        {**records["runtime"][0], "event_id": "orphan", "job_id": "nobody", "event_time": T0 + 30 * DAY_US}
    )
    records["scheduler"].append(
        {**records["scheduler"][0], "event_id": "orphan-submit", "job_id": "nobody", "event_time": T0 + 30 * DAY_US}
    )
    finish = next(r for r in records["scheduler"] if r["type"] == "FINISH")
    finish["event_time"] += 175
    _write(tmp_path / "in", records)
    outcome = run_batch(str(tmp_path / "in"), str(tmp_path / "out"), load_settings())
    assert outcome.manifest["as_of_us"] == T0 + 580_000_175
    assert {stream: counts["waiting"] for stream, counts in outcome.manifest["streams"].items()} == {
        "scheduler": 1,
        "runtime": 1,
        "profiler": 0,
    }
    assert outcome.manifest["reconciles"]
    assert _job(tmp_path / "out") == pytest.approx((380 / 580, 200 / 380, 0.5, 100 / 580))
    with connect(tmp_path / "out") as connection:
        assert connection.execute("select job_id, status from jobs").fetchall() == [("j1", "FINISHED")]
        assert connection.execute("select count(*) from rejected").fetchone() == (0,)


def test_small_files_are_compacted_and_old_versions_vacuumed(tmp_path, monkeypatch):
    """A stream's frequent runs gather small files: a run that finds many compacts them as part
    of its commit; the vacuum then removes what no run within the retention reads."""
    from fleet_goodput.core.run_settings import RunSettings
    from fleet_goodput.store import maintenance
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.telemetry.avro_io import split_by_time

    monkeypatch.setattr(maintenance, "COMPACT_ABOVE_FILES", 2)  # the third run finds three files
    _write(tmp_path / "in", worked_example.records())
    cuts = [T0 + s * 1_000_000 for s in (200, 400)]
    parts = split_by_time(tmp_path / "in", cuts, tmp_path / "parts")
    # Read through connect() and the store: goodput.duckdb is not read (build_views=False).
    for part in parts[:2]:
        run_batch(
            str(part),
            str(tmp_path / "out"),
            load_settings(),
            run_settings=RunSettings(retention_hours=1000),
            build_views=False,
        )
    first = _job_window_at(tmp_path / "out", 1)
    first_files = set(Store(tmp_path / "out").files("job_window", Store(tmp_path / "out").run(1)))
    # The third run, with a retention of 0 hours, keeps only the files of the run it continues (which must
    # stay whole until its own commit) and its own: run 1's are vacuumed.
    run_batch(
        str(parts[2]),
        str(tmp_path / "out"),
        load_settings(),
        run_settings=RunSettings(retention_hours=0),
        build_views=False,
    )
    store = Store(tmp_path / "out")
    runs = store.runs()
    assert len(runs) == 3 and len(store.files("job_window", runs[-1])) <= 2
    on_disk = {
        str(path.relative_to(store.root)) for path in (tmp_path / "out" / "tables" / "job_window").rglob("*.parquet")
    }
    only_first = first_files - set(store.files("job_window", runs[-1])) - set(store.files("job_window", runs[-2]))
    assert only_first and not only_first & on_disk
    assert _job(tmp_path / "out") == pytest.approx((380 / 580, 200 / 380, 0.5, 100 / 580))
    with pytest.raises(StoreError, match="run 1 can no longer be read: its files were removed"):
        _job_window_at(tmp_path / "out", 1)  # past the retention: said so, not a missing file (read as damage)
    assert first


def _job_window_at(output, run: int) -> list[tuple]:
    with connect(output, run=run) as connection:
        return connection.execute("select * from job_window order by all").fetchall()


def test_a_run_that_accepts_nothing_says_so_and_fails(tmp_path, capsys):
    """Issue 10: an as-of before every event, or a folder whose only file is unreadable."""
    _write(tmp_path / "in", worked_example.records())
    assert (
        main(
            [
                "run",
                "--input",
                str(tmp_path / "in"),
                "--output",
                str(tmp_path / "early"),
                "--as_of",
                "2025-06-01T00:00:00Z",
            ]
        )
        == 1
    )
    assert "no event of this run was accepted" in capsys.readouterr().err
    (tmp_path / "broken" / "runtime").mkdir(parents=True)
    (tmp_path / "broken" / "runtime" / "part-0.avro").write_bytes(b"not avro at all")
    assert main(["run", "--input", str(tmp_path / "broken"), "--output", str(tmp_path / "none")]) == 1
    assert "no event of this run was accepted" in capsys.readouterr().err
    with connect(tmp_path / "none") as connection:  # the reason is on record
        (reason,) = connection.execute("select reason from rejected").fetchone()
    assert "Avro" in reason


def test_replay_and_stream_on_an_empty_folder_say_so(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["replay", "--from", str(tmp_path / "empty"), "--to", str(tmp_path / "live")]) == 2
    assert "no telemetry in" in capsys.readouterr().err
    assert (
        main(
            [
                "stream",
                "--input",
                str(tmp_path / "empty"),
                "--output",
                str(tmp_path / "out"),
                "--stop_after_idle_s",
                "0.2",
            ]
        )
        == 1
    )
    assert "no telemetry arrived" in capsys.readouterr().err


Y2001_US = 978_307_200_000_000  # 2001-01-01T00:00:00Z: where a host's clock lands when it resets


@pytest.mark.parametrize("chunk_hours", [None, 24])
def test_events_from_a_clock_reset_into_the_past_are_rejected_and_cost_nothing(tmp_path, chunk_hours):
    """A CAPACITY level dated 2001 for the worked example's cluster, and a SUBMIT dated 2001 of a job whose
    other events are in 2026: they come 25 years before the rest of the fleet's history, so they are
    rejected with that reason (docs/metric.md, "Time and the as-of time"), no capacity or lifetime is
    stretched over the years between, and every other figure is the clean run's. A backfill in daily
    chunks (the 2001 events a chunk of their own) decides the same."""
    records = worked_example.records()
    allocate = next(r for r in records["scheduler"] if r["type"] == "ALLOCATE")
    capacity = next(r for r in records["scheduler"] if r["type"] == "CAPACITY")
    records["scheduler"] += [
        {**capacity, "event_id": "reset-capacity", "event_time": Y2001_US, "chips": 4096},
        {**records["scheduler"][0], "event_id": "reset-submit", "job_id": "j2", "event_time": Y2001_US + 60_000_000},
        {**allocate, "event_id": "j2-allocate", "job_id": "j2", "event_time": T0 + 200_000_000},
    ]
    _write(tmp_path / "in", records)
    outcome = run_batch(str(tmp_path / "in"), str(tmp_path / "out"), load_settings(), chunk_hours=chunk_hours)
    assert outcome.manifest["reconciles"] and outcome.manifest["as_of_us"] == T0 + 580_000_000
    with connect(tmp_path / "out") as connection:
        rejected = dict(connection.execute("select event_id, reason from rejected").fetchall())
        windows = connection.execute("select count(*), sum(capacity_chip_s) from capacity_window").fetchone()
        jobs = connection.execute("select job_id from jobs").fetchall()
    reset = (
        "dated 9,131 days before the fleet's history, which starts at 2026-01-01T00:00:00Z (a clock reset to "
        "a default date?): no figure rests on it"
    )
    assert rejected["reset-capacity"] == rejected["reset-submit"] == reset
    assert "SUBMIT" in rejected["j2-allocate"] and len(rejected) == 3
    assert windows == (1, 580.0 * worked_example.CHIPS) and jobs == [("j1",)]
    assert _job(tmp_path / "out") == pytest.approx((380 / 580, 200 / 380, 0.5, 100 / 580))


def test_telemetry_dated_after_this_machines_clock_is_never_rejected_for_it(tmp_path):
    """The worked example dated 2099 (as this machine's clock, if it ran 73 years behind, would see real
    telemetry): nothing is rejected for good for a reason that depends on the wall clock. Its events
    cannot set the as-of time, so every one waits, its fate provisional, and its file counts as read."""
    shift = 2_493_072_000_000_000 - T0  # 2099-01-01
    records = {
        stream: [{**r, "event_time": r["event_time"] + shift} for r in rows]
        for stream, rows in worked_example.records().items()
    }
    _write(tmp_path / "in", records)
    outcome = run_batch(str(tmp_path / "in"), str(tmp_path / "out"), load_settings(), build_views=False)
    assert outcome.manifest["as_of_us"] is None and outcome.manifest["reconciles"]
    with connect(tmp_path / "out") as connection:
        fates = dict(connection.execute("select provisional, count(*) from rejected group by all").fetchall())
    assert fates == {True: sum(len(rows) for rows in records.values())}


def test_a_store_opens_each_table_once_and_reads_on_what_is_written(tmp_path):
    """A table is opened once and brought up to date at each use (a run's checks, writes and
    compaction share it, and so do the views and the headline after its commit, and a stream's runs);
    a version asked for that is not the latest is opened as it was. Without the lock, another
    process may have written the log afresh (--replace, then a first run: version 0 again), and
    the table is then opened afresh; a pickled copy (a Flex Template's plan) keeps nothing open, nor the store's file system."""
    import pickle
    import shutil

    from deltalake import write_deltalake

    from fleet_goodput.store.delta_store import Store

    store = Store(tmp_path / "out")
    with store.lock():
        store.mark()  # a store of ours, which a later lock takes
        write_deltalake(store.path("tables/t"), pa.table({"a": [1]}))
        opened = store.delta_table("tables/t")
        write_deltalake(store.path("tables/t"), pa.table({"a": [2]}), mode="append")  # by path, not by the handle
        assert store.delta_table("tables/t") is opened and opened.version() == 1
        assert store.delta_table("tables/t", version=1) is opened
        assert store.delta_table("tables/t", version=0).to_pyarrow_table().column("a").to_pylist() == [1]
        assert store.store_files is store.store_files  # one file system for the store's life
        copy = pickle.loads(pickle.dumps(store))
        assert copy._open == {} and "store_files" not in vars(copy)  # its file system stays behind too
        assert copy.store_files.is_dir("tables/t")
        store.replace()  # the tables are gone: nothing open is kept
        assert store.delta_table("tables/t") is None
    write_deltalake(store.path("tables/t"), pa.table({"a": [3]}))
    kept = store.delta_table("tables/t")
    write_deltalake(store.path("tables/t"), pa.table({"a": [4]}), mode="append")  # another process appends
    assert store.delta_table("tables/t") is kept and kept.version() == 1
    for rewritten in ([5], [6, 7]):  # another process's --replace, then its first run, at once
        shutil.rmtree(store.path("tables/t"))
        write_deltalake(store.path("tables/t"), pa.table({"a": rewritten}))
        write_deltalake(store.path("tables/t"), pa.table({"a": [8]}), mode="append")
        again = store.delta_table("tables/t")
        assert again is not kept and sorted(again.to_pyarrow_table().column("a").to_pylist()) == sorted(rewritten + [8])
        kept = again
    shutil.rmtree(store.path("tables/t"))  # and again, before this process's next run takes the lock
    write_deltalake(store.path("tables/t"), pa.table({"a": [9]}))
    write_deltalake(store.path("tables/t"), pa.table({"a": [10]}), mode="append")
    with store.lock():
        assert sorted(store.delta_table("tables/t").to_pyarrow_table().column("a").to_pylist()) == [9, 10]
