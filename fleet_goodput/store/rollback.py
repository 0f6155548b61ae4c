"""Undo runs: put an output store back as an earlier committed run left it, as one new run.

A rollback to run K restores every table to the version run K names (Delta
restore: a new version of each table, the later ones stay in its history):
the people-facing tables, the keyed state of the jobs still open, the input
files applied (so the files later runs applied are new again and the next
run reads them), and the settings. Then it commits a `runs` row of its own,
mode `rollback`, carrying run K's as-of time and manifest, so the next run
continues from run K exactly as if the later runs had never been made
(tests/runs/test_operator_mistakes.py). Nothing is erased: the rolled-back runs stay in the
`runs` table, readable with `mpg sql --run`, and a rollback to one of them
undoes the rollback, while they are kept (maintenance.kept_runs: the retention).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from fleet_goodput.store import runs_table
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.layout import is_remote, table_paths
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.store_check import require_intact, run_problems
from fleet_goodput.store.transaction import begin


@dataclass(frozen=True)
class Rollback:
    record: RunRecord  # the rollback's own run
    target: RunRecord  # the run whose store it restored
    undone: tuple[int, ...]  # the runs after the target that it undid
    files_new_again: int  # input files later runs applied, which the next run reads again


def roll_back(output_dir: str, to_run: int) -> Rollback:
    """Restore the store at `output_dir` to run `to_run`, as one new committed run (the caller
    publishes its views). StoreBusy while another process holds the output; StoreError for a run
    that is not there, is the latest, or whose files are no longer kept."""
    store = Store(output_dir)
    if is_remote(store.root):
        raise StoreError("mpg rollback works on a local output: it needs the output's lock")
    with store.lock():
        latest = require_intact(store)
        if latest is None:
            raise StoreError(f"{store.root} holds no committed run: nothing to roll back")
        target = store.run(to_run)
        if target.run_id == latest.run_id:
            raise StoreError(f"run {to_run} is the latest run of {store.root} already: nothing to roll back")
        problems = run_problems(store, target)
        if problems:
            raise StoreError(
                f"run {to_run} can no longer be restored: its files are no longer kept (a store keeps "
                "the runs of the retention, runs.retention_hours, at most the latest "
                f"{runs_table.KEEP_RUNS_AT_MOST:,}):\n" + "".join(f"  {problem}\n" for problem in problems)
            )
        new_again = len(store.applied_files(latest)) - len(store.applied_files(target))
        transaction = begin(store)
        for name, relative in table_paths().items():
            wanted = target.versions.get(name)
            if wanted == transaction.versions.get(name):
                continue
            table = DeltaTable(store.path(relative))
            if wanted is None:  # a table the target's run had not written: empty, as then
                write_deltalake(table, pa.schema(table.schema().to_arrow()).empty_table(), mode="overwrite")
            else:
                table.restore(wanted)
            transaction.versions[name] = wanted if wanted is None else DeltaTable(store.path(relative)).version()
        run_id = latest.run_id + 1
        undone = tuple(run.run_id for run in store.runs(from_run=target.run_id + 1))
        record = restating_run(
            target,
            run_id,
            "rollback",
            store.root,
            dict(transaction.versions),
            target.state_format,
            rolled_back_to=target.run_id,
            undone_runs=list(undone),
        )
        transaction.commit(record)
    return Rollback(record, target, undone, new_again)


def restating_run(
    base: RunRecord, run_id: int, mode: str, output: str, versions: dict, state_format: int, **noted
) -> RunRecord:
    """Run `run_id`, which applies no file and moves no time: `base`'s figures at `base`'s as-of time, in
    table `versions`, with what the run did (`mode`, `noted`) in its manifest and nothing counted as read
    (a rollback restates its target; an upgrade, fleet_goodput/runs/upgrade.py, the latest run)."""
    manifest = {
        **base.manifest,
        "run_id": run_id,
        "mode": mode,
        **noted,
        "files_applied": 0,
        "files_skipped": 0,
        "output": output,
        "this_run": {stream: dict.fromkeys(counts, 0) for stream, counts in base.manifest.get("this_run", {}).items()},
    }
    return RunRecord(
        run_id=run_id,
        committed_at_us=time.time_ns() // 1000,
        mode=mode,
        input=base.input,
        as_of_us=base.as_of_us,
        frontier_us=base.frontier_us,
        files_applied=0,
        files_skipped=0,
        state_format=state_format,
        versions=versions,
        manifest=manifest,
    )
