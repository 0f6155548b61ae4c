"""Undoing what a killed run left: the tables it moved past the latest committed run are put back.

A run becomes visible only by its `runs` row (delta_store.py), so a killed run's writes are never read,
but readers of the Delta tables themselves (polars, Spark...) see a table's latest version.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import write_deltalake

from fleet_goodput.store.delta_log import vacuumed_only
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.layout import is_remote, table_paths

if TYPE_CHECKING:
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.runs_table import RunRecord


def undo_killed_run(store: Store) -> None:
    """Put every table a killed run moved back as the latest committed run left it (a table no
    committed run wrote is emptied). The caller holds the lock."""
    latest = store.latest()
    for name, relative in table_paths().items():
        recorded = latest.versions.get(name) if latest else None
        table = store.delta_table(relative)
        if table is None or table.version() == recorded or (recorded is None and not table.file_uris()):
            continue
        if recorded is not None and vacuumed_only(store.store_files, f"{relative}/_delta_log", recorded):
            continue
        if recorded is None:
            write_deltalake(table, pa.schema(table.schema().to_arrow()).empty_table(), mode="overwrite")
        else:
            table.restore(recorded)


def undo_killed_run_if_idle(store: Store, latest: RunRecord | None = None) -> None:
    """For readers: if a killed run left tables ahead of the latest committed run and no run
    holds the output, undo it now, so that readers of the Delta tables themselves (polars,
    Spark…) see the committed run again. `mpg sql` and the views read the committed versions
    whatever the tables' latest ones are; a run in progress is left alone. `latest`: the
    latest committed run where the caller has read it (else it is read here)."""
    if is_remote(store.root) or not _moved_by_a_killed_run(store, latest or store.latest()):
        return
    try:
        with store.lock():
            undo_killed_run(store)
    except StoreError:
        return  # a run holds the output: its tables are ahead until it commits (or is killed and undone)
    except OSError as error:  # a read-only copy of the output, say
        warnings.warn(
            f"{store.root}: a killed run left tables ahead of the last committed run, and they could not "
            f"be restored ({error}); readers of the Delta tables themselves see that run's rows until "
            "the next `mpg run` on this output",
            stacklevel=2,
        )


def _moved_by_a_killed_run(store: Store, latest: RunRecord | None) -> bool:
    """Whether some table's latest Delta version (from its log's file names) differs from what
    `latest`, the latest committed run, recorded."""
    for name, relative in table_paths().items():
        commits = [int(p.stem) for p in Path(store.path(relative), "_delta_log").glob("*.json") if p.stem.isdigit()]
        recorded = latest.versions.get(name) if latest else None
        if not commits or max(commits) == recorded:
            continue
        if recorded is None and store.delta_table(relative).file_uris():
            return True
        if recorded is not None and not vacuumed_only(store.store_files, f"{relative}/_delta_log", recorded):
            return True
    return False
