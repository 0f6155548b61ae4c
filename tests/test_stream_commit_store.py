"""A streaming pipeline's panes committed to the store (fleet_goodput/store/stream_commit.py), without a pipeline:
a retried pane is committed once, a killed commit leaves the last run as it was, counts that do not add up
commit nothing, and a store of runs and a store of a streaming pipeline refuse each other.
(tests/test_stream_commits.py runs the pipeline itself against a batch run.)"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from fleet_goodput.core.config import load_settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.core.session import STATE_FORMAT
from fleet_goodput.runs.batch import plan_run
from fleet_goodput.store.delta_store import RunRecord, Store, StoreError
from fleet_goodput.store.stream_commit import STREAM_MODE, CountsDoNotAddUp, Pane, commit_pane
from fleet_goodput.store.tables import JOB_WINDOW

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000_000
SETTINGS = load_settings()
RUN_SETTINGS = RunSettings()
STREAM = "fleet-goodput-stream-test"


def window_row(window: int, version: int, productive_chip_s: float) -> dict:
    """A job_window row of job j1: window number `window` (one hour each), as of firing `version` (minutes)."""
    row = {column.key: 0.0 for column in JOB_WINDOW.columns if pa.types.is_floating(column.type)}
    return {**row, "job_id": "j1", "window_start_us": T0 + window * 60 * MINUTE, "version_us": T0 + version * MINUTE,
            "productive_chip_s": productive_chip_s, "lifetime_chip_s": productive_chip_s,
            "all_allocated_chip_s": productive_chip_s}


def late_row(event_id: str) -> dict:
    return {"stream": "runtime", "event_id": event_id, "job_id": "j1", "event_time_us": T0, "type": "STEP_END",
            "lateness_s": 7200.0, "allowed_lateness_s": 3600.0}


def commit(store: Store, pane: Pane, sequence: int, stream_id: str = STREAM):
    return commit_pane(store, pane, stream_id=stream_id, sequence=sequence, settings=SETTINGS,
                       run_settings=RUN_SETTINGS, source="test")


def productive(store: Store, run: RunRecord | None = None) -> dict[int, float]:
    table = store.read("job_window", run or store.latest()).to_pylist()
    return {(row["window_start"].timestamp() * 1_000_000 - T0) // (60 * MINUTE): row["productive_chip_s"]
            for row in table}


FIRST = Pane({"job_window": [window_row(0, 60, 100.0)], "late": [late_row("r1")]},
             {("runtime", "read"): 3, ("runtime", "accepted"): 1, ("runtime", "late"): 1})
SECOND = Pane({"job_window": [window_row(0, 120, 250.0), window_row(1, 120, 40.0)]},
              {("runtime", "read"): 1, ("runtime", "accepted"): 2})


def test_each_pane_is_a_run_and_a_later_version_of_a_window_replaces_it(tmp_path):
    store = Store(tmp_path / "out")
    first, second = commit(store, FIRST, 0), commit(store, SECOND, 1)
    assert (first.run_id, second.run_id) == (1, 2) and {first.mode, second.mode} == {STREAM_MODE}
    assert productive(store) == {0: 250.0, 1: 40.0}
    assert productive(store, first) == {0: 100.0}  # the earlier run reads as it was
    assert [row["event_id"] for row in store.read("late", second).to_pylist()] == ["r1"]
    runtime = second.manifest["streams"]["runtime"]
    # 4 read, 3 accepted, 1 late: 0 wait; after the first pane 1 waited (3 read, 1 accepted, 1 late).
    assert (runtime["read"], runtime["accepted"], runtime["late"], runtime["waiting"]) == (4, 3, 1, 0)
    assert first.manifest["streams"]["runtime"]["waiting"] == 1 and first.manifest["reconciles"]
    assert first.as_of_us == T0 + 60 * MINUTE and second.as_of_us == T0 + 120 * MINUTE


def test_a_retried_pane_is_committed_once(tmp_path):
    store = Store(tmp_path / "out")
    commit(store, FIRST, 0)
    assert commit(store, FIRST, 0) is None  # the runner retried the bundle after its commit was made
    assert [run.run_id for run in store.runs()] == [1]
    assert store.latest().manifest["streams"]["runtime"]["read"] == 3
    assert commit(store, FIRST, 0, stream_id="another-pipeline").run_id == 2  # a new pipeline numbers afresh


def test_a_retried_pane_is_known_after_the_runs_log_is_checkpointed_and_cleaned(tmp_path):
    store = Store(tmp_path / "out")
    commit(store, FIRST, 0)
    commit(store, SECOND, 1)
    runs = DeltaTable(store.path("runs"))
    runs.create_checkpoint()
    runs.cleanup_metadata()  # Store.maintain does both once a log is long
    for commit_file in (tmp_path / "out" / "runs" / "_delta_log").glob("0000000000000000000[01].json"):
        commit_file.unlink()  # as the clean-up of a log past the retention leaves it
    fresh = Store(tmp_path / "out")
    assert fresh.committed_sequence(STREAM) == 1
    assert commit(fresh, SECOND, 1) is None


def test_a_commit_killed_before_its_run_row_leaves_the_last_run_and_is_undone(tmp_path):
    store = Store(tmp_path / "out")
    commit(store, FIRST, 0)
    with store.lock():  # a commit killed after writing its tables, before its runs row
        killed = store.begin()
        killed.write_keyed(JOB_WINDOW, rows=JOB_WINDOW.to_arrow([window_row(0, 90, 999.0)], dated=True))
    assert productive(store) == {0: 100.0}  # readers read the latest run's versions
    commit(store, SECOND, 1)
    assert productive(store) == {0: 250.0, 1: 40.0}
    assert store.latest().run_id == 2


def test_counts_that_settle_more_than_was_read_commit_nothing(tmp_path):
    store = Store(tmp_path / "out")
    commit(store, FIRST, 0)
    with pytest.raises(CountsDoNotAddUp, match="runtime would have 2 more events settled than read"):
        commit(store, Pane({}, {("runtime", "accepted"): 3}), 1)
    assert [run.run_id for run in store.runs()] == [1]


def test_a_store_of_runs_and_a_store_of_a_stream_refuse_each_other(tmp_path):
    runs = Store(tmp_path / "runs")
    with runs.lock():
        transaction = runs.begin()
        transaction.commit(RunRecord(run_id=1, committed_at_us=T0, mode="batch", input="in", as_of_us=T0,
                                     frontier_us=None, files_applied=0, files_skipped=0, state_format=STATE_FORMAT))
    with pytest.raises(StoreError, match="a streaming pipeline keeps its own in the runner"):
        commit(runs, FIRST, 0)
    streamed = Store(tmp_path / "streamed")
    commit(streamed, FIRST, 0)
    (tmp_path / "input" / "scheduler").mkdir(parents=True)
    with streamed.lock(), pytest.raises(StoreError, match="written by a streaming pipeline"):
        plan_run(str(tmp_path / "input"), streamed, None)
