"""A streaming pipeline's panes committed to the store (fleet_goodput/store/stream_commit.py), without a pipeline:
a retried pane is committed once, a killed commit leaves the last run as it was, counts that do not add up
commit nothing, and a store of runs and a store of a streaming pipeline refuse each other.
(tests/pipelines/test_stream_commits.py runs the pipeline itself against a batch run.)"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from fleet_goodput.core.session import STATE_FORMAT
from fleet_goodput.runs.batch import plan_run
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.stream_commit import STREAM_MODE, CountsDoNotAddUp, Pane
from fleet_goodput.store.tables import JOB_WINDOW
from fleet_goodput.store.transaction import begin
from stream_panes import FIRST, MINUTE, SECOND, STREAM, T0, commit, productive, window_row


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


def test_an_empty_pane_commits_nothing(tmp_path):
    store = Store(tmp_path / "out")
    commit(store, FIRST, 0)
    assert commit(store, Pane({"job_window": []}, {("runtime", "read"): 0}), 1) is None
    assert [run.run_id for run in store.runs()] == [1]


def test_a_retried_pane_is_known_after_the_runs_log_is_checkpointed_and_cleaned(tmp_path):
    store = Store(tmp_path / "out")
    commit(store, FIRST, 0)
    commit(store, SECOND, 1)
    runs = DeltaTable(store.path("runs"))
    runs.create_checkpoint()
    runs.cleanup_metadata()  # maintenance.maintain does both once a log is long
    for commit_file in (tmp_path / "out" / "runs" / "_delta_log").glob("0000000000000000000[01].json"):
        commit_file.unlink()  # as the clean-up of a log past the retention leaves it
    fresh = Store(tmp_path / "out")
    assert fresh.committed_sequence(STREAM) == 1
    assert commit(fresh, SECOND, 1) is None


def test_a_commit_killed_before_its_run_row_leaves_the_last_run_and_is_undone(tmp_path):
    store = Store(tmp_path / "out")
    commit(store, FIRST, 0)
    with store.lock():  # a commit killed after writing its tables, before its runs row
        killed = begin(store)
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
        transaction = begin(runs)
        transaction.commit(
            RunRecord(
                run_id=1,
                committed_at_us=T0,
                mode="batch",
                input="in",
                as_of_us=T0,
                frontier_us=None,
                files_applied=0,
                files_skipped=0,
                state_format=STATE_FORMAT,
            )
        )
    with pytest.raises(StoreError, match="a streaming pipeline keeps its own in the runner"):
        commit(runs, FIRST, 0)
    streamed = Store(tmp_path / "streamed")
    commit(streamed, FIRST, 0)
    (tmp_path / "input" / "scheduler").mkdir(parents=True)
    with streamed.lock(), pytest.raises(StoreError, match="written by a streaming pipeline"):
        plan_run(str(tmp_path / "input"), streamed, None)
