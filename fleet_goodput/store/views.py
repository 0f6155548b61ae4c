"""The DuckDB views over one run's snapshot of the output store.

`create_views` builds the `raw` layer over the exact Parquet files of a
committed run's table versions (fleet_goodput/store/delta_store.py), so a view never sees
a half-written run, and reading run N gives run N's figures whatever came
after. A keyed table holds one row per key (fleet_goodput/store/keyed_tables.py), so
its view is its rows as they are; only a snapshot written before that rule
keeps the latest version of each key here. Then the `settings` the run was
computed with, which the store keeps (fleet_goodput/store/stored_settings.py), and
the `size_classes` lookup from them, then every SQL file of the registry in
order.

The views `connect` makes name their files by absolute path, found from
wherever the output is now. Those stored in `goodput.duckdb` name them
relative to the output, through the macro `goodput_file`, so a moved or copied
output keeps working: opened directly (the DuckDB CLI, `duckdb.connect`), the
file knows its own folder from DuckDB's default `temp_directory`
(`<database>.tmp`), so it reads from any working directory; attached to
another database, or with `temp_directory` set, it reads relative to the
working directory (and `file_search_path`), so open it from inside the output.

`connect` gives an in-memory connection with the views of the latest run (or
of `run`), which DuckDB binds as queries first read them, where it can (a
third of the time to open them); `build_database` also stores them in
`OUTPUT/goodput.duckdb` for the DuckDB CLI and other tools. A run after the
first replaces only the views over its files and its settings, in a copy of
the last file, and keeps the registry's views bound as they were, where the
file says it was built from this registry by this DuckDB (the comment of
`goodput_file`), holds nothing else, and no view replaced changes its
columns; else it builds the file afresh.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa

from fleet_goodput import sql
from fleet_goodput.core.config import Settings
from fleet_goodput.core.run_settings import MAX_SILENCE_S
from fleet_goodput.quoting import literal_pattern, sql_string
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.keyed_tables import holds_one_row_per_key
from fleet_goodput.store.killed_runs import undo_killed_run_if_idle
from fleet_goodput.store.layout import is_remote
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.store_check import require_intact
from fleet_goodput.store.stored_settings import KEYS, apply, document, kept_settings
from fleet_goodput.store.tables import TABLES, Table

DATABASE_FILE = "goodput.duckdb"
# The oldest DuckDB the project declares (pyproject.toml) must open the file.
STORAGE_VERSION = "v1.1.0"

# The head of each registry file's statement, where a deferred view says so.
_VIEW_HEAD = re.compile(r"^(create or replace view [\w.]+)(?=\s+as\b)", re.IGNORECASE | re.MULTILINE)

_DUCKDB_TYPES = {
    "string": "varchar",
    "double": "double",
    "int64": "bigint",
    "int32": "integer",
    "timestamp[us, tz=UTC]": "timestamptz",
}


def _duckdb_type(arrow_type: pa.DataType) -> str:
    """The DuckDB spelling of a table column's Arrow type (a list of structs too: jobs.interruptions)."""
    if pa.types.is_list(arrow_type):
        return f"{_duckdb_type(arrow_type.value_type)}[]"
    if pa.types.is_struct(arrow_type):
        fields = ", ".join(f"{field.name} {_duckdb_type(field.type)}" for field in arrow_type)
        return f"struct({fields})"
    return _DUCKDB_TYPES[str(arrow_type)]


# A stored view's file, relative to the output: from the database file's own folder where
# DuckDB's default temp_directory (`<database>.tmp`) tells it, else from the working directory.
# Table function arguments are folded when a query binds, so this works inside read_parquet.
# read_parquet takes a glob: the folder's `*`, `?` and `[` are written as `[*]`, `[?]` and `[[]`
# (quoting.literal_pattern; the relative name comes quoted already).
_GOODPUT_FILE_MACRO = r"""create or replace macro {prefix}goodput_file(relative) as
    case when regexp_matches(current_setting('temp_directory'), '\.duckdb\.tmp$')
         then regexp_replace(regexp_replace(current_setting('temp_directory'), '[^/]*\.tmp$', ''),
                             '([*?\[])', '[\1]', 'g') || relative
         else relative end"""


