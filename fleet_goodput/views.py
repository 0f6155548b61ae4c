"""Creating the DuckDB views over an output folder's Parquet tables.

`create_views` builds the `raw` layer from the table definitions (an empty
typed view where a table has no partition yet, so the marts always resolve),
the `size_classes` lookup from the settings, then every SQL file of the
registry in order. The views are stored in `OUTPUT/goodput.duckdb`.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

import sql
from fleet_goodput.config import Settings, load_settings
from fleet_goodput.tables import TABLES, Table

DATABASE_FILE = "goodput.duckdb"

_DUCKDB_TYPES = {"string": "varchar", "double": "double", "int64": "bigint", "int32": "integer",
                 "timestamp[us, tz=UTC]": "timestamptz"}


def _raw_view_sql(table: Table, tables_dir: Path) -> str:
    files = sorted((tables_dir / table.name).glob("date=*/*.parquet"))
    if files:
        pattern = (tables_dir / table.name / "*" / "*.parquet").as_posix()
        source = (f"read_parquet('{pattern}', hive_partitioning = true, hive_types = {{'date': date}}, "
                  f"union_by_name = true)")
        if not table.key:
            return f"create or replace view {table.name} as select * from {source}"
        # Streaming writes every update of a row; a query sees the latest only.
        return (f"create or replace view {table.name} as select * from {source} "
                f"qualify row_number() over (partition by {', '.join(table.key)} order by version desc) = 1")
    columns = ", ".join(f"cast(null as {_DUCKDB_TYPES[str(c.type)]}) as {c.name}" for c in table.columns)
    return f"create or replace view {table.name} as select {columns}, cast(null as date) as date where false"


def _size_classes_sql(settings: Settings) -> str:
    rows, lower = [], 1
    for ordinal, size_class in enumerate(settings.size_classes):
        upper = size_class.max_chips if size_class.max_chips is not None else 2**62
        rows.append(f"({ordinal}, '{size_class.name}', {lower}, {upper})")
        lower = upper + 1
    return ("create or replace view size_classes as select * from (values " + ", ".join(rows)
            + ") as t(ordinal, size_class, min_chips, max_chips)")


def create_views(connection: duckdb.DuckDBPyConnection, output_dir: str | Path, settings: Settings) -> None:
    tables_dir = Path(output_dir).resolve() / "tables"
    for table in TABLES.values():
        connection.execute(_raw_view_sql(table, tables_dir))
    connection.execute(_size_classes_sql(settings))
    for relative_path in sql.VIEW_FILES:
        connection.execute(sql.view_sql(relative_path))


def build_database(output_dir: str | Path, settings: Settings) -> Path:
    """(Re)create `OUTPUT/goodput.duckdb` with every view; returns its path."""
    path = Path(output_dir) / DATABASE_FILE
    with duckdb.connect(str(path)) as connection:
        create_views(connection, output_dir, settings)
    return path


def connect(output_dir: str | Path, read_only: bool = True, settings: Settings | None = None) -> duckdb.DuckDBPyConnection:
    """The output's views: from goodput.duckdb, or, while a stream is still
    writing its tables (the database is built when it stops), created in memory."""
    path = Path(output_dir) / DATABASE_FILE
    if path.exists():
        return duckdb.connect(str(path), read_only=read_only)
    if (Path(output_dir) / "tables").is_dir():
        connection = duckdb.connect()
        create_views(connection, output_dir, settings or load_settings())
        return connection
    raise FileNotFoundError(f"no {DATABASE_FILE} or tables/ in {output_dir}: run `mpg run --output {output_dir}` "
                            "(or `mpg stream`) first")
