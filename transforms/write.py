"""Writing a table as Hive-partitioned Parquet, one partition per UTC day.

Batch (`WriteTable`): rows are grouped by day and each partition is written
whole by pyarrow with `delete_matching`, which replaces what an earlier run
left in that partition: a rerun over the same days is idempotent. (Beam's
`fileio.WriteToFiles` with `date=…/` destinations was measured to write
nothing on the local filesystem while reporting success, hence pyarrow inside
a DoFn.)

Streaming (`AppendTable`): a stream never ends, so there is no whole
partition to write; each bundle's rows are appended as a new file, and the
`version` column lets the views pick the latest row of each key.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import apache_beam as beam
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fleet_goodput.tables import Table, utc_day


def _filesystem(output_dir: str) -> tuple[pafs.FileSystem, str]:
    if "://" in output_dir:
        return pafs.FileSystem.from_uri(output_dir)
    return pafs.LocalFileSystem(), output_dir


def write_partition(table: Table, output_dir: str, day: str, rows: list[dict]) -> str:
    """Write one day of `table` under `output_dir/tables/<table>/date=<day>/`; returns the path."""
    filesystem, root = _filesystem(output_dir)
    base = f"{root.rstrip('/')}/tables/{table.name}/date={day}"
    ds.write_dataset(
        table.to_arrow(rows), base, filesystem=filesystem, format="parquet",
        basename_template="part-{i}.parquet", existing_data_behavior="delete_matching",
    )
    return base


def _write_day(day_rows, table: Table, output_dir: str) -> str:
    day, rows = day_rows
    return write_partition(table, output_dir, day, list(rows))


class WriteTable(beam.PTransform):
    """Rows of `table` → Parquet partitions; outputs the paths written."""

    def __init__(self, table: Table, output_dir: str):
        super().__init__()
        self.table = table
        self.output_dir = output_dir

    def expand(self, rows):
        return (
            rows
            | "KeyByDay" >> beam.Map(lambda row, key: (utc_day(row[key]), row), key=self.table.date_from)
            | "GroupByDay" >> beam.GroupByKey()
            | "WritePartition" >> beam.Map(_write_day, table=self.table, output_dir=self.output_dir)
        )


class _AppendRowsFn(beam.DoFn):
    """Buffers a bundle's rows and appends them, one new file per day touched."""

    def __init__(self, table: Table, output_dir: str):
        self.table = table
        self.output_dir = output_dir

    def start_bundle(self):
        self.rows = defaultdict(list)

    def process(self, row):
        self.rows[utc_day(row[self.table.date_from])].append(row)

    def finish_bundle(self):
        filesystem, root = _filesystem(self.output_dir)
        for day, rows in self.rows.items():
            folder = f"{root.rstrip('/')}/tables/{self.table.name}/date={day}"
            filesystem.create_dir(folder, recursive=True)
            pq.write_table(self.table.to_arrow(rows), f"{folder}/part-{uuid.uuid4().hex}.parquet", filesystem=filesystem)
        self.rows = defaultdict(list)


class AppendTable(beam.PTransform):
    """Rows of `table` on a stream → appended Parquet files, bundle by bundle."""

    def __init__(self, table: Table, output_dir: str):
        super().__init__()
        self.table = table
        self.output_dir = output_dir

    def expand(self, rows):
        return rows | "AppendRows" >> beam.ParDo(_AppendRowsFn(self.table, self.output_dir))


COUNTS_DIR = "_run/counts"


class _AppendCountsFn(beam.DoFn):
    def __init__(self, output_dir: str):
        self.output_dir = output_dir

    def start_bundle(self):
        self.counts = defaultdict(int)

    def process(self, count):
        key, n = count
        self.counts[key] += n

    def finish_bundle(self):
        if not self.counts:
            return
        filesystem, root = _filesystem(self.output_dir)
        folder = f"{root.rstrip('/')}/{COUNTS_DIR}"
        filesystem.create_dir(folder, recursive=True)
        keys = sorted(self.counts)
        table = pa.table({"stream": [k[0] for k in keys], "outcome": [k[1] for k in keys],
                          "events": [self.counts[k] for k in keys]})
        pq.write_table(table, f"{folder}/part-{uuid.uuid4().hex}.parquet", filesystem=filesystem)
        self.counts = defaultdict(int)


class AppendCounts(beam.PTransform):
    """((stream, outcome), n) deltas on a stream → appended count files, summed by the manifest."""

    def __init__(self, output_dir: str):
        super().__init__()
        self.output_dir = output_dir

    def expand(self, counts):
        return counts | "AppendCounts" >> beam.ParDo(_AppendCountsFn(self.output_dir))
