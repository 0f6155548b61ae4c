"""Confining a DuckDB connection to reading one output folder: what `mpg sql` runs queries on.

`lock_down(connection, allowed_dirs)` uses DuckDB's own settings, after the
views exist (creating them reads the tables, and the lock forbids changing
settings afterwards):

- `enable_external_access = false` closes the file system, the network,
  extension installs and loads, and Python replacement scans, except for
  `allowed_directories`, which stay readable so a query's own
  `read_parquet('OUT/tables/...')` keeps working. DuckDB resolves `..` and
  symbolic links before the check;
- the views name their files relative to the output (`file_search_path`), and
  DuckDB checks a relative name as written, so those exact names go to
  `allowed_paths`: each file a view reads, and nothing else relative (a
  relative prefix would let a query read any file under the same name in the
  working directory, which DuckDB tries first);
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

import re
from collections.abc import Iterable
from pathlib import Path

import duckdb

from fleet_goodput.quoting import literal_pattern, sql_string

# A query only: DESCRIBE, SHOW and SUMMARIZE parse as SELECT too. EXPLAIN is
# left out because EXPLAIN ANALYZE executes the statement it explains (an
# EXPLAIN ANALYZE COPY ... TO writes its file).
READ_ONLY_STATEMENTS = frozenset({duckdb.StatementType.SELECT})
# DuckDB parses INSTALL as a LOAD statement; name it as the user wrote it.
_KIND = {duckdb.StatementType.LOAD: "install and load"}
_SQL_STRING = re.compile(r"'((?:[^']|'')*)'")


class QueryRefused(ValueError):
    """A statement that would write, or change the connection's settings."""


def _inside(path: Path, directories: list[Path]) -> bool:
    return any(path == d or d in path.parents for d in directories)


def _relative_files_of_views(connection: duckdb.DuckDBPyConnection, directories: list[Path]) -> list[str]:
    """Relative file names in the views' SQL that name, through `file_search_path`, a file inside `directories`."""
    search_path = connection.execute("select current_setting('file_search_path')").fetchone()[0] or ""
    bases = [Path(base).resolve() for base in search_path.split(",") if base]
    names = set()
    for (view_sql,) in connection.execute("select sql from duckdb_views() where not internal").fetchall():
        for literal in _SQL_STRING.findall(view_sql or ""):
            name = literal.replace("''", "'")
            if (
                name
                and not Path(name).is_absolute()
                and any((base / name).is_file() and _inside((base / name).resolve(), directories) for base in bases)
            ):
                names.add(name)
    return sorted(names)


def lock_down(connection: duckdb.DuckDBPyConnection, allowed_dirs: Iterable[str | Path]) -> None:
    """Let `connection` read files only under `allowed_dirs`, reach no network, load no extension, change no setting."""
    resolved = [Path(d).resolve() for d in allowed_dirs]
    # A trailing slash, so allowing /data/out does not also allow /data/out-old. DuckDB checks a
    # glob as written as well as each file it matches, and the views name their files as globs
    # that match them alone (`[*]` for a `*` of the folder's name): both forms are allowed.
    folders = [d.as_posix().rstrip("/") + "/" for d in resolved]
    directories = list(dict.fromkeys(folders + [literal_pattern(folder) for folder in folders]))
    view_files = _relative_files_of_views(connection, resolved)
    for statement in (
        "set autoinstall_known_extensions = false",
        "set autoload_known_extensions = false",
        "set allow_community_extensions = false",
        f"set allowed_directories = [{', '.join(sql_string(d) for d in directories)}]",
        f"set allowed_paths = [{', '.join(sql_string(f) for f in view_files)}]",
        "set enable_external_access = false",
        "set lock_configuration = true",
    ):
        connection.execute(statement)


def read_only_statements(query: str, parser: duckdb.DuckDBPyConnection | None = None) -> list[duckdb.Statement]:
    """The query's statements, parsed by DuckDB (by `parser`, a connection, where given: else by DuckDB's
    default connection, which starts a database of its own); QueryRefused if any of them is not a query."""
    statements = (parser or duckdb).extract_statements(query)
    for statement in statements:
        if statement.type not in READ_ONLY_STATEMENTS:
            kind = _KIND.get(statement.type, statement.type.name.lower())
            raise QueryRefused(
                f"{kind} statements are refused: only queries (select, with, from, describe, show, "
                f"summarize) run on the output, read-only. Refused: {statement.query.strip()[:120]!r}"
            )
    return statements


# What a confined connection checks or refuses beyond DuckDB's own lock. DuckDB allows writes wherever it
# allows reads, and the output must stay readable; so SQL text goes through `read_only_statements` first,
# and a relation's methods that write a file refuse (outside the output DuckDB refuses them already).
_SQL_TAKERS = {"sql": 0, "query": 0, "execute": 0, "executemany": 0, "from_query": 0}  # name → the SQL's position
_RELATION_SQL_TAKERS = {"query": 1}  # relation.query(view_name, sql)
_FILE_WRITERS = frozenset({"write_parquet", "write_csv", "to_parquet", "to_csv"})


class Confined:
    """A DuckDB connection or relation that runs queries only and writes no file: the rest is DuckDB's own.

    What `fleet_goodput.api.open` returns: `con.sql(q).df()`, `.pl()`, `.arrow()`, `con.register(...)` work
    as on DuckDB's objects (every attribute is theirs); a statement that is not a query raises QueryRefused
    before it runs, as in `mpg sql`, and so does writing a relation to a file."""

    __slots__ = ("_duckdb", "_sql_takers")

    def __init__(self, inner, sql_takers: dict[str, int] = _SQL_TAKERS):
        object.__setattr__(self, "_duckdb", inner)
        object.__setattr__(self, "_sql_takers", sql_takers)

    def __getattr__(self, name: str):
        found = getattr(self._duckdb, name)
        if name in _FILE_WRITERS:
            raise QueryRefused(
                f"{name} is refused on a confined connection: it writes a file. Open the output "
                "with confined=False to export."
            )
        if not callable(found):
            return found
        position = self._sql_takers.get(name)

        def checked(*args, **kwargs):
            if position is not None:
                query = args[position] if len(args) > position else kwargs.get("query")
                if isinstance(query, str):
                    read_only_statements(query)
            return _confined(found(*args, **kwargs))

        return checked

    def __setattr__(self, name: str, value) -> None:
        setattr(self._duckdb, name, value)

    def __enter__(self):
        self._duckdb.__enter__()
        return self

    def __exit__(self, *exc_info):
        return self._duckdb.__exit__(*exc_info)

    def __iter__(self):
        return iter(self._duckdb)

    def __len__(self) -> int:
        return len(self._duckdb)

    def __repr__(self) -> str:
        return f"Confined({self._duckdb!r})"


def _confined(value):
    """DuckDB's objects that can run SQL or write files, wrapped; anything else as it is."""
    if isinstance(value, duckdb.DuckDBPyConnection):
        return Confined(value)
    if isinstance(value, duckdb.DuckDBPyRelation):
        return Confined(value, _RELATION_SQL_TAKERS)
    return value
