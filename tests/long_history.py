"""A long history of runs, built cheaply: what thousands of a stream's runs leave in a store.

Each of a stream's runs commits one Delta version to every table and one row
to `runs`; what makes a store slow after thousands of runs is the number of
those commits, not their data (issue 26: 36 daily runs stayed fast, 10,000
stream runs did not). So a run here changes no row: its commit to each table
is a `commitInfo`-only entry written into the table's log (what a Delta
vacuum commits too), and its `runs` row is a copy of the latest run's, naming
those versions, committed `every_s` apart up to now. The runs rows are
appended in batches, and the runs table's log gets one commit per run as well. With `checkpoints`,
every log gets a checkpoint each 100 commits, as delta-rs writes one after
its own commits (`delta.checkpointInterval`); without, the store's own
maintenance must make them. Used by tests/store/test_long_history.py and
benchmarks/bench_history.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.layout import RUNS, table_paths

ROWS_PER_APPEND = 100
CHECKPOINT_INTERVAL = 100  # delta-rs' default delta.checkpointInterval


def extend_history(output: str | Path, runs: int, every_s: float = 5.0, checkpoints: bool = True) -> None:
    """Commit `runs` more runs that change no row to the store at `output` (one run at least)."""
    store = Store(output)
    latest = store.latest()
    versions = {
        name: DeltaTable(store.path(relative)).version()
        for name, relative in table_paths().items()
        if latest.versions.get(name) is not None
    }
    runs_version = DeltaTable(store.path(RUNS)).version()
    end_s = time.time()
    pending = []
    for number in range(1, runs + 1):
        committed_s = end_s - (runs - number) * every_s
        for name in versions:
            versions[name] += 1
            _empty_commit(store.path(table_paths()[name]), versions[name], committed_s, checkpoints)
        run_id = latest.run_id + number
        pending.append(
            dataclasses.replace(
                latest,
                run_id=run_id,
                committed_at_us=int(committed_s * 1_000_000),
                mode="stream",
                versions={**latest.versions, **versions},
                manifest={**latest.manifest, "run_id": run_id},
            ).to_arrow()
        )
        if len(pending) == ROWS_PER_APPEND or number == runs:
            for _ in pending[1:]:  # one commit of the runs log per run: the rest carry no row
                runs_version += 1
                _empty_commit(store.path(RUNS), runs_version, committed_s, checkpoints)
            write_deltalake(store.path(RUNS), pa.concat_tables(pending), mode="append")
            runs_version += 1
            os.utime(Path(store.path(RUNS), "_delta_log", f"{runs_version:020d}.json"), (committed_s, committed_s))
            pending = []


def _empty_commit(table: str, version: int, committed_s: float, checkpoint: bool) -> None:
    """A commit that changes no row, dated `committed_s`; checkpointed where delta-rs would (`checkpoint`)."""
    path = Path(table, "_delta_log", f"{version:020d}.json")
    path.write_text(
        json.dumps(
            {
                "commitInfo": {
                    "timestamp": int(committed_s * 1000),
                    "operation": "WRITE",
                    "operationParameters": {"mode": "Append"},
                    "clientVersion": "fleet-goodput tests/long_history.py",
                }
            }
        )
        + "\n"
    )
    os.utime(path, (committed_s, committed_s))
    if checkpoint and version % CHECKPOINT_INTERVAL == CHECKPOINT_INTERVAL - 1:
        DeltaTable(table, version=version).create_checkpoint()
