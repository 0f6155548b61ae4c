"""Results never depend on how the input was cut.

A 5-day simulated fleet whose jobs span days is run once over everything, and
again as consecutive runs into one output, cut inside windows, on window edges,
at midnight and one hour apart. The latest results of the consecutive runs must
equal the single run's, to the integer chip-microsecond, for every job, window
and capacity row.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from fleet_goodput.core.config import load_settings
from fleet_goodput.core.figure_vector import FIGURES
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import split_by_time

pytestmark = pytest.mark.slow

HOUR_US = 3600 * 1_000_000
DAYS = 5
# Cuts inside windows (0.5, 71.9 h), on window edges (30, 31 h: a day and a
# quarter in, where jobs that span days start), at midnight (24, 96 h, where a
# day's partition ends), and a one-hour run (30-31 h). Seven runs, one of them
# a day long (71.9-96 h), keep the suite's time in bounds.
CUTS = [START_US + int(h * HOUR_US) for h in (0.5, 24, 30, 31, 71.9, 96)]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    simulate(root / "fleet", seed=5, hours=DAYS * 24, jobs=100)
    # Every read here goes through connect(): no run needs goodput.duckdb (build_views=False).
    whole = run_batch(str(root / "fleet"), str(root / "whole"), load_settings(), build_views=False)
    return root, whole


@pytest.fixture(scope="module")
def consecutive(fleet):
    """The fleet as consecutive runs into one output: (output, each run's outcome)."""
    root, _ = fleet
    parts = split_by_time(root / "fleet", CUTS, root / "parts")
    output = root / "out-consecutive"
    return output, [run_batch(str(part), str(output), load_settings(), build_views=False) for part in parts]


def _rows(output, query: str) -> dict:
    with connect(output) as connection:
        cursor = connection.execute(query)
        columns = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(columns, row)) for row in cursor.fetchall()}


def _job_windows(output) -> dict:
    figures = ", ".join(f"{f}_chip_s" for f in FIGURES)
    return _rows(output, f"select (job_id, window_start) as k, {figures}, ideal_chip_s from job_window")


def _assert_same_job_windows(actual: dict, expected: dict, min_rows: int = 500) -> None:
    assert len(expected) > min_rows
    assert sorted(set(actual) ^ set(expected)) == []
    for key, row in expected.items():
        ideal = row.pop("ideal_chip_s")
        got = dict(actual[key])
        got_ideal = got.pop("ideal_chip_s")
        assert got == row, key  # chip-seconds are integer chip-microseconds / 1e6: exact
        # Ideal chip-seconds are a ratio of FLOPs, shared between windows in float.
        assert (got_ideal is None) == (ideal is None) and (ideal is None or got_ideal == pytest.approx(ideal, rel=1e-9))


def _capacity(output) -> dict:
    return _rows(output, "select (cluster, accelerator, window_start) as k, capacity_chip_s from capacity_window")


def _jobs(output) -> dict:
    return _rows(output, "select * exclude (version, date) from jobs")


# One file, so the fleet and its single run are built once: the suite runs it first (tests/conftest.py),
# on a core of its own while the other core takes the rest.
def test_consecutive_runs_equal_one_run_over_everything(fleet, consecutive):
    root, whole = fleet
    output, outcomes = consecutive
    assert all(o.committed for o in outcomes) and outcomes[-1].run.run_id == len(CUTS) + 1

    _assert_same_job_windows(_job_windows(output), _job_windows(root / "whole"))
    assert _capacity(output) == _capacity(root / "whole")
    assert _jobs(output) == _jobs(root / "whole")
    assert outcomes[-1].manifest["as_of_us"] == whole.manifest["as_of_us"]
    for stream, counts in outcomes[-1].manifest["streams"].items():
        assert counts["reconciles"] and counts["late"] == 0
        assert counts["read"] == whole.manifest["streams"][stream]["read"]
        assert counts["accepted"] == whole.manifest["streams"][stream]["accepted"]


