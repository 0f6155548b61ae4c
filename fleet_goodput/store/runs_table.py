"""The `runs` table: one row per committed run, and RunRecord, a run as the code reads it.

Store.runs (delta_store.py) reads the table; Transaction.commit (transaction.py) appends to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa

# Runs that can be read and rolled back to: those within the retention (runs.retention_hours), and
# at most this many, so that a stream committing every few seconds keeps its Delta logs short (maintenance.maintain).
KEEP_RUNS_AT_MOST = 1000
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


def python_rows(rows: pa.Table) -> list[dict]:
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


def run_wanted(row: dict, from_run: int | None, until_run: int | None, committed_since_us: int | None) -> bool:
    """Whether the run of `row` (its run_id and committed_at) is asked for: all are, given no bound."""
    return (
        (from_run is None or row["run_id"] >= from_run)
        and (until_run is None or row["run_id"] <= until_run)
        and (
            committed_since_us is None
            or (row["committed_at"] is not None and row["committed_at"] >= committed_since_us)
        )
    )
