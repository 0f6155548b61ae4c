"""Writing a table as Hive-partitioned Parquet, one partition per UTC day.

Rows are grouped by day and each partition is written whole by pyarrow with
`delete_matching`, which replaces what an earlier run left in that partition:
a rerun over the same days is idempotent. (Beam's `fileio.WriteToFiles` with
`date=…/` destinations was measured to write nothing on the local filesystem
while reporting success, hence pyarrow inside a DoFn.)
"""

from __future__ import annotations

import apache_beam as beam
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from fleet_goodput.tables import Table, utc_day


def write_partition(table: Table, output_dir: str, day: str, rows: list[dict]) -> str:
    """Write one day of `table` under `output_dir/tables/<table>/date=<day>/`; returns the path."""
    filesystem, root = pafs.FileSystem.from_uri(output_dir) if "://" in output_dir else (pafs.LocalFileSystem(), output_dir)
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
