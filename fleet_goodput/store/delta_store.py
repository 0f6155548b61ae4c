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
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, WriterProperties, write_deltalake
from deltalake import Transaction as DeltaTransaction
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from fleet_goodput.quoting import literal_pattern, path_of_uri
from fleet_goodput.store import delta_arrow
from fleet_goodput.store.store_files import StoreFiles
from fleet_goodput.store.tables import TABLES, Table

STATE_KEYS = "state/keys"
STATE_FILES = "state/files"
SETTINGS = "settings"
RUNS = "runs"
STAGING = "_staging"
LOCK_FILE = ".lock"
MARKER = ".fleet-goodput-store"
STORE_FORMAT = 1  # the layout above; a marker with a later one was written by a newer fleet-goodput
# What a run leaves in a folder even before its first commit (a killed first run).
RUN_SCAFFOLDING = (LOCK_FILE, STAGING, MARKER, f"{MARKER}.tmp")
DEFAULT_RETENTION_HOURS = 7 * 24

STATE_KEYS_SCHEMA = pa.schema([("key", pa.string()), ("blob", pa.binary())])
STATE_FILES_SCHEMA = pa.schema(
    [
        ("sha256", pa.string()),
        ("path", pa.string()),
        ("stream", pa.string()),
        ("size", pa.int64()),
        ("run_id", pa.int64()),
        ("modified_us", pa.int64()),
    ]
)
# A table with more data files than this in a run's snapshot is compacted by that run.
COMPACT_ABOVE_FILES = 64
# Runs that can be read and rolled back to: those within the retention (runs.retention_hours), and
# at most this many, so that a stream committing every few seconds keeps its Delta logs short (Store.maintain).
KEEP_RUNS_AT_MOST = 1000
CHECKPOINT_EVERY = 100  # a Delta log gets a checkpoint at least this often (delta-rs' own default interval)
RUNS_ROW_GROUP = 64  # rows of the compacted runs table read together
RUNS_SCHEMA = pa.schema(
    [
        ("run_id", pa.int64()),
        ("committed_at", pa.timestamp("us", tz="UTC")),
        ("mode", pa.string()),
        ("input", pa.string()),
        ("as_of", pa.timestamp("us", tz="UTC")),
        ("frontier", pa.timestamp("us", tz="UTC")),
        ("files_applied", pa.int64()),
        ("files_skipped", pa.int64()),
        ("state_format", pa.int64()),
        ("versions", pa.string()),
        ("manifest", pa.string()),
    ]
)


class StoreError(RuntimeError):
    """The output cannot be used as asked (busy, older as-of, foreign state…)."""


class StoreBusy(StoreError):
    """Another run holds the output, or committed to it meanwhile: the same run later is right."""


class NotAStore(StoreError):
    """The output folder holds files this project did not write: a run would overwrite or delete them."""


class StoreDamaged(StoreError):
    """Part of the store is missing or unreadable: `problem` names it, and the message the way back."""

    def __init__(self, problem: str, root: str):
        hint = f"nothing was changed; `mpg check --output {root}` says what is damaged and how to recover"
        separator = "" if problem.endswith("\n") else "; "  # a list of problems ends its own line
        super().__init__(f"{problem}{separator}{hint}")
        self.problem = problem


def is_remote(path: str | Path) -> bool:
    return "://" in str(path)


def table_paths() -> dict[str, str]:
    """Every Delta table of a run, by name → its path under the output."""
    paths = {name: f"tables/{name}" for name in TABLES}
    paths.update({"state_keys": STATE_KEYS, "state_files": STATE_FILES, SETTINGS: SETTINGS})
    return paths


def delta_schema(table: Table) -> pa.Schema:
    """A people-facing table as stored: its columns plus the `date` partition."""
    return table.schema.append(pa.field("date", pa.string()))


@dataclass(frozen=True)
class RunRecord:
    run_id: int
    committed_at_us: int
    mode: str
    input: str
    as_of_us: int | None
    frontier_us: int | None
    files_applied: int
    files_skipped: int
    state_format: int
    versions: dict = field(default_factory=dict)  # table name -> Delta version (None: never written)
    manifest: dict = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict) -> RunRecord:
        return cls(
            row["run_id"],
            row["committed_at"],
            row["mode"],
            row["input"],
            row["as_of"],
            row["frontier"],
            row["files_applied"],
            row["files_skipped"],
            row["state_format"],
            json.loads(row["versions"]),
            json.loads(row["manifest"]),
        )

    def to_arrow(self) -> pa.Table:
        row = {
            **vars(self),
            "committed_at": self.committed_at_us,
            "as_of": self.as_of_us,
            "frontier": self.frontier_us,
            "versions": json.dumps(self.versions, sort_keys=True),
            "manifest": json.dumps(self.manifest),
        }
        return pa.Table.from_pylist([{name: row[name] for name in RUNS_SCHEMA.names}], schema=RUNS_SCHEMA)


