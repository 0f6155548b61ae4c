"""Keeping a store quick after thousands of runs: which runs are kept, and the vacuum, checkpoints and log
clean-up that drop the rest (`maintain`, run under the lock after a commit).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable, WriterProperties

from fleet_goodput.store import delta_arrow, runs_table
from fleet_goodput.store.delta_log import log_versions
from fleet_goodput.store.layout import RUNS, is_remote, table_paths

if TYPE_CHECKING:
    from fleet_goodput.store.delta_store import Store

DEFAULT_RETENTION_HOURS = 7 * 24
# A table with more data files than this in a run's snapshot is compacted by that run.
COMPACT_ABOVE_FILES = 64
CHECKPOINT_EVERY = 100  # a Delta log gets a checkpoint at least this often (delta-rs' own default interval)
RUNS_ROW_GROUP = 64  # rows of the compacted runs table read together


@dataclass(frozen=True)
class Kept:
    """The runs that can still be read and rolled back to (`kept_runs`): committed since `since_us`;
    the oldest version of each table they name."""

    since_us: int
    versions: dict[str, int]
    latest_only: bool

    @property
    def vacuum_hours(self) -> int:
        """The whole hours, rounded up, since the oldest kept run was committed: a vacuum that keeps the
        files removed within them keeps every file a kept run reads (a file a run reads is removed from
        its table after that run was committed). The latest run alone reads no removed file."""
        if self.latest_only:
            return 0
        return max(0, -(-(time.time_ns() // 1000 - self.since_us) // 3_600_000_000))


def kept_runs(store: Store, retention_hours: int = DEFAULT_RETENTION_HOURS) -> Kept:
    """What the runs that can still be read and rolled back to need: those committed within
    `retention_hours`, at most the latest KEEP_RUNS_AT_MOST, and always the latest (read from the
    runs table's small columns only)."""
    rows = delta_arrow.dataset(store.delta_table(RUNS)).to_table(columns=["run_id", "committed_at", "versions"])
    rows = sorted(
        rows.cast(
            pa.schema([("run_id", pa.int64()), ("committed_at", pa.int64()), ("versions", pa.string())])
        ).to_pylist(),
        key=lambda row: row["run_id"],
    )
    horizon_us = time.time_ns() // 1000 - retention_hours * 3_600_000_000
    kept = [row for row in rows[-runs_table.KEEP_RUNS_AT_MOST :] if row["committed_at"] >= horizon_us] or rows[-1:]
    oldest: dict[str, int] = {}
    for row in kept:
        for name, version in json.loads(row["versions"]).items():
            if version is not None:
                oldest[name] = min(version, oldest.get(name, version))
    return Kept(min(row["committed_at"] for row in kept), oldest, len(kept) == 1)


def maintain(store: Store, retention_hours: int = DEFAULT_RETENTION_HOURS) -> None:
    """Keep the store as quick to open and commit to after thousands of runs as after ten: compact
    the runs table, vacuum every table, checkpoint every Delta log, and remove the log entries no
    kept run (`kept_runs`) reads. Run under the lock, after a commit.

    The vacuum removes the data files no kept run reads (all but the latest's with a retention of
    0). A Delta table's commits cost more as its log grows (delta-rs lists it: 80 ms a commit with
    5,000 entries against 17 ms after a checkpoint and a clean-up), so a log keeps its entries
    from the last checkpoint at or before the oldest version a kept run names, and no more.
    Earlier runs can no longer be read (`mpg sql --run`) nor rolled back to; the latest always can.
    """
    if is_remote(store.root):
        return  # without the local lock another run may be writing: maintain gs:// with a job of its own
    kept = kept_runs(store, retention_hours)
    runs = store.delta_table(RUNS)
    if len(runs.file_uris()) > COMPACT_ABOVE_FILES:
        runs.optimize.compact(writer_properties=WriterProperties(max_row_group_size=RUNS_ROW_GROUP))
    for name, relative in [*table_paths().items(), (RUNS, RUNS)]:
        table = store.delta_table(relative)
        if table is None:
            continue
        # A vacuum that removes files commits (VACUUM START, END): not a run's change (delta_log.vacuumed_only).
        table.vacuum(retention_hours=kept.vacuum_hours, dry_run=False, enforce_retention_duration=False)
        log = Path(store.path(relative), "_delta_log")
        oldest = _committed_since(log, kept.since_us) if name == RUNS else kept.versions.get(name)
        _clean_log(store.path(relative), table.version() if oldest is None else oldest)
        if table.version() - max(log_versions(log, ".checkpoint.parquet"), default=-1) >= CHECKPOINT_EVERY:
            table.create_checkpoint()  # so that opening the latest version replays few commits


def _committed_since(log: Path, since_us: int) -> int:
    """The oldest commit of a Delta log after which every commit was written at or after `since_us`
    (its latest, if none was)."""
    commits = sorted(log_versions(log, ".json"), reverse=True)
    oldest = commits[0]
    for version in commits:
        if (log / f"{version:020d}.json").stat().st_mtime < since_us / 1_000_000:
            break
        oldest = version
    return oldest


def _clean_log(table_path: str, oldest: int) -> None:
    """Remove the entries of a Delta log that no version from `oldest` on needs: everything before the
    latest checkpoint at or before it (what delta-rs' cleanup_metadata does, by version rather than
    age), checkpointing `oldest` itself when that checkpoint is missing or CHECKPOINT_EVERY behind."""
    log = Path(table_path, "_delta_log")
    start = max((v for v in log_versions(log, ".checkpoint.parquet") if v <= oldest), default=None)
    if start is None or oldest - start >= CHECKPOINT_EVERY:
        DeltaTable(table_path, version=oldest).create_checkpoint()
        start = oldest
    for name in os.listdir(log):
        if name[:20].isdigit() and int(name[:20]) < start:
            (log / name).unlink(missing_ok=True)