def _source(files: list[str], relative: bool) -> str:
    # read_parquet reads a name as a glob: each is quoted to match its own file alone.
    literals = (sql_string(literal_pattern(name)) for name in files)
    listed = ", ".join(f"goodput_file({literal})" if relative else literal for literal in literals)
    return f"read_parquet([{listed}], hive_partitioning = true, hive_types = {{'date': date}}, union_by_name = true)"


def _empty(table: Table) -> str:
    columns = ", ".join(f"cast(null as {_duckdb_type(c.type)}) as {c.name}" for c in table.columns)
    return f"select {columns}, cast(null as date) as date where false"


def _raw_select(store: Store, name: str, record: RunRecord | None, relative: bool, earlier: bool) -> str:
    """The select of table `name` as `record` left it; `earlier`: a run before the latest, whose files may be
    gone past the retention."""
    table = TABLES[name]
    snapshot = store.snapshot(name, record)
    files = store.relative_files(snapshot)
    if not files:
        return _empty(table)
    if earlier and not is_remote(store.root):
        _still_kept(store, record, files)
    source = _source(files if relative else [store.path(f) for f in files], relative)
    # A column this release adds to a table (jobs.unended_runs) is absent from a store written before it
    # until a run rewrites the rows: it reads as null there, so the views bind on any store.
    stored = {field.name for field in snapshot.schema().fields}
    added = "".join(
        f", cast(null as {_duckdb_type(c.type)}) as {c.name}" for c in table.columns if c.name not in stored
    )
    if not table.key or holds_one_row_per_key(snapshot):
        return f"select *{added} from {source}"
    # Written before keyed tables held one row per key: every version of a row is stored.
    return (
        f"select *{added} from {source} "
        f"qualify row_number() over (partition by {', '.join(table.key)} order by version desc) = 1"
    )


def _still_kept(store: Store, record: RunRecord, files: list[str]) -> None:
    """An earlier run's files are removed once it is past the retention (maintenance.maintain): say so, as a
    StoreError, rather than let a query fail on a missing file, which reads as damage."""
    if not all(os.path.exists(store.path(f)) for f in files):
        raise StoreError(
            f"run {record.run_id} can no longer be read: its files were removed, as the store keeps "
            "only the runs within its retention (runs.retention_hours); `mpg runs --output "
            f"{shlex.quote(store.root)}` lists those it keeps"
        )


def _raw_views(store: Store, record: RunRecord | None, relative: bool, earlier: bool) -> dict[str, str]:
    selects = {name: _raw_select(store, name, record, relative, earlier) for name in TABLES}
    # Rejections of events still inside the lateness are provisional: shown, and marked.
    selects["rejected"] = (
        f"select *, false as provisional from ({selects['rejected']}) "
        f"union all by name select *, true as provisional from ({selects.pop('rejected_pending')})"
    )
    return selects


def _size_classes_sql(settings: Settings) -> str:
    rows, lower = [], 1
    for ordinal, size_class in enumerate(settings.size_classes):
        upper = size_class.max_chips if size_class.max_chips is not None else 2**62
        rows.append(f"({ordinal}, {sql_string(size_class.name)}, {lower}, {upper})")
        lower = upper + 1
    return (
        "create or replace view size_classes as select * from (values "
        + ", ".join(rows)
        + ") as t(ordinal, size_class, min_chips, max_chips)"
    )


def _settings_sql(settings: Settings, kept: dict) -> str:
    """One row per setting, its value as JSON, and whether the store keeps it (else it is the
    settings file's or the default, for a store from before settings were kept)."""
    values = document(settings, kept.get("allowed_lateness_s"), kept.get("max_silence_s", MAX_SILENCE_S))
    rows = ", ".join(
        f"({ordinal}, {sql_string(key)}, {sql_string(json.dumps(values[key]))}, {str(key in kept).lower()})"
        for ordinal, key in enumerate(KEYS)
    )
    return (
        f"create or replace view settings as select setting, value, stored from (values {rows}) "
        "as t(ordinal, setting, value, stored) order by ordinal"
    )