def test_as_of_cuts_inside_files_lose_nothing(fleet):
    """`--as_of` at cuts that fall inside files (every file of the fleet spans its five days): each
    run rejects nothing for being after its as-of time; those events wait in the store's state, and
    a last run with no new file, whose as-of is the scheduler's clock again, equals one run over
    everything."""
    root, whole = fleet
    output = root / "out-as-of-cuts"
    for cut in (START_US + int(40.25 * HOUR_US), START_US + int(80.5 * HOUR_US)):
        outcome = run_batch(str(root / "fleet"), str(output), load_settings(), given_as_of_us=cut, build_views=False)
        assert outcome.committed and outcome.manifest["as_of_us"] == cut and outcome.manifest["reconciles"]
        assert all(c["waiting"] > 0 for name, c in outcome.manifest["streams"].items() if name != "profiler")
    last = run_batch(str(root / "fleet"), str(output), load_settings(), build_views=False)
    assert last.committed and last.run.files_applied == 0
    assert last.manifest["as_of_us"] == whole.manifest["as_of_us"]
    assert last.manifest["streams"] == whole.manifest["streams"]
    _assert_same_job_windows(_job_windows(output), _job_windows(root / "whole"))
    assert _capacity(output) == _capacity(root / "whole")
    assert _jobs(output) == _jobs(root / "whole")


def test_a_checkpoint_in_a_later_run_turns_earlier_pending_into_productive(consecutive):
    """Each run's figures of a window are the table's Delta version that run left (the table holds the latest)."""
    output, outcomes = consecutive
    # Read below by name, as DuckDB reads a Python variable.
    versions = pa.concat_tables(  # noqa: F841
        DeltaTable(f"{output}/tables/job_window", version=o.run.versions["job_window"]).to_pyarrow_table()
        for o in outcomes
    )
    moved = duckdb.sql("""
        select count(*) from (
            select job_id, window_start,
                   arg_min(pending_chip_s, version) as first_pending, arg_max(pending_chip_s, version) as last_pending,
                   arg_max(productive_chip_s, version) - arg_min(productive_chip_s, version) as gained
            from versions group by all)
        where first_pending > 0 and last_pending = 0 and gained > 0""").fetchall()[0][0]
    assert moved > 0


def test_a_file_delivered_again_changes_nothing(fleet, tmp_path):
    root, whole = fleet
    again = run_batch(str(root / "fleet"), str(root / "whole"), load_settings())
    assert not again.committed and len(again.skipped) == len(list((root / "fleet").glob("*/*.avro")))
    assert again.run.run_id == whole.run.run_id
    # Under another name, the same content is still recognised.
    copy = tmp_path / "copy"
    (copy / "runtime").mkdir(parents=True)
    source = sorted((root / "fleet" / "runtime").glob("*.avro"))[0]
    (copy / "runtime" / "renamed.avro").write_bytes(source.read_bytes())
    assert not run_batch(str(copy), str(root / "whole"), load_settings()).committed


def test_an_as_of_before_the_last_run_is_a_clear_error(fleet):
    from fleet_goodput.store.errors import StoreError

    root, whole = fleet
    with pytest.raises(StoreError, match="earlier than run 1's as-of"):
        run_batch(
            str(root / "fleet"), str(root / "whole"), load_settings(), given_as_of_us=whole.manifest["as_of_us"] - 1
        )


def test_state_follows_the_open_jobs_not_the_history(consecutive):
    output, _ = consecutive
    keys = _state_keys(output)
    with connect(output) as connection:
        running = connection.execute("select count(*) from jobs where status in ('RUNNING', 'PENDING')").fetchone()[0]
        clusters = connection.execute("select count(distinct (cluster, accelerator)) from capacity_window").fetchone()[
            0
        ]
        total = connection.execute("select count(*) from jobs").fetchone()[0]
    assert keys <= running + clusters + 10 < total


def _state_keys(output) -> int:
    from fleet_goodput.store.delta_store import Store

    store = Store(output)
    return store.read("state_keys", store.latest()).num_rows


