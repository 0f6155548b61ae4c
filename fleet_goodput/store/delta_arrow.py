"""Delta tables read as Arrow without delta-rs' Python file system, where the table is on local disk.

deltalake reads a table's Parquet files through a `pyarrow.fs.PyFileSystem`
whose handler is Rust code called back from Arrow's I/O threads. A process
that exits while such a thread still works (a run that lost the race to
commit, printing its error at once) has that thread call into an interpreter
that is finalizing: it dies with a C++ `terminate`. Arrow's own local file
system calls no Python, so local tables are read with it.

A small unpartitioned table (the store's runs) is read file by file with
Parquet's own reader (`parts`): importing `pyarrow.dataset` imports pandas,
a third of a CPU second that `mpg runs` and `mpg sql` would pay for nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from fleet_goodput.quoting import path_of_uri

if TYPE_CHECKING:
    import pyarrow.dataset as ds

# Reads a part of a table: its `columns` (all, given None), as the table's schema types them.
PartReader = Callable[[list[str] | None], pa.Table]


def dataset(table: DeltaTable) -> ds.Dataset:
    """The table's current version as a pyarrow dataset."""
    import pyarrow.fs as pa_fs

    uri = table.table_uri
    if _is_remote(uri):
        return table.to_pyarrow_dataset()  # gs://: delta-rs' object store
    root = path_of_uri(uri)  # delta-rs gives the table's URI percent-encoded
    return table.to_pyarrow_dataset(filesystem=pa_fs.SubTreeFileSystem(root, pa_fs.LocalFileSystem()))


def whole(table: DeltaTable) -> pa.Table:
    """The table's current version, read whole. (An empty table from no batches: `Schema.empty_table`
    asks pandas, importing it.)"""
    schema = pa.schema(table.schema().to_arrow())  # the table's, as its dataset would type it
    return pa.concat_tables([pa.Table.from_batches([], schema), *(read(None) for read in parts(table, schema))])


def parts(table: DeltaTable, schema: pa.Schema) -> list[PartReader]:
    """The table's current version as parts that each read some columns, typed as `schema` has them:
    its Parquet files, for a local unpartitioned table (a column a file was written without, by an older
    writer, reads as nulls, as a dataset of the table's schema reads it); else one part, its dataset."""
    if _is_remote(table.table_uri) or table.metadata().partition_columns:
        whole = dataset(table)
        return [lambda columns: whole.to_table(columns=columns)]
    return [_file_reader(path_of_uri(uri), schema) for uri in table.file_uris()]


def _file_reader(path: str, schema: pa.Schema) -> PartReader:
    def read(columns: list[str] | None) -> pa.Table:
        fields = [schema.field(name) for name in (columns or schema.names)]
        parquet = pq.ParquetFile(path)
        present = set(parquet.schema_arrow.names)
        rows = parquet.read(columns=[field.name for field in fields if field.name in present])
        return pa.table(
            [
                _typed(rows.column(field.name), field.type)
                if field.name in present
                else pa.nulls(parquet.metadata.num_rows, field.type)
                for field in fields
            ],
            schema=pa.schema(fields),
        )

    return read


def _typed(column: pa.ChunkedArray, arrow_type: pa.DataType) -> pa.ChunkedArray:
    """`column` as `arrow_type`: cast only where it is another (a cast imports `pyarrow.compute`, 30 ms of
    `mpg sql`'s start, and the store's files are written with the table's types)."""
    return column if column.type == arrow_type else column.cast(arrow_type)


def _is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")