def _observed_sql(record: RunRecord | None) -> str:
    """One row per cluster whose sources state what they observed, as of the run (its manifest's
    `clock`; docs/metric.md, "Time and the as-of time"): none where the as-of time was inferred."""
    periods = (((record.manifest if record else None) or {}).get("clock") or {}).get("observed") or {}
    rows = " union all ".join(
        f"select {sql_string(cluster)} as cluster, make_timestamptz({int(period['from_us'])}::bigint) as observed_from, "
        f"make_timestamptz({int(period['to_us'])}::bigint) as observed_to"
        for cluster, period in sorted(periods.items())
    )
    empty = "select null::varchar as cluster, null::timestamptz as observed_from, null::timestamptz as observed_to where false"
    return f"create or replace view observed_periods as {rows or empty}"


def _run_clock_sql(record: RunRecord | None) -> str:
    """The run the views read and its as-of time: one row (none for a store with no run)."""
    if record is None:
        return (
            "create or replace view run_clock as select null::bigint as run_id, null::timestamptz as as_of where false"
        )
    as_of = f"make_timestamptz({int(record.as_of_us)}::bigint)" if record.as_of_us is not None else "null::timestamptz"
    return f"create or replace view run_clock as select {int(record.run_id)}::bigint as run_id, {as_of} as as_of"


def _deferred_binding(connection: duckdb.DuckDBPyConnection) -> str:
    """The clause that makes DuckDB create a view without binding it, or "" where this DuckDB has none.

    DuckDB binds a view as it creates it, and binding a view binds every view
    it reads again: over the marts' chain, two thirds of the time it takes to
    open the views (0.15 s → 0.05 s, benchmarks/bench_open.py). A DuckDB that
    can defer it (`WITH (DEFER_BINDING)`) binds each view at the first query
    that reads it instead, at no extra cost to that query. Asked of
    `connection` itself with a temporary view (2 ms), not of a database of
    its own, which would cost another DuckDB start (15 ms).
    """
    try:
        connection.execute("create temp view fleet_goodput_probe with (defer_binding) as select 1")
    except duckdb.Error:  # a DuckDB that does not know the clause: bind as before
        return ""
    connection.execute("drop view fleet_goodput_probe")
    return " with (defer_binding)"


def create_views(
    connection: duckdb.DuckDBPyConnection,
    output_dir: str | Path | Store,
    settings: Settings | None,
    run_id: int | None = None,
    schema: str | None = None,
    relative: bool = False,
    defer_binding: bool = False,
    latest: RunRecord | None = None,
) -> RunRecord | None:
    """Create every view of run `run_id` (default: the latest) in `connection`; returns that run.

    With `defer_binding`, DuckDB binds each view when a query first reads it,
    where it can (`_deferred_binding`); views stored in a file are bound as
    they are created, so the oldest DuckDB declared can read them and their
    relative file names resolve then. The views use the settings the store
    keeps for the run; `settings` only where it keeps none (an older store;
    None: the bundled defaults, read only then). `latest`: the store's latest
    run where the caller has read it already (else it is read here).
    """
    store = Store.of(output_dir)
    deferred = _deferred_binding(connection) if defer_binding else ""
    record, named = _run_views(store, settings, run_id, schema, relative, deferred, latest)
    if schema:
        connection.execute(f"use {schema}")
    if relative:
        connection.execute(_GOODPUT_FILE_MACRO.format(prefix=f"{schema}." if schema else ""))
    for statement in named.values():
        connection.execute(statement)
    for statement in _registry_statements(deferred):
        connection.execute(statement)
    return record