# What an output's local path cannot hold. The Delta Lake library (delta-rs) makes the path a URL's
# host, which refuses `[`, `]`, `^` and `|` (a panic), reads a backslash as `/` and `%41` as `A`, and
# refuses control characters; DuckDB reads a `?` in a database file's path (goodput.duckdb) as the
# start of its options. Any other character works (tests/runs/test_hostile_paths.py).
_UNSTORABLE = re.compile(r"[\[\]^|\\?\x00-\x1f\x7f]|%[0-9A-Fa-f]{2}")
_UNSTORABLE_REASON = (
    "the Delta Lake library cannot keep a table under a path with [ ] ^ | \\, a control character "
    "or % and two hex digits, and DuckDB reads a ? in a database file's path as its options"
)


@dataclass(frozen=True)
class Kept:
    """The runs that can still be read and rolled back to (Store.kept): committed since `since_us`;
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


class Store:
    def __init__(self, root: str | Path):
        # Delta reports file URIs absolute, so a local root is made absolute too.
        self.root = str(root).rstrip("/") if is_remote(root) else str(Path(root).resolve())
        if not is_remote(root) and (unstorable := sorted(set(_UNSTORABLE.findall(self.root)))):
            raise StoreError(
                f"{self.root} cannot hold the output: its path contains {' '.join(map(repr, unstorable))} "
                f"({_UNSTORABLE_REASON}); choose another output folder"
            )
        self._open: dict[str, DeltaTable] = {}  # each table's latest version, kept open: `_delta`
        self._commits: dict[str, bytes | None] = {}  # the commit each was read to, when unlocked
        self._locked = False  # this process holds the output's lock

    def __getstate__(self) -> dict:
        # A Store travels pickled with a run's plan (a Flex Template job's commit step): the tables this
        # process has open, and its lock, stay with it.
        return {**self.__dict__, "_open": {}, "_commits": {}, "_locked": False}

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
    def _delta(self, relative: str, version: int | None = None) -> DeltaTable | None:
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
            self._commits[relative] = _commit_file(self.path(relative), table.version())
        return table if version is None or version == table.version() else self._opened(relative, version)

    def _same_log(self, relative: str, table: DeltaTable) -> bool:
        """Whether the commit `table` was read to is still the one on disk."""
        read = self._commits.get(relative)
        return read is not None and read == _commit_file(self.path(relative), table.version())

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
            table = self._delta(RUNS)
            if table is None:
                self._refuse_lost_runs()
                return []
            parts = delta_arrow.parts(table, RUNS_SCHEMA)
            keys = [_python_rows(part(["run_id", "committed_at"])) for part in parts]  # small columns first
            if last is not None:
                ids = sorted(row["run_id"] for rows in keys for row in rows)
                if not ids:
                    return []
                first = ids[-min(last, len(ids))]  # the last-th largest
                from_run = first if from_run is None else max(from_run, first)
            rows = []
            for part, part_keys in zip(parts, keys):
                wanted = [_run_wanted(row, from_run, until_run, committed_since_us) for row in part_keys]
                if any(wanted):  # only these runs are read whole
                    rows += [row for row, keep in zip(_python_rows(part(None)), wanted) if keep]
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
            manifest = json.loads(StoreFiles(self.root).read_text("manifest.json"))
            return manifest["run_id"] if "settled_counts" in manifest else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def committed_sequence(self, app_id: str) -> int | None:
        """The last sequence number writer `app_id` recorded with a run it committed (`Transaction.commit`'s
        `marks`), None if it committed none."""
        runs = self._delta(RUNS)
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
            table = self._delta(table_paths()[name], version)
        except Exception:  # delta-rs: a torn commit, or the version's log entries cleaned up (Store.maintain)
            if record.run_id == self.latest().run_id:
                raise  # the latest run is always kept: this is damage, which store_check names
            table = None
        if table is None:  # delta-rs finds no table at a version whose log entries are gone
            raise StoreError(
                f"run {record.run_id} can no longer be read: its version {version} of "
                f"{table_paths()[name]} is gone; a store keeps the runs committed within the retention "
                f"(runs.retention_hours), at most the latest {KEEP_RUNS_AT_MOST:,}: "
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
                self._locked = False  # another run may change the tables: `_delta` checks their logs at each use
                self._commits = {
                    relative: _commit_file(self.path(relative), table.version())
                    for relative, table in self._open.items()
                }
                handle.seek(0)
                handle.truncate()

    def refuse_foreign(self) -> None:
        """NotAStore unless the folder is absent, empty, or a store of this project (StoreError for one
        a newer fleet-goodput wrote): a run must never overwrite, nor --replace delete, someone's files.
        A gs:// store is checked as a local one is (store_files.py)."""
        files = StoreFiles(self.root)
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
            table = self._delta(RUNS)
        except Exception:  # a damaged runs log still has our shape of folder: StoreDamaged says more
            return StoreFiles(self.root).is_dir(f"{RUNS}/_delta_log")
        return table is not None and set(RUNS_SCHEMA.names) <= set(table.schema().to_arrow().names)

    def _mark(self) -> None:
        """Mark the folder as a store of this project (the lock is held; refuse_foreign passed)."""
        files = StoreFiles(self.root)
        if files.exists(MARKER):
            return
        files.write_whole(
            MARKER,
            (
                json.dumps({"format": STORE_FORMAT, "store": "fleet-goodput output (docs/tables-and-views.md)"}) + "\n"
            ).encode(),
        )

    def begin(self) -> Transaction:
        """Start a run: mark the store as ours, undo what a killed run left in the tables, then stage."""
        self._mark()
        self.undo_killed_run()
        return Transaction(self, self.latest(), uuid.uuid4().hex[:12])

    def undo_killed_run(self) -> None:
        """Put every table a killed run moved back as the latest committed run left it (a table no
        committed run wrote is emptied). The caller holds the lock."""
        latest = self.latest()
        for name, relative in table_paths().items():
            recorded = latest.versions.get(name) if latest else None
            table = self._delta(relative)
            if table is None or table.version() == recorded or (recorded is None and not table.file_uris()):
                continue
            if recorded is not None and _vacuumed_only(StoreFiles(self.root), f"{relative}/_delta_log", recorded):
                continue
            if recorded is None:
                write_deltalake(table, pa.schema(table.schema().to_arrow()).empty_table(), mode="overwrite")
            else:
                table.restore(recorded)

    def undo_killed_run_if_idle(self, latest: RunRecord | None = None) -> None:
        """For readers: if a killed run left tables ahead of the latest committed run and no run
        holds the output, undo it now, so that readers of the Delta tables themselves (polars,
        Spark…) see the committed run again. `mpg sql` and the views read the committed versions
        whatever the tables' latest ones are; a run in progress is left alone. `latest`: the
        latest committed run where the caller has read it (else it is read here)."""
        if is_remote(self.root) or not self._moved_by_a_killed_run(latest or self.latest()):
            return
        try:
            with self.lock():
                self.undo_killed_run()
        except StoreError:
            return  # a run holds the output: its tables are ahead until it commits (or is killed and undone)
        except OSError as error:  # a read-only copy of the output, say
            warnings.warn(
                f"{self.root}: a killed run left tables ahead of the last committed run, and they could not "
                f"be restored ({error}); readers of the Delta tables themselves see that run's rows until "
                "the next `mpg run` on this output",
                stacklevel=2,
            )

    def _moved_by_a_killed_run(self, latest: RunRecord | None) -> bool:
        """Whether some table's latest Delta version (from its log's file names) differs from what
        `latest`, the latest committed run, recorded."""
        for name, relative in table_paths().items():
            commits = [int(p.stem) for p in Path(self.path(relative), "_delta_log").glob("*.json") if p.stem.isdigit()]
            recorded = latest.versions.get(name) if latest else None
            if not commits or max(commits) == recorded:
                continue
            if recorded is None and self._delta(relative).file_uris():
                return True
            if recorded is not None and not _vacuumed_only(StoreFiles(self.root), f"{relative}/_delta_log", recorded):
                return True
        return False

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

    def kept(self, retention_hours: int = DEFAULT_RETENTION_HOURS) -> Kept:
        """What the runs that can still be read and rolled back to need: those committed within
        `retention_hours`, at most the latest KEEP_RUNS_AT_MOST, and always the latest (read from the
        runs table's small columns only)."""
        rows = delta_arrow.dataset(self._delta(RUNS)).to_table(columns=["run_id", "committed_at", "versions"])
        rows = sorted(
            rows.cast(
                pa.schema([("run_id", pa.int64()), ("committed_at", pa.int64()), ("versions", pa.string())])
            ).to_pylist(),
            key=lambda row: row["run_id"],
        )
        horizon_us = time.time_ns() // 1000 - retention_hours * 3_600_000_000
        kept = [row for row in rows[-KEEP_RUNS_AT_MOST:] if row["committed_at"] >= horizon_us] or rows[-1:]
        oldest: dict[str, int] = {}
        for row in kept:
            for name, version in json.loads(row["versions"]).items():
                if version is not None:
                    oldest[name] = min(version, oldest.get(name, version))
        return Kept(min(row["committed_at"] for row in kept), oldest, len(kept) == 1)

    def maintain(self, retention_hours: int = DEFAULT_RETENTION_HOURS) -> None:
        """Keep the store as quick to open and commit to after thousands of runs as after ten: compact
        the runs table, vacuum every table, checkpoint every Delta log, and remove the log entries no
        kept run (`kept`) reads. Run under the lock, after a commit.

        The vacuum removes the data files no kept run reads (all but the latest's with a retention of
        0). A Delta table's commits cost more as its log grows (delta-rs lists it: 80 ms a commit with
        5,000 entries against 17 ms after a checkpoint and a clean-up), so a log keeps its entries
        from the last checkpoint at or before the oldest version a kept run names, and no more.
        Earlier runs can no longer be read (`mpg sql --run`) nor rolled back to; the latest always can.
        """
        if is_remote(self.root):
            return  # without the local lock another run may be writing: maintain gs:// with a job of its own
        kept = self.kept(retention_hours)
        runs = self._delta(RUNS)
        if len(runs.file_uris()) > COMPACT_ABOVE_FILES:
            runs.optimize.compact(writer_properties=WriterProperties(max_row_group_size=RUNS_ROW_GROUP))
        for name, relative in [*table_paths().items(), (RUNS, RUNS)]:
            table = self._delta(relative)
            if table is None:
                continue
            # A vacuum that removes files commits (VACUUM START, END): not a run's change (_vacuumed_only).
            table.vacuum(retention_hours=kept.vacuum_hours, dry_run=False, enforce_retention_duration=False)
            log = Path(self.path(relative), "_delta_log")
            oldest = _committed_since(log, kept.since_us) if name == RUNS else kept.versions.get(name)
            _clean_log(self.path(relative), table.version() if oldest is None else oldest)
            if table.version() - max(_log_versions(log, ".checkpoint.parquet"), default=-1) >= CHECKPOINT_EVERY:
                table.create_checkpoint()  # so that opening the latest version replays few commits


