"""Delta tables read as Arrow without delta-rs' Python file system, where the table is on local disk.

deltalake reads a table's Parquet files through a `pyarrow.fs.PyFileSystem`
whose handler is Rust code called back from Arrow's I/O threads. A process
that exits while such a thread still works (a run that lost the race to
commit, printing its error at once) has that thread call into an interpreter
that is finalizing: it dies with a C++ `terminate`. Arrow's own local file
system calls no Python, so local tables are read with it.
"""

from __future__ import annotations

import pyarrow.dataset as ds
import pyarrow.fs as pa_fs
from deltalake import DeltaTable

from fleet_goodput.quoting import path_of_uri


def dataset(table: DeltaTable) -> ds.Dataset:
    """The table's current version as a pyarrow dataset."""
    uri = table.table_uri
    if "://" in uri and not uri.startswith("file://"):
        return table.to_pyarrow_dataset()  # gs://: delta-rs' object store
    root = path_of_uri(uri)  # delta-rs gives the table's URI percent-encoded
    return table.to_pyarrow_dataset(filesystem=pa_fs.SubTreeFileSystem(root, pa_fs.LocalFileSystem()))