def _run_views(
    store: Store,
    settings: Settings | None,
    run_id: int | None,
    schema: str | None,
    relative: bool,
    deferred: str = "",
    latest: RunRecord | None = None,
) -> tuple[RunRecord | None, dict[str, str]]:
    """Run `run_id`'s record (default: the latest) and the statements of the views that are the run's
    own, by view name: those over its tables' files (created `deferred`), `settings` and `size_classes`."""
    latest = latest or store.latest()
    record = store.run(run_id) if run_id is not None and run_id != (latest and latest.run_id) else latest
    earlier = record is not latest  # asked once, not per table
    kept = kept_settings(store, record)
    settings = apply(kept, settings)
    prefix = f"{schema}." if schema else ""
    named = {
        name: f"create or replace view {prefix}{name}{deferred} as {select}"
        for name, select in _raw_views(store, record, relative, earlier).items()
    }
    named["settings"] = _settings_sql(settings, kept).replace("view settings", f"view {prefix}settings")
    named["size_classes"] = _size_classes_sql(settings).replace("view size_classes", f"view {prefix}size_classes")
    named["observed_periods"] = _observed_sql(record).replace("view observed_periods", f"view {prefix}observed_periods")
    named["run_clock"] = _run_clock_sql(record).replace("view run_clock", f"view {prefix}run_clock")
    return record, named


def _registry_statements(deferred: str = "") -> list[str]:
    """The registry's views (sql/), in order, each created `deferred` where that is given."""
    return [_VIEW_HEAD.sub(rf"\1{deferred}", sql.view_sql(relative_path), count=1) for relative_path in sql.VIEW_FILES]


@functools.cache
def _registry_fingerprint() -> str:
    """What a stored file's registry views were built from: the registry, the macro, the run's own
    views' names and the DuckDB that bound them. Stored as the comment of `goodput_file`."""
    made_of = [
        duckdb.__version__,
        _GOODPUT_FILE_MACRO,
        *_registry_statements(),
        *TABLES,
        "settings",
        "size_classes",
        "observed_periods",
        "run_clock",
    ]
    return f"fleet-goodput views {hashlib.sha256(chr(0).join(made_of).encode()).hexdigest()}"


def build_database(output_dir: str | Path | Store, settings: Settings) -> Path:
    """(Re)create `OUTPUT/goodput.duckdb` with the latest run's views; returns its path.

    The views use the settings the store keeps (`settings` only where it keeps none).

    Written beside and renamed into place, so a reader never opens half a file.
    """
    store = Store.of(output_dir)
    path = Path(store.root) / DATABASE_FILE
    tmp = path.with_name(f".{DATABASE_FILE}.tmp")
    tmp.unlink(missing_ok=True)
    with duckdb.connect() as connection:
        # The relative names must resolve while the views are created (DuckDB binds them then): from
        # the output, as when goodput.duckdb is opened (`goodput_file`). Not file_search_path, which
        # would split the output's path at a comma.
        connection.execute(f"set temp_directory = {sql_string(Path(store.root) / f'{DATABASE_FILE}.tmp')}")
        if not _refreshed_copy(connection, store, settings, path, tmp):
            tmp.unlink(missing_ok=True)
            connection.execute(f"attach {sql_string(tmp)} as goodput (storage_version {sql_string(STORAGE_VERSION)})")
            create_views(connection, store, settings, schema="goodput", relative=True)
            connection.execute(f"comment on macro goodput.goodput_file is {sql_string(_registry_fingerprint())}")
        connection.execute("use memory")
        connection.execute("detach goodput")
    os.replace(tmp, path)
    return path


def _refreshed_copy(
    connection: duckdb.DuckDBPyConnection, store: Store, settings: Settings, path: Path, tmp: Path
) -> bool:
    """Whether a copy of the last `goodput.duckdb`, at `tmp` and attached as `goodput`, now holds the
    latest run's views, only the run's own replaced (`_run_views`): False, and nothing attached, where
    it cannot.

    Binding the registry's views as they are created is nearly all of the
    time it takes to build the file (0.3 of 0.4 CPU s; a mart binds every
    view it reads again), and they are the same from run to run: what
    changes is the files the run's views name. The registry's views of the
    copy are kept only where binding them again would give what they hold:
    the copy was built from this registry by this DuckDB (its fingerprint),
    holds what a build makes and nothing else, and every view replaced
    keeps its columns and their types.
    """
    if not path.is_file():
        return False
    try:
        shutil.copyfile(path, tmp)
        connection.execute(f"attach {sql_string(tmp)} as goodput")
    except (OSError, duckdb.Error):  # unreadable, or not a database: built afresh
        return False
    try:
        built_from = connection.execute(
            "select comment from duckdb_functions() where database_name = 'goodput' and function_name = 'goodput_file'"
        ).fetchall()
        named = _run_views(store, settings, None, "goodput", relative=True)[1]
        if built_from != [(_registry_fingerprint(),)] or _entries(connection) != _built_entries(named):
            raise _NotKept
        connection.execute("use goodput")
        bound_against = _stored_columns(connection, list(named))  # as the registry's views were bound against them
        for statement in named.values():
            connection.execute(statement)
        replaced = _stored_columns(connection, list(named))
        if any(not bound_against.get(name) or replaced.get(name) != bound_against[name] for name in named):
            raise _NotKept
    except (_NotKept, duckdb.Error):
        connection.execute("use memory")
        connection.execute("detach goodput")
        return False
    return True


