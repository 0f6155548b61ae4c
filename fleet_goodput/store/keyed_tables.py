"""Keyed tables hold one row per key: the latest figures, and nothing else.

`job_window`, `jobs` and `capacity_level` have a key (fleet_goodput/store/tables.py).
A run stages new versions of the rows it changed, possibly several of one key
(a backfill's chunks each stage what changed in theirs). Committing them
replaces, in one Delta commit, every date partition the staged rows touch:
the partition's current rows and the staged ones together, the latest
`version` of each key kept. So the table's latest version is exactly the
current rows, which any reader (polars, pandas, Spark, DuckDB) can sum
as it is, and what a row was before lives in the table's earlier Delta
versions (the `runs` table names the version each run left).

Replacing partitions was measured against a Delta MERGE on the key for the
same runs (benchmarks/bench_commit.py, docs/performance.md, "Decisions that rest on a measurement").

Tables written before this rule held every version of a row. A table
carries the property ONE_ROW_PER_KEY (its key's columns) from the commit
that made it hold one row per key; the first run that finds a table
without it rewrites every partition, and readers of an earlier snapshot
still keep the latest version per key themselves (fleet_goodput/store/views.py).
"""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, Field, write_deltalake

from fleet_goodput.quoting import sql_string
from fleet_goodput.store import delta_arrow
from fleet_goodput.store.tables import Table

ONE_ROW_PER_KEY = "fleet_goodput.one_row_per_key"


def holds_one_row_per_key(table: DeltaTable) -> bool:
    """Whether this version of a Delta table was written under the one-row-per-key rule."""
    return ONE_ROW_PER_KEY in table.metadata().configuration


def latest_per_key(rows: pa.Table, table: Table) -> pa.Table:
    """The latest `version` of each key of `rows`, in the table's sort order."""
    import pyarrow.compute as pc  # here, not at import: every reader of the store imports this module (30 ms)

    ordered = rows.sort_by([(name, "ascending") for name in table.key] + [("version", "descending")])
    count = ordered.num_rows
    if count > 1:
        changed = None  # row i starts a new key when any key column differs from row i - 1
        for name in table.key:
            column = ordered.column(name)
            differs = pc.fill_null(pc.not_equal(column.slice(1), column.slice(0, count - 1)), True)
            changed = differs if changed is None else pc.or_(changed, differs)
        ordered = ordered.filter(pa.concat_arrays([pa.array([True]), changed.combine_chunks()]))
    return ordered.sort_by([(name, "ascending") for name in table.sort_by])


def _with_new_columns(table: DeltaTable, schema: pa.Schema) -> pa.Schema:
    """`schema` in the Delta table's column order, after adding to the table the columns its
    definition gained since the store was made (jobs.queue): they come last, null in the rows
    written before."""
    held = [field.name for field in table.schema().fields]
    new = [field for field in schema if field.name not in held]
    if new:
        table.alter.add_columns([Field.from_arrow(field) for field in new])
        table.update_incremental()  # read the version that has them
    return pa.schema([schema.field(name) for name in held] + new)


def commit_keyed(
    path: str, staged_files: list[str] | pa.Table, table: Table, schema: pa.Schema, current: DeltaTable | None
) -> None:
    """Commit staged rows of keyed `table` (Delta table at `path`, stored with `schema`) in one commit
    that replaces the partitions they touch: the Parquet files a pipeline staged, or the rows themselves
    (a stream's commit, fleet_goodput/store/stream_commit.py). `current` is the table's latest version, open
    (the run has it: brought up to date by the commit); without it the table is created, empty if nothing
    is staged."""
    import pyarrow.dataset as ds  # here: it imports pandas, which readers of the store need not
    import pyarrow.compute as pc

    if current is not None:
        schema = _with_new_columns(current, schema)
    if isinstance(staged_files, pa.Table):
        staged = ds.dataset(staged_files.select(schema.names).cast(schema))
    else:
        staged = ds.dataset(staged_files, schema=schema, format="parquet")
    days = set(pc.unique(staged.to_table(columns=["date"]).column("date")).to_pylist())
    one_row_per_key = current is not None and holds_one_row_per_key(current)
    if current is not None and not one_row_per_key:
        days |= set(_days(current))  # written under the old rule: every partition may hold older versions
    if current is not None and not days:
        return
    current_rows = delta_arrow.dataset(current) if current is not None else None

    def partitions():
        for day in sorted(days):
            rows = staged.to_table(filter=pc.field("date") == day)
            if current_rows is not None:
                rows = pa.concat_tables([current_rows.to_table(filter=pc.field("date") == day).cast(schema), rows])
            yield from latest_per_key(rows, table).to_batches()

    reader = pa.RecordBatchReader.from_batches(schema, partitions())
    if current is None:
        write_deltalake(path, reader, mode="overwrite", partition_by=["date"])
    else:
        listed = ", ".join(sql_string(day) for day in sorted(days))
        write_deltalake(current, reader, mode="overwrite", predicate=f"date in ({listed})")
    if not one_row_per_key:
        # A property of our own: delta-rs checks only the ones it knows when told not to raise.
        (current or DeltaTable(path)).alter.set_table_properties(
            {ONE_ROW_PER_KEY: ",".join(table.key)}, raise_if_not_exists=False
        )


def _days(table: DeltaTable) -> list[str]:
    return [values["date"] for values in table.partitions()]
