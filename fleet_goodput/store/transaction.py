"""One run's writes to the output store: staged, committed table by table, then made visible by the run's
`runs` row (delta_store.py says why a killed run leaves no trace).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake import Transaction as DeltaTransaction
from deltalake.exceptions import CommitFailedError

from fleet_goodput.store import maintenance
from fleet_goodput.store.errors import StoreBusy
from fleet_goodput.store.killed_runs import undo_killed_run
from fleet_goodput.store.layout import LOCK_FILE, RUNS, delta_schema, is_remote, table_paths
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.staging import staged_files
from fleet_goodput.store.tables import Table

if TYPE_CHECKING:
    from fleet_goodput.store.delta_store import Store


class Transaction:
    """One run's writes: staged, then committed table by table, then made visible by its `runs` row."""

    def __init__(self, store: Store, previous: RunRecord | None, token: str):
        self.store = store
        self.previous = previous
        self.token = token
        self.versions = dict(previous.versions) if previous else {}

    @property
    def staging(self) -> str:
        return self.store.staging_folder(self.token)

    def write(self, name: str, data, schema: pa.Schema, mode: str = "append", partition_by=None) -> None:
        """Append (or overwrite) table `name` with `data` (an Arrow table or reader); a table no
        run wrote yet is created, with `schema`, even with nothing to add."""
        relative = table_paths()[name]
        exists = self.versions.get(name) is not None
        if isinstance(data, pa.Table) and data.num_rows == 0 and mode == "append" and exists:
            return  # nothing to add
        if not exists:
            mode = "overwrite"  # replaces whatever a killed first run left
        # A column added since the table was made (state/files' modified_us) joins it on append.
        write_deltalake(
            self._table(relative) if exists else self.store.path(relative),
            data,
            mode=mode,
            partition_by=partition_by,
            schema_mode="merge" if mode == "append" else None,
        )
        self.versions[name] = self._table(relative).version()

    def _table(self, relative: str) -> DeltaTable:
        """The latest version of a table this run writes to (the store's open handle under the lock)."""
        return self.store.delta_table(relative)

    def write_staged(
        self, name: str, schema: pa.Schema, mode: str = "append", partition_by=None, folders: list[str] | None = None
    ) -> None:
        """Commit the Parquet files a pipeline staged for `name` (in this run's staging, or in `folders`)."""
        files = self._staged(name, folders)
        import pyarrow.dataset as ds  # here: it imports pandas, which readers of the store need not

        data = (
            ds.dataset(files, schema=schema, format="parquet").scanner().to_reader() if files else schema.empty_table()
        )
        self.write(name, data, schema, mode=mode, partition_by=partition_by)

    def write_keyed(self, table: Table, folders: list[str] | None = None, rows: pa.Table | None = None) -> None:
        """Commit the rows staged for keyed `table` (or `rows`, with their `date`) so that its latest
        version holds one row per key."""
        from fleet_goodput.store.keyed_tables import commit_keyed  # Arrow's compute kernels: for writers only

        relative = table_paths()[table.name]
        current = self._table(relative) if self.versions.get(table.name) is not None else None
        commit_keyed(
            self.store.path(relative),
            self._staged(table.name, folders) if rows is None else rows,
            table,
            delta_schema(table),
            current=current,
        )
        self.versions[table.name] = self._table(relative).version()

    def _staged(self, name: str, folders: list[str] | None) -> list[str]:
        return [f for folder in (folders or [self.staging]) for f in staged_files(f"{folder}/{name}")]

    def compact(self) -> None:
        """Rewrite the small files of a table that has gathered many (a stream's frequent runs)
        into a few large ones, as part of this run."""
        for name, relative in table_paths().items():
            if self.versions.get(name) is None:
                continue
            table = self._table(relative)
            if len(table.file_uris()) > maintenance.COMPACT_ABOVE_FILES:
                table.optimize.compact()
                self.versions[name] = self._table(relative).version()

    def check_unchanged(self) -> None:
        """StoreBusy if another run committed to the output since this one began."""
        latest = self.store.latest()
        previous_id = self.previous.run_id if self.previous else None
        if (latest.run_id if latest else None) != previous_id:
            raise StoreBusy(
                f"run {latest.run_id} was committed to {self.store.root} while this run worked; "
                f"this run's results were not committed: run it again{self._lock_note()}"
            )

    def commit(self, record: RunRecord, marks: tuple[str, int] | None = None) -> RunRecord:
        """Make the run visible: append its `runs` row. `marks` (application id, sequence number) is
        recorded in the same Delta commit as the writer's progress (Delta's transaction identifiers),
        which `Store.committed_sequence` reads back, so a retried writer knows its commit was made."""
        self.check_unchanged()
        marked = [DeltaTransaction(*marks)] if marks else None
        try:
            # No retry: a runs row another run appended meanwhile at the same version is a lost race, not a conflict
            # Delta may resolve by appending both.
            write_deltalake(
                self.store.delta_table(RUNS) or self.store.path(RUNS),
                record.to_arrow(),
                mode="append",
                commit_properties=CommitProperties(max_commit_retries=0, app_transactions=marked),
            )
        except CommitFailedError:
            raise self.lost_race() from None
        return record

    def lost_race(self) -> StoreBusy:
        """What a run says when another committed to the same tables while it did."""
        return StoreBusy(
            f"another run committed to {self.store.root} while this one did; this run's results were "
            f"not committed: run it again{self._lock_note()}"
        )

    def _lock_note(self) -> str:
        if is_remote(self.store.root):
            return ""
        return (
            f" (runs on one output take turns by a lock on {self.store.path(LOCK_FILE)}, which this file system "
            "did not hold: NFS without flock? Run one at a time)"
        )

    def discard(self) -> None:
        if not is_remote(self.staging):
            shutil.rmtree(self.staging, ignore_errors=True)
            Path(f"{self.staging}.owner").unlink(missing_ok=True)


def begin(store: Store) -> Transaction:
    """Start a run: mark the store as ours, undo what a killed run left in the tables, then stage."""
    store.mark()
    undo_killed_run(store)
    return Transaction(store, store.latest(), uuid.uuid4().hex[:12])
