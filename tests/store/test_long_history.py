"""Issue 26: a store of hundreds of runs keeps its Delta logs short and still reads right.

The history is built cheaply (tests/long_history.py: commits that change no
row); the runs before and after it are real `mpg run`s over the worked
example cut in two, so the store must end up with the figures of one run over
all of it (tests/runs/test_split_invariance.py holds that for real cuts).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import worked_example
from long_history import extend_history
from fleet_goodput.cli import main
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store import runs_table
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.layout import RUNS, table_paths
from fleet_goodput.store.maintenance import CHECKPOINT_EVERY
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import split_by_time, write_events

pytestmark = pytest.mark.slow  # a store of 300 runs and real runs around them, about 12 CPU s: scheduled first

KEPT = 100  # the runs a store keeps readable, at most (KEEP_RUNS_AT_MOST, 1,000 in use: fewer here, to be quick)
HISTORY = 300


def _log(store: Store, relative: str) -> tuple[list[int], list[int]]:
    """(commit versions, checkpoint versions) of a table's Delta log."""
    names = os.listdir(Path(store.path(relative), "_delta_log"))
    commits = sorted(int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit())
    checkpoints = sorted(int(n[:20]) for n in names if n.endswith(".checkpoint.parquet"))
    return commits, checkpoints


def _rows(output: Path, run: int | None = None) -> dict[str, list[tuple]]:
    with connect(output, run=run) as connection:
        return {
            name: connection.execute(f"select * {exclude} from {name} order by all").fetchall()
            for name, exclude in (
                ("job_window", "exclude (version)"),
                ("jobs", "exclude (version)"),
                ("capacity_window", "exclude (version)"),
                ("rejected", ""),
                ("late", ""),
            )
        }


def test_hundreds_of_runs_leave_checkpointed_short_logs_and_the_same_figures(
    tmp_path, monkeypatch, capsys, worked_example_run
):
    monkeypatch.setattr(runs_table, "KEEP_RUNS_AT_MOST", KEPT)
    whole = tmp_path / "whole"
    for stream, records in worked_example.records().items():
        write_events(whole / stream / "part-0.avro", stream, records)
    first, second = split_by_time(whole, [worked_example.T0_US + 300 * 1_000_000], tmp_path / "parts")
    output = tmp_path / "out"
    run_batch(str(first), str(output), load_settings(), build_views=False)
    after_first = _rows(output)
    extend_history(output, HISTORY, checkpoints=False)  # the store's maintenance makes them
    store = Store(output)
    before = {relative: len(_log(store, relative)[0]) for relative in [*table_paths().values(), RUNS]}
    assert before[RUNS] > HISTORY and before["state/keys"] > HISTORY

    outcome = run_batch(str(second), str(output), load_settings(), build_views=False)  # the next real run

    last = HISTORY + 2
    assert outcome.run.run_id == last and len(store.runs()) == last
    kept_from = last - KEPT + 1
    for relative in [*table_paths().values(), RUNS]:
        commits, checkpoints = _log(store, relative)
        if before[relative] <= KEPT:
            continue  # a table no run writes (late, rejected, settings…) keeps its few commits
        assert checkpoints, relative
        assert len(commits) <= KEPT + CHECKPOINT_EVERY + 5, (relative, len(commits))  # cleaned: not 300 and more
    # The kept runs read; an earlier one says it is gone, and cannot be rolled back to.
    assert _rows(output, kept_from) == after_first  # a run that changed no row
    with pytest.raises(StoreError, match="run 11 can no longer be read: its version"):
        _rows(output, 11)
    assert main(["rollback", "--output", str(output), "--to", "11"]) == 2
    assert "run 11 can no longer be restored: its files are no longer kept" in capsys.readouterr().err
    assert _rows(output) == _rows(worked_example_run[1])  # the figures of one run over all of it


def test_runs_lists_the_latest_by_default(tmp_path, worked_example_run, capsys):
    output = tmp_path / "out"
    shutil.copytree(worked_example_run[1], output)
    extend_history(output, 30)
    assert main(["runs", "--output", str(output)]) == 0
    printed = capsys.readouterr()
    assert [line.split()[0] for line in printed.out.splitlines()[1:]] == [str(n) for n in range(12, 32)]
    assert "the latest 20 runs; earlier ones with --all or --since TIME" in printed.err
    assert main(["runs", "--output", str(output), "--all"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1 + 31
    assert main(["runs", "--output", str(output), "--last", "3", "--format", "json"]) == 0
    assert '"run": 29' in capsys.readouterr().out
    # The history's runs are dated 5 s apart up to now: run 25 and the 6 after it; run 1 (the worked
    # example's, committed when this test worker built it) only if that was as recent.
    committed = Store(output).run(25).committed_at_us
    first = ["1"] if Store(output).run(1).committed_at_us >= committed else []
    assert main(["runs", "--output", str(output), "--since", format_time_us(committed)]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == [*first, *map(str, range(25, 32))]
    with pytest.raises(StoreError, match="no run 99"):
        Store(output).run(99)