def _python_rows(rows: pa.Table) -> list[dict]:
    """`rows` as Python dicts, timestamps as integer microseconds, exactly (no float seconds on the way).
    Compared in Python, not with Arrow's kernels: a Python value given to Arrow imports pandas (pyarrow's
    shim), a third of a CPU second that `mpg runs` and `mpg sql` have no other use for; and a timestamp is
    viewed as its integer, not cast (a cast imports `pyarrow.compute`, 30 ms of their start)."""
    columns = [
        pa.chunked_array([chunk.view(pa.int64()) for chunk in column.chunks], pa.int64())
        if pa.types.is_timestamp(column.type)
        else column
        for column in rows.columns
    ]
    return pa.Table.from_arrays(columns, names=rows.column_names).to_pylist()


def _run_wanted(row: dict, from_run: int | None, until_run: int | None, committed_since_us: int | None) -> bool:
    """Whether the run of `row` (its run_id and committed_at) is asked for: all are, given no bound."""
    return (
        (from_run is None or row["run_id"] >= from_run)
        and (until_run is None or row["run_id"] <= until_run)
        and (
            committed_since_us is None
            or (row["committed_at"] is not None and row["committed_at"] >= committed_since_us)
        )
    )


def _commit_file(table_path: str, version: int) -> bytes | None:
    """A digest of the commit of `version` of the table at `table_path` (None: there is none): a log
    rewritten since (--replace, a repair) has another commit there, or none. Its content, not its
    inode and time, which a file made again at once may share; a commit names the files it adds,
    each by a fresh uuid, and its own time."""
    try:
        commit = Path(f"{table_path}/_delta_log/{version:020d}.json").read_bytes()
    except OSError:
        return None
    return hashlib.blake2b(commit, digest_size=16).digest()


