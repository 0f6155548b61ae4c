"""The output store: Delta Lake tables, committed one run at a time.

    OUTPUT/
      tables/<table>/   Delta tables people read (fleet_goodput/store/tables.py)
      state/keys/       the open keys' saved state (fleet_goodput/core/session.py)
      state/files/      the input files already applied, by content hash
      settings/         the settings the figures were computed with (fleet_goodput/store/stored_settings.py)
      runs/             one row per committed run: what it read, its as-of time,
                        the version of every table it left, its manifest
      goodput.duckdb    DuckDB views over the latest run (fleet_goodput/store/views.py)
      manifest.json     a copy of the latest run's manifest
      .fleet-goodput-store  marks the folder as a store of this project (its format)
      _staging/<run>/   what a run in progress has computed; never read

A run becomes visible in one step: the commit of its row to `runs`. Readers
take the table versions that row names (Delta time travel), so a run killed
before that commit leaves the previous snapshot exactly as it was, whatever it
wrote; the next command that opens the store (a run, or a reader that finds
the output idle) first restores any table a killed run moved. Runs on one
local output are serialised by a lock file; on gs:// a run that finds a newer
run committed under it fails instead of overwriting it.

A run writes only into an empty folder or a store of this project: the
marker file says which (a store made before the marker existed is known by
its `runs` table, and marked by its next run), so `--replace` never deletes
what someone else keeps there. A store damaged by hand or by its disk is
refused with what is wrong (StoreDamaged); `mpg check` (fleet_goodput/store/store_check.py)
finds every damage and repairs what it safely can. The marker and the checks
read the store's files through pyarrow's file systems (store_files.py), so a
store on gs:// has them as a local one does.

Every table exists, with its full schema, from the first run. A keyed
table's latest version holds one row per key (fleet_goodput/store/keyed_tables.py);
`rejected` and `late` are appended to, each event once.

Delta tables work on local disk and gs:// alike (delta-rs); DuckDB, polars,
Spark and BigQuery read them.

This module is the store's front door, `Store`: opening a store (is it
ours? its tables, kept open), reading its runs and their tables, and the lock.
The rest works on a Store, each job in a module of its own: transaction.py
(a run's writes and commit: `begin`), killed_runs.py (undoing a killed run),
maintenance.py (vacuum, checkpoints, log clean-up), staging.py; below the
Store: layout.py (paths and schemas), runs_table.py (`RunRecord`), errors.py,
delta_log.py (a Delta log read by hand).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shlex
import shutil
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from fleet_goodput.quoting import path_of_uri
from fleet_goodput.store import delta_arrow, runs_table
from fleet_goodput.store.delta_log import commit_file
from fleet_goodput.store.errors import NotAStore, StoreBusy, StoreDamaged, StoreError
from fleet_goodput.store.layout import (
    LOCK_FILE,
    MARKER,
    RUN_SCAFFOLDING,
    RUNS,
    SETTINGS,
    STAGING,
    STORE_FORMAT,
    is_remote,
    table_paths,
)
from fleet_goodput.store.runs_table import RUNS_SCHEMA, RunRecord, python_rows, run_wanted
from fleet_goodput.store.store_files import StoreFiles

# What an output's local path cannot hold. The Delta Lake library (delta-rs) makes the path a URL's
# host, which refuses `[`, `]`, `^` and `|` (a panic), reads a backslash as `/` and `%41` as `A`, and
# refuses control characters; DuckDB reads a `?` in a database file's path (goodput.duckdb) as the
# start of its options. Any other character works (tests/runs/test_hostile_paths.py).
_UNSTORABLE = re.compile(r"[\[\]^|\\?\x00-\x1f\x7f]|%[0-9A-Fa-f]{2}")
_UNSTORABLE_REASON = (
    "the Delta Lake library cannot keep a table under a path with [ ] ^ | \\, a control character "
    "or % and two hex digits, and DuckDB reads a ? in a database file's path as its options"
)


class Store:
    def __init__(self, root: str | Path):
        # Delta reports file URIs absolute, so a local root is made absolute too.
        self.root = str(root).rstrip("/") if is_remote(root) else str(Path(root).resolve())
        if not is_remote(root) and (unstorable := sorted(set(_UNSTORABLE.findall(self.root)))):
            raise StoreError(
                f"{self.root} cannot hold the output: its path contains {' '.join(map(repr, unstorable))} "
                f"({_UNSTORABLE_REASON}); choose another output folder"
            )
        self._open: dict[str, DeltaTable] = {}  # each table's latest version, kept open: `delta_table`
        self._commits: dict[str, bytes | None] = {}  # the commit each was read to, when unlocked
        self._locked = False  # this process holds the output's lock

    def __getstate__(self) -> dict:
        # A Store travels pickled with a run's plan (a Flex Template job's commit step): the tables this
        # process has open, its file system and its lock stay with it.
        state = {**self.__dict__, "_open": {}, "_commits": {}, "_locked": False}
        state.pop("store_files", None)
        return state

    @functools.cached_property
    def store_files(self) -> StoreFiles:
        """The files under the root, through one file system for the store's life: on gs:// each
        `StoreFiles` makes a new Cloud Storage client."""
        return StoreFiles(self.root)

    @classmethod
    def of(cls, output: str | Path | Store) -> Store:
        """The store at `output`, or `output` itself when it is one: what a run opened is passed on."""
        return output if isinstance(output, Store) else cls(output)

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def staging_folder(self, token: str) -> str:
        """Where the run that `token` names stages what it computes: never read but by its commit."""
        return self.path(f"{STAGING}/{token}")

    # ---- reading --------------------------------------------------------------
    def delta_table(self, relative: str, version: int | None = None) -> DeltaTable | None:
        """Delta table `relative` at `version` (its latest by default); None if there is none.

        Each table's latest version is opened once and brought up to date at each use (the log read
        on from where it was: 0.25 ms of CPU, where an open costs 4 ms), so a run's checks, writes,
        compaction, views and headline share ten opens, and a stream's runs share them too. While
        this process holds the output's lock only it changes the tables, and what it writes goes
        through these handles or is read on from the log. Without the lock (a reader; a run's views
        and headline; a stream between its runs) another process may also have written a log
        afresh (`--replace`, a repair, the clean-up of old log entries): a kept table is used only
        while the commit it was read to is still the one on disk (`_commit_file`), else opened
        afresh, and so is it as the lock is taken. A handle is used at once, never kept by the
        caller. A gs:// output's tables are opened at each use: no lock holds it."""
        if is_remote(self.root):
            return self._opened(relative, version)
        table = self._open.pop(relative, None)
        if table is not None and not self._locked and not self._same_log(relative, table):
            table = None  # its log was rewritten since: open it afresh
        if table is not None:
            try:
                table.update_incremental()
            except Exception:  # delta-rs: a torn commit after it; opened afresh below, which says so
                table = None
        try:
            if table is None:
                table = self._opened(relative)
        except Exception:  # delta-rs: a torn commit after `version` (a killed run's), which a check names
            if version is None:
                raise
            return self._opened(relative, version)
        if table is None:
            return self._opened(relative, version) if version is not None else None
        self._open[relative] = table
        if not self._locked:
            self._commits[relative] = commit_file(self.path(relative), table.version())
        return table if version is None or version == table.version() else self._opened(relative, version)

    def _same_log(self, relative: str, table: DeltaTable) -> bool:
        """Whether the commit `table` was read to is still the one on disk."""
        read = self._commits.get(relative)
        return read is not None and read == commit_file(self.path(relative), table.version())

    def _opened(self, relative: str, version: int | None = None) -> DeltaTable | None:
        try:
            return DeltaTable(self.path(relative), version=version)
        except TableNotFoundError:
            return None

    def forget_open_tables(self) -> None:
        """Open every table afresh from now on: their logs were changed other than by appending (a
        repair set commits aside, --replace removed the tables)."""
        self._open, self._commits = {}, {}

    def runs(
        self,
        *,
        last: int | None = None,
        from_run: int | None = None,
        until_run: int | None = None,
        committed_since_us: int | None = None,
    ) -> list[RunRecord]:
        """The committed runs, oldest first: every one, or the `last` few, those from run `from_run` (to
        `until_run`), or those committed since `committed_since_us`; StoreDamaged when the record of them
        is torn or gone.

        Only the runs asked for are read whole (their manifests): a store of thousands of runs
        opens as fast as one of ten."""
        try:
            table = self.delta_table(RUNS)
            if table is None:
                self._refuse_lost_runs()
                return []
            parts = delta_arrow.parts(table, RUNS_SCHEMA)
            keys = [python_rows(part(["run_id", "committed_at"])) for part in parts]  # small columns first
            if last is not None:
                ids = sorted(row["run_id"] for rows in keys for row in rows)
                if not ids:
                    return []
                first = ids[-min(last, len(ids))]  # the last-th largest
                from_run = first if from_run is None else max(from_run, first)
            rows = []
            for part, part_keys in zip(parts, keys):
                wanted = [run_wanted(row, from_run, until_run, committed_since_us) for row in part_keys]
                if any(wanted):  # only these runs are read whole
                    rows += [row for row, keep in zip(python_rows(part(None)), wanted) if keep]
        except Exception as error:  # delta-rs: a torn or missing commit of the runs' log
            if isinstance(error, StoreError):
                raise
            raise StoreDamaged(
                f"{self.root}/{RUNS}/_delta_log cannot be read ({_first_line(error)}): the record of the "
                "store's runs is damaged",
                self.root,
            ) from None
        return sorted((RunRecord.from_row(row) for row in rows), key=lambda record: record.run_id)

    def _refuse_lost_runs(self) -> None:
        """A store without a `runs` table whose manifest.json says a run was committed lost it: running
        on would start its history again over tables that hold it."""
        run_id = self._manifest_run()
        if run_id is None:
            return
        raise StoreDamaged(
            f"{self.root}/{RUNS}/ is missing, but manifest.json says run {run_id} was committed: the "
            "record of the store's runs is gone (deleted by hand?)",
            self.root,
        )

    def _manifest_run(self) -> int | None:
        """The run our manifest.json copy names (None: no such file, or not ours)."""
        try:
            manifest = json.loads(self.store_files.read_text("manifest.json"))
            return manifest["run_id"] if "settled_counts" in manifest else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def committed_sequence(self, app_id: str) -> int | None:
        """The last sequence number writer `app_id` recorded with a run it committed (`Transaction.commit`'s
        `marks`), None if it committed none."""
        runs = self.delta_table(RUNS)
        return None if runs is None else runs.transaction_version(app_id)

    def latest(self) -> RunRecord | None:
        runs = self.runs(last=1)
        return runs[-1] if runs else None

    def run(self, run_id: int | None = None) -> RunRecord:
        runs = self.runs(last=1) if run_id is None else self.runs(from_run=run_id, until_run=run_id)
        if runs:
            return runs[-1]
        if run_id is None:
            raise StoreError(
                f"{self.root} holds no committed run: run `mpg run --input DIR --output {shlex.quote(self.root)}` first"
            )
        raise StoreError(f"no run {run_id} in {self.root}; `mpg runs --output {shlex.quote(self.root)}` lists them")

    def snapshot(self, name: str, record: RunRecord | None) -> DeltaTable | None:
        """Table `name` as `record` left it (None: that run had not written it); StoreError for a run
        whose versions are no longer kept."""
        version = record.versions.get(name) if record else None
        if version is None:
            return None
        try:
            table = self.delta_table(table_paths()[name], version)
        except Exception:  # delta-rs: a torn commit, or the version's log entries cleaned up (maintenance.maintain)
            if record.run_id == self.latest().run_id:
                raise  # the latest run is always kept: this is damage, which store_check names
            table = None
        if table is None:  # delta-rs finds no table at a version whose log entries are gone
            raise StoreError(
                f"run {record.run_id} can no longer be read: its version {version} of "
                f"{table_paths()[name]} is gone; a store keeps the runs committed within the retention "
                f"(runs.retention_hours), at most the latest {runs_table.KEEP_RUNS_AT_MOST:,}: "
                f"`mpg runs --output {shlex.quote(self.root)}` lists them"
            )
        return table

    def files(self, name: str, record: RunRecord | None) -> list[str]:
        """The data files of table `name` in `record`'s snapshot, as paths relative to the output."""
        return self.relative_files(self.snapshot(name, record))

    def relative_files(self, table: DeltaTable | None) -> list[str]:
        if table is None:
            return []
        prefix = f"{path_of_uri(self.root)}/"  # a file:// root's files are reported as plain paths
        return sorted(path_of_uri(uri).removeprefix(prefix) for uri in table.file_uris())

    def read(self, name: str, record: RunRecord | None) -> pa.Table | None:
        table = self.snapshot(name, record)
        return None if table is None else delta_arrow.whole(table)

    def applied_files(self, record: RunRecord | None) -> dict[tuple[str, int, int | None], str]:
        """(path, size, modification time) → content hash of every input file applied up to `record`
        (a store older than the modification time has None there, so its files are hashed again)."""
        table = self.read("state_files", record)
        if table is None:
            return {}
        return {(row["path"], row["size"], row.get("modified_us")): row["sha256"] for row in table.to_pylist()}

    # ---- writing ----------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self):
        """Hold the output for one run; a second run fails at once with who holds it."""
        self.refuse_foreign()
        if is_remote(self.root):
            yield  # checked at commit instead: see Transaction.commit
            return
        Path(self.root).mkdir(parents=True, exist_ok=True)
        with open(self.path(LOCK_FILE), "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise StoreBusy(
                    f"{self.root} is in use by another run ({holder}); wait for it to finish "
                    "(runs on one output are serialised)"
                ) from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
            handle.flush()
            # What another process did while this one did not hold the lock is read on from the
            # logs, but a log it wrote afresh is opened afresh.
            self._open = {relative: table for relative, table in self._open.items() if self._same_log(relative, table)}
            self._locked = True
            try:
                yield
            finally:
                self._locked = False  # another run may change the tables: `delta_table` checks their logs at each use
                self._commits = {
                    relative: commit_file(self.path(relative), table.version())
                    for relative, table in self._open.items()
                }
                handle.seek(0)
                handle.truncate()

    def refuse_foreign(self) -> None:
        """NotAStore unless the folder is absent, empty, or a store of this project (StoreError for one
        a newer fleet-goodput wrote): a run must never overwrite, nor --replace delete, someone's files.
        A gs:// store is checked as a local one is (store_files.py)."""
        files = self.store_files
        if files.is_file(""):
            raise NotAStore(
                f"{self.root} is a file, not a folder: give --output a folder (new, empty, or an output "
                "of fleet-goodput)"
            )
        if not files.exists():
            return
        if files.is_file(MARKER):
            try:
                store_format = json.loads(files.read_text(MARKER))["format"]
            except (OSError, ValueError, KeyError, TypeError):
                raise StoreError(
                    f"{self.path(MARKER)} cannot be read: the store's marker is damaged; write "
                    f'{{"format": {STORE_FORMAT}}} into it if {self.root} is a store of fleet-goodput'
                ) from None
            if store_format > STORE_FORMAT:
                raise StoreError(
                    f"{self.root} was written by a newer fleet-goodput (store format {store_format}, this "
                    f"one knows {STORE_FORMAT}): upgrade fleet-goodput to use it"
                )
            return
        foreign = sorted(
            name + ("/" if files.is_dir(name) else "") for name in files.names() if name not in RUN_SCAFFOLDING
        )
        if foreign and not self._made_before_the_marker():
            shown = ", ".join(foreign[:8]) + (f" and {len(foreign) - 8} more" if len(foreign) > 8 else "")
            raise NotAStore(
                f"{self.root} is not empty and is not an output of fleet-goodput (no {MARKER} file, no "
                f"runs table of ours): it holds {shown}. A run writes only into an empty folder or one of "
                "its outputs, and --replace deletes only those: give --output a new or empty folder"
            )

    def _made_before_the_marker(self) -> bool:
        """A store written before stores were marked: it has our `runs` table (or had: our manifest.json)."""
        if self._manifest_run() is not None:
            return True
        try:
            table = self.delta_table(RUNS)
        except Exception:  # a damaged runs log still has our shape of folder: StoreDamaged says more
            return self.store_files.is_dir(f"{RUNS}/_delta_log")
        return table is not None and set(RUNS_SCHEMA.names) <= set(table.schema().to_arrow().names)

    def mark(self) -> None:
        """Mark the folder as a store of this project (the lock is held; refuse_foreign passed)."""
        files = self.store_files
        if files.exists(MARKER):
            return
        files.write_whole(
            MARKER,
            (
                json.dumps({"format": STORE_FORMAT, "store": "fleet-goodput output (docs/tables-and-views.md)"}) + "\n"
            ).encode(),
        )

    def replace(self) -> None:
        """Remove every run, table and saved state (`--replace`; the caller holds the lock, which
        refuses a folder that is not a store). The marker stays: the folder is still a store."""
        if is_remote(self.root):
            raise StoreError("--replace removes a local output only; delete a gs:// output with gcloud storage rm -r")
        for name in ("tables", "state", SETTINGS, RUNS, STAGING, "goodput.duckdb", "manifest.json", "_run"):
            target = Path(self.root, name)
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        self.forget_open_tables()


def _first_line(error: BaseException) -> str:
    """The first line of a library's error, without the backtrace delta-rs appends."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