def test_a_run_in_chunks_equals_one_pass(fleet, tmp_path):
    """A backfill computed chunk by chunk (memory bounded by a chunk) is one run with one pass's figures.
    Two-day chunks: three of them, so that jobs cross two chunk edges. Every chunk's pipeline reads every
    file, but only the first reports a file that cannot be read: it is rejected once, as in one pass."""
    root, whole = fleet
    damaged = tmp_path / "fleet"  # the fleet's files, and one more that is not Avro
    for path in (root / "fleet").glob("*/*.avro"):
        (damaged / path.parent.name).mkdir(parents=True, exist_ok=True)
        (damaged / path.parent.name / path.name).symlink_to(path)
    (damaged / "runtime" / "damaged.avro").write_bytes(b"Obj\x01 not really avro")
    progress = []
    chunked = run_batch(
        str(damaged),
        str(root / "out-chunked"),
        load_settings(),
        chunk_hours=48,
        build_views=False,
        progress=progress.append,
    )
    # 120 hours from midnight are three two-day chunks, found from the scheduler's clock; then one line per
    # chunk (and, on a slow host, a heartbeat's).
    assert progress[1].startswith(f"Computing {len(list(damaged.glob('*/*.avro')))} new file(s), ")
    assert progress[1].endswith(" in chunks of 48 h of event time, one pipeline each")
    assert progress[-1].startswith("Committing run 1 to ")
    progress = [line for line in progress[2:-1] if not line.startswith("  still ")]
    assert progress[0].startswith("Read the scheduler's clock from ") and progress[0].endswith(
        ": 3 chunk(s) of event time"
    )
    assert [line.split(":")[0].strip() for line in progress[1:]] == [
        "chunk 1/3 (2026-01-01T00",
        "chunk 2/3 (2026-01-03T00",
        "chunk 3/3 (2026-01-05T00",
    ]
    assert chunked.run.run_id == 1 and chunked.manifest["as_of_us"] == whole.manifest["as_of_us"]
    _assert_same_job_windows(_job_windows(root / "out-chunked"), _job_windows(root / "whole"))
    assert _capacity(root / "out-chunked") == _capacity(root / "whole")
    assert _jobs(root / "out-chunked") == _jobs(root / "whole")

    query = "select stream, reason, source, records from rejected order by all"
    with connect(root / "whole") as connection:
        rejected = connection.execute(query).fetchall()
    with connect(root / "out-chunked") as connection:
        chunked_rejected = connection.execute(query).fetchall()
    unreadable = [row for row in chunked_rejected if (row[2] or "").endswith("damaged.avro")]
    assert len(unreadable) == 1 and [row for row in chunked_rejected if row not in unreadable] == rejected
    records = unreadable[0][3]
    for stream, counts in chunked.manifest["streams"].items():
        expected = dict(whole.manifest["streams"][stream])
        if stream == "runtime":
            expected["read"] += records
            expected["rejected"] += records
        assert counts == expected


def test_a_first_run_that_accepts_nothing_loses_nothing(tmp_path):
    """A stream's first run may see a job's runtime and profiler files before the
    scheduler file with its SUBMIT: nothing is accepted yet, so there is no as-of
    time. Those events must wait (their rejection provisional) for the SUBMIT,
    not be rejected for good; the runs then end equal to one run."""
    simulate(tmp_path / "fleet", seed=3, hours=3, jobs=8)
    settings = load_settings()
    whole = run_batch(str(tmp_path / "fleet"), str(tmp_path / "whole"), settings, build_views=False)
    live = tmp_path / "live"
    (live / "runtime").mkdir(parents=True)
    for path in (tmp_path / "fleet" / "runtime").glob("*.avro"):
        (live / "runtime" / path.name).write_bytes(path.read_bytes())
    first = run_batch(str(live), str(tmp_path / "out"), settings, build_views=False)
    assert first.manifest["as_of_us"] is None
    assert first.manifest["streams"]["runtime"]["reconciles"]
    with connect(tmp_path / "out") as connection:
        assert connection.execute("select count(*) from rejected where not provisional").fetchone() == (0,)
        waiting = connection.execute("select count(*) from rejected where provisional").fetchone()[0]
    assert waiting == first.manifest["streams"]["runtime"]["read"] > 0
    for stream in ("scheduler", "profiler"):
        (live / stream).mkdir()
        for path in (tmp_path / "fleet" / stream).glob("*.avro"):
            (live / stream / path.name).write_bytes(path.read_bytes())
    last = run_batch(str(live), str(tmp_path / "out"), settings, build_views=False)
    assert last.manifest["streams"] == whole.manifest["streams"]
    expected = _job_windows(tmp_path / "whole")
    assert len(expected) > 10
    assert _job_windows(tmp_path / "out") == expected
    assert _jobs(tmp_path / "out") == _jobs(tmp_path / "whole")