def _first_line(error: BaseException) -> str:
    """The first line of a library's error, without the backtrace delta-rs appends."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


_VACUUM = ("VACUUM START", "VACUUM END")


def _vacuumed_only(files: StoreFiles, log: str, recorded: int) -> bool:
    """Whether every commit of the Delta log `log` (of the store's `files`) after version `recorded` is a
    vacuum's (Store.maintain), which changes no row: the table still holds what the run that recorded it
    committed."""
    for version in sorted(v for v in versions_in(files.names(log), ".json") if v > recorded):
        try:
            lines = files.read_text(f"{log}/{version:020d}.json").splitlines()
            actions = [json.loads(line) for line in lines if line]
        except (OSError, ValueError):
            return False  # torn: store_check says so
        if any("commitInfo" not in action and "remove" not in action for action in actions) or not any(
            action.get("commitInfo", {}).get("operation") in _VACUUM for action in actions
        ):
            return False
    return True


def versions_in(names: list[str], suffix: str) -> list[int]:
    """The versions of a Delta log's file `names` that end with `suffix` (`.json`: commits; `.checkpoint.parquet`)."""
    return [int(name[:20]) for name in names if name.endswith(suffix) and name[:20].isdigit()]


def _log_versions(log: Path, suffix: str) -> list[int]:
    """The versions of a local Delta log's files that end with `suffix`."""
    return versions_in(os.listdir(log), suffix)


def _committed_since(log: Path, since_us: int) -> int:
    """The oldest commit of a Delta log after which every commit was written at or after `since_us`
    (its latest, if none was)."""
    commits = sorted(_log_versions(log, ".json"), reverse=True)
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
    start = max((v for v in _log_versions(log, ".checkpoint.parquet") if v <= oldest), default=None)
    if start is None or oldest - start >= CHECKPOINT_EVERY:
        DeltaTable(table_path, version=oldest).create_checkpoint()
        start = oldest
    for name in os.listdir(log):
        if name[:20].isdigit() and int(name[:20]) < start:
            (log / name).unlink(missing_ok=True)


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
        return self.store._delta(relative)

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
        return [f for folder in (folders or [self.staging]) for f in _staged_files(f"{folder}/{name}")]

    def compact(self) -> None:
        """Rewrite the small files of a table that has gathered many (a stream's frequent runs)
        into a few large ones, as part of this run."""
        for name, relative in table_paths().items():
            if self.versions.get(name) is None:
                continue
            table = self._table(relative)
            if len(table.file_uris()) > COMPACT_ABOVE_FILES:
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
                self.store._delta(RUNS) or self.store.path(RUNS),
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


def _staged_files(folder: str) -> list[str]:
    if is_remote(folder):
        from apache_beam.io.filesystems import FileSystems

        return sorted(m.path for m in FileSystems.match([f"{literal_pattern(folder)}/**.parquet"])[0].metadata_list)
    return sorted(str(p) for p in Path(folder).rglob("*.parquet"))


# A staging folder of a run on another machine is taken for a killed run's after this long.
FOREIGN_STAGING_STALE_S = 24 * 3600


def claim_staging(root: str | Path, token: str) -> None:
    """Record which process stages into `_staging/<token>`, beside it, so that another run whose
    lock did not lock (a file system without flock) does not take it for a killed run's."""
    if is_remote(root):
        return
    owner = Path(root, STAGING, f"{token}.owner")
    owner.parent.mkdir(parents=True, exist_ok=True)
    owner.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))


def clear_staging(root: str | Path) -> None:
    """Remove what killed runs staged (local outputs; the lock is held): every staging folder but
    one whose owner runs still, here, or on another machine and staged within the last day."""
    staging = Path(root, STAGING)
    if is_remote(root) or not staging.is_dir():
        return
    for path in staging.iterdir():
        token = path.name.removesuffix(".owner")
        if not _staged_by_a_live_run(staging / f"{token}.owner"):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _staged_by_a_live_run(owner: Path) -> bool:
    try:
        claimed = json.loads(owner.read_text())
        host, pid = claimed["host"], int(claimed["pid"])
        if host != socket.gethostname():
            return time.time() - owner.stat().st_mtime < FOREIGN_STAGING_STALE_S
    except (OSError, ValueError, KeyError, TypeError):  # no owner: a killed run's, or an older version's
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except PermissionError:
        return True  # it does, another user's
    except OSError:
        return False
    return pid != os.getpid()