# What a build creates besides the run's own views: the registry's views and macros, and goodput_file.
_REGISTRY_ENTRY = re.compile(r"^create or replace (view|macro) ([\w.]+)", re.IGNORECASE | re.MULTILINE)


def _built_entries(named: dict[str, str]) -> set[tuple[str, str]]:
    """The (kind, name) of everything a build of goodput.duckdb creates, the run's `named` views included."""
    registry = {
        (kind.lower(), name)
        for statement in _registry_statements()
        for kind, name in _REGISTRY_ENTRY.findall(statement)
    }
    return registry | {("view", name) for name in named} | {("macro", "goodput_file")}


def _entries(connection: duckdb.DuckDBPyConnection) -> set[tuple[str, str]]:
    """The (kind, name) of everything `goodput` holds: a table, view or macro made by hand in the file
    (the DuckDB CLI opens it writable) makes it other than a build's, and it is built afresh."""
    return set(
        connection.execute("""
        select 'view', view_name from duckdb_views() where database_name = 'goodput' and not internal
        union all select 'macro', function_name from duckdb_functions() where database_name = 'goodput' and not internal
        union all select 'table', table_name from duckdb_tables() where database_name = 'goodput'
        union all select 'sequence', sequence_name from duckdb_sequences() where database_name = 'goodput'
        union all select 'type', type_name from duckdb_types() where database_name = 'goodput' and not internal
    """).fetchall()
    )


def _stored_columns(connection: duckdb.DuckDBPyConnection, views: list[str]) -> dict[str, list[tuple[str, str]]]:
    """The columns and types each of `goodput`'s `views` was bound to, as stored (no view is bound
    again), by view: one query for them all (one per view cost 1 ms each, twice, at every run)."""
    columns: dict[str, list[tuple[str, str]]] = {}
    for view, name, data_type in connection.execute(
        "select table_name, column_name, data_type from duckdb_columns() where database_name = 'goodput' "
        "and list_contains($views, table_name) order by table_name, column_index",
        {"views": views},
    ).fetchall():
        columns.setdefault(view, []).append((name, data_type))
    return columns


class _NotKept(Exception):
    """A copy of goodput.duckdb whose registry views cannot be kept (`_refreshed_copy`)."""


def connect(
    output_dir: str | Path | Store,
    run: int | None = None,
    settings: Settings | None = None,
    connection: duckdb.DuckDBPyConnection | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the views of run `run` (default: the latest committed run),
    with the settings the store keeps for it (`settings`, by default the defaults, where it keeps none).
    `connection`: a fresh in-memory connection to create them in (`mpg sql` parses its query with it
    first), else one is made."""
    root = output_dir.root if isinstance(output_dir, Store) else output_dir
    if is_remote(root):
        raise StoreError(f"{root} is remote: query a local copy (docs/dataflow.md, 'Querying a gs:// output')")
    store = Store.of(output_dir)
    latest = require_intact(store)  # StoreDamaged, naming the damage, before anything reads it
    undo_killed_run_if_idle(store, latest)
    if latest is None:
        raise FileNotFoundError(
            f"no committed run in {root}: "
            f"run `mpg run --input DIR --output {shlex.quote(str(root))}` "
            "(or `mpg stream`) first"
        )
    connection = connection or duckdb.connect()
    create_views(connection, store, settings, run_id=run, defer_binding=True, latest=latest)
    return connection
