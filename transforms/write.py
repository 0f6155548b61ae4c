"""Writing results: staged Parquet for the store to commit.

Batch (`StageTables`, `StageRows`): a run writes what it computed as Parquet
files under its own staging folder (OUTPUT/_staging/<run>/<table>/); nothing
there is read by anyone until the run commits the files to the Delta tables
(fleet_goodput/store/delta_store.py), so a run killed while writing leaves no trace in
what readers see. Rows are grouped by UTC day where they are computed, one
file per day and bundle, each with the `date` partition column. (Beam's
`fileio.WriteToFiles` with `date=…/` destinations was measured to write
nothing on the local filesystem while reporting success, hence pyarrow inside
a DoFn.)

A streaming pipeline stages nothing: it commits its panes to the store
itself (transforms/commit.py).
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import apache_beam as beam
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from fleet_goodput.store.tables import Table, utc_day


def _filesystem(output_dir: str) -> tuple[pafs.FileSystem, str]:
    if "://" in output_dir:
        return pafs.FileSystem.from_uri(output_dir)
    return pafs.LocalFileSystem(), output_dir


def write_staged_day(table: Table, folder: str, day: str, rows: list[dict]) -> str:
    """Write one day of `table`'s rows, with their `date`, as one new file in `folder`; returns its path."""
    filesystem, root = _filesystem(folder)
    data = table.to_arrow(rows)
    data = data.append_column("date", pa.array([day] * data.num_rows, pa.string()))
    filesystem.create_dir(root, recursive=True)
    path = f"{root.rstrip('/')}/{day}-{uuid.uuid4().hex}.parquet"
    pq.write_table(data, path, filesystem=filesystem)
    return path


class _StageTableDaysFn(beam.DoFn):
    """Buffers a bundle's rows of one table by UTC day and writes each day as one staged file, or
    more: a day's rows leave as a file whenever `FLUSH_ROWS` of them wait, which bounds memory."""

    FLUSH_ROWS = 100_000

    def __init__(self, table: Table, folder: str):
        self.table = table
        self.folder = folder

    def start_bundle(self):
        self.rows = defaultdict(list)

    def process(self, row):
        day = utc_day(row[self.table.date_from])
        waiting = self.rows[day]
        waiting.append(row)
        if len(waiting) >= self.FLUSH_ROWS:
            yield write_staged_day(self.table, self.folder, day, self.rows.pop(day))

    def finish_bundle(self):
        rows, self.rows = self.rows, defaultdict(list)
        for day, waiting in rows.items():
            # finish_bundle outputs need their window spelled out (the batch's global one).
            yield WindowedValue(
                write_staged_day(self.table, self.folder, day, waiting),
                GlobalWindow().max_timestamp(),
                (GlobalWindow(),),
            )


class StageTables(beam.PTransform):
    """{table name: rows} → staged Parquet files under `staging/<table>/`, one per table, UTC day
    and bundle (more for a day of over `_StageTableDaysFn.FLUSH_ROWS` rows); outputs {table name:
    the paths}.

    Each table's rows are written where they are computed, in the same fused
    stage: no shuffle, which cost a run encoding and decoding every row as a
    dict, and a stage of its own. The paths stay one output a table: flattened,
    they would be a stage of their own on the local runner, which materialises
    every Flatten of several inputs. A table's file order is its `sort_by`
    (`Table.to_arrow`), whatever order the rows arrive in."""

    def __init__(self, tables: dict[str, Table], staging: str):
        super().__init__()
        self.tables = tables
        self.staging = staging

    def expand(self, rows_by_table: dict):
        return {
            name: rows | f"Stage_{name}" >> beam.ParDo(_StageTableDaysFn(self.tables[name], f"{self.staging}/{name}"))
            for name, rows in rows_by_table.items()
        }


class _StageRowsFn(beam.DoFn):
    """Buffers a bundle's rows and writes them as one Parquet file."""

    def __init__(self, schema: pa.Schema, folder: str):
        self.schema = schema
        self.folder = folder

    def start_bundle(self):
        self.rows = []

    def process(self, row):
        self.rows.append(row)

    def finish_bundle(self):
        if not self.rows:
            return
        filesystem, root = _filesystem(self.folder)
        filesystem.create_dir(root, recursive=True)
        path = f"{root.rstrip('/')}/part-{uuid.uuid4().hex}.parquet"
        # Nothing reads a binary column (a key's saved state) by value: statistics and a dictionary of
        # it would only cost memory, and for one job of millions of events, whose state is ~100 MB,
        # writing them took five times the state's size (docs/performance.md).
        plain = [field.name for field in self.schema if not pa.types.is_binary(field.type)]
        table = pa.Table.from_pylist(self.rows, schema=self.schema)
        self.rows = []
        pq.write_table(table, path, filesystem=filesystem, write_statistics=plain, use_dictionary=plain)
        # finish_bundle outputs need their window spelled out (the batch's global one).
        yield WindowedValue(path, GlobalWindow().max_timestamp(), (GlobalWindow(),))


class StageRows(beam.PTransform):
    """Rows (dicts of `schema`) → staged Parquet files in `folder`, one per bundle; outputs the paths."""

    def __init__(self, schema: pa.Schema, folder: str):
        super().__init__()
        self.schema = schema
        self.folder = folder

    def expand(self, rows):
        return rows | "StageRows" >> beam.ParDo(_StageRowsFn(self.schema, self.folder))
