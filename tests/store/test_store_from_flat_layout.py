"""A store written before the package's modules moved into layers keeps going.

tests/data/store-flat-layout/store was written by fleet-goodput at 427cfaa,
when every module sat at the top of the package: `mpg run` over
tests/data/store-flat-layout/fleet (2 simulated hours, seed 5, 12 jobs) with
`--as_of 2026-01-01T01:00:00Z`. Its open keys' saved state names the classes
by their modules of then (fleet_goodput.session, fleet_goodput.timeline,
fleet_goodput.interruptions). A store is kept for years: continued by
today's code to the end of the same files, it must give what one run of
today's code gives over them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fleet_goodput.cli import main
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.session import state_from_bytes
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.views import connect

WRITTEN_BEFORE = Path(__file__).parents[1] / "data" / "store-flat-layout"
QUERIES = {
    "job_window": "select * exclude (version) from job_window",
    "jobs": "select * exclude (version, date) from jobs",
    "capacity_window": "select * exclude (version) from capacity_window",
}


def _rows(output, query: str) -> list:
    with connect(output) as connection:
        return sorted(connection.execute(query).fetchall())


@pytest.fixture(scope="module")
def continued_and_fresh(tmp_path_factory):
    root = tmp_path_factory.mktemp("flat")
    shutil.copytree(WRITTEN_BEFORE, root, dirs_exist_ok=True)
    continued = run_batch(str(root / "fleet"), str(root / "store"), load_settings(), build_views=False)
    fresh = run_batch(str(root / "fleet"), str(root / "fresh"), load_settings(), build_views=False)
    return root, continued, fresh


def test_the_saved_state_names_the_modules_of_then():
    """The fixture is what it claims: its state would not unpickle by today's module names alone."""
    blobs = [
        blob
        for path in (WRITTEN_BEFORE / "store" / "state" / "keys").glob("*.parquet")
        for blob in pq.read_table(path, columns=["blob"]).column("blob").to_pylist()
    ]
    assert len(blobs) >= 10
    assert all(b"fleet_goodput.session" in blob and b"fleet_goodput.core" not in blob for blob in blobs)
    states = [state_from_bytes(blob) for blob in blobs]
    assert {type(state).__module__ for state in states} == {"fleet_goodput.core.session"}


def test_continuing_it_gives_what_one_run_gives(continued_and_fresh):
    root, continued, fresh = continued_and_fresh
    assert continued.committed and continued.run.run_id == 2
    assert continued.manifest["as_of_us"] == fresh.manifest["as_of_us"]
    for name, query in QUERIES.items():
        expected = _rows(root / "fresh", query)
        assert len(expected) >= 8, name
        assert _rows(root / "store", query) == expected, name


def test_every_view_reads_it_as_it_was_written(tmp_path):
    """Before any run of today's code: every view binds and reads (a column a later release added to a table,
    jobs.first_running_time or jobs.unended_runs, reads as null in rows written before it), and the report's
    figures come out, so an upgrade never leaves a store unreadable until its next run."""
    store = tmp_path / "store"
    shutil.copytree(WRITTEN_BEFORE / "store", store)
    jobs_columns = set(pq.read_schema(next((store / "tables" / "jobs").glob("date=*/*.parquet"))).names)
    assert {"first_running_time", "unended_runs"}.isdisjoint(jobs_columns), "the fixture predates both"
    with connect(store) as connection:
        views = [
            name for (name,) in connection.execute("select view_name from duckdb_views() where not internal").fetchall()
        ]
        assert len(views) > 30
        for view in views:
            connection.execute(f'select * from "{view}"').fetchall()
        assert connection.execute(
            "select count(*), count(unended_runs), count(first_running_time) from jobs"
        ).fetchone() == (7, 0, 0)  # the jobs submitted by its as-of time


def test_its_next_run_stores_max_silence_s_and_says_so(tmp_path, capsys):
    """The fixture kept its settings before stores kept max_silence_s: readers show the default, not stored,
    and its next run stores the one it computes with, saying so, as a store from before settings were kept."""
    shutil.copytree(WRITTEN_BEFORE, tmp_path, dirs_exist_ok=True)
    store = tmp_path / "store"
    silence = "select value, stored from settings where setting = 'max_silence_s'"
    with connect(store) as connection:
        assert connection.execute(silence).fetchall() == [("21600", False)]
    assert main(["run", "--input", str(tmp_path / "fleet"), "--output", str(store), "-q"]) == 0
    assert (
        f"mpg run: note: {store} kept its settings before outputs kept max_silence_s: this run stores the one "
        "it computes with (21600 s, the default)"
    ) in capsys.readouterr().err
    with connect(store) as connection:
        assert connection.execute(silence).fetchall() == [("21600", True)]
