"""Confining a DuckDB connection to reading one output folder: what `mpg sql` runs queries on.

`lock_down(connection, allowed_dirs)` uses DuckDB's own settings, after the
views exist (creating them reads the tables, and the lock forbids changing
settings afterwards):

- `enable_external_access = false` closes the file system, the network,
  extension installs and loads, and Python replacement scans, except for
  `allowed_directories`, which stay readable so the views' `read_parquet`
  (and a query's own `read_parquet('OUT/tables/...')`) keep working. DuckDB
  resolves `..` and symbolic links before the check;
- extension auto-install and auto-load are off, so a query naming a function of
  an extension (`read_csv('https://...')`) cannot fetch one;
- `lock_configuration = true`, so a query cannot `set` any of this back.

The allowed directories stay *writable* to DuckDB (`COPY ... TO`, `EXPORT
DATABASE`, `ATTACH` all write there), so `read_only_statements` refuses every
statement but a query (`select`, `with`, `from`, `describe`, `show`,
`summarize`) before anything runs. A query's data-modifying CTE can reach only
the connection's own tables: none in an in-memory connection of views, and a
database file opened read-only refuses the write itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import duckdb

# A query only: DESCRIBE, SHOW and SUMMARIZE parse as SELECT too. EXPLAIN is
# left out because EXPLAIN ANALYZE executes the statement it explains (an
# EXPLAIN ANALYZE COPY ... TO writes its file).
READ_ONLY_STATEMENTS = frozenset({duckdb.StatementType.SELECT})
# DuckDB parses INSTALL as a LOAD statement; name it as the user wrote it.
_KIND = {duckdb.StatementType.LOAD: "install and load"}


class QueryRefused(ValueError):
    """A statement that would write, or change the connection's settings."""


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def lock_down(connection: duckdb.DuckDBPyConnection, allowed_dirs: Iterable[str | Path]) -> None:
    """Let `connection` read files only under `allowed_dirs`, reach no network, load no extension, change no setting."""
    # A trailing slash, so allowing /data/out does not also allow /data/out-old.
    directories = [Path(d).resolve().as_posix().rstrip("/") + "/" for d in allowed_dirs]
    for statement in (
        "set autoinstall_known_extensions = false",
        "set autoload_known_extensions = false",
        "set allow_community_extensions = false",
        f"set allowed_directories = [{', '.join(_sql_string(d) for d in directories)}]",
        "set enable_external_access = false",
        "set lock_configuration = true",
    ):
        connection.execute(statement)


def read_only_statements(query: str) -> list[duckdb.Statement]:
    """The query's statements, parsed by DuckDB; QueryRefused if any of them is not a query."""
    statements = duckdb.extract_statements(query)
    for statement in statements:
        if statement.type not in READ_ONLY_STATEMENTS:
            kind = _KIND.get(statement.type, statement.type.name.lower())
            raise QueryRefused(f"{kind} statements are refused: only queries (select, with, from, describe, show, "
                               f"summarize) run on the output, read-only. Refused: {statement.query.strip()[:120]!r}")
    return statements
