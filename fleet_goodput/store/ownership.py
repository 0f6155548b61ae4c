"""Whose folder the output is: the marker that says a folder is a store of this project, and the refusal
to write into one that holds someone else's files.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from fleet_goodput.store.errors import NotAStore, StoreError
from fleet_goodput.store.layout import LOCK_FILE, RUNS, STAGING
from fleet_goodput.store.runs_table import RUNS_SCHEMA
from fleet_goodput.store.store_files import StoreFiles

if TYPE_CHECKING:
    from fleet_goodput.store.delta_store import Store

MARKER = ".fleet-goodput-store"
STORE_FORMAT = 1  # the layout above; a marker with a later one was written by a newer fleet-goodput
# What a run leaves in a folder even before its first commit (a killed first run).
RUN_SCAFFOLDING = (LOCK_FILE, STAGING, MARKER, f"{MARKER}.tmp")


def refuse_foreign(store: Store) -> None:
    """NotAStore unless the folder is absent, empty, or a store of this project (StoreError for one
    a newer fleet-goodput wrote): a run must never overwrite, nor --replace delete, someone's files.
    A gs:// store is checked as a local one is (store_files.py)."""
    files = StoreFiles(store.root)
    if files.is_file(""):
        raise NotAStore(
            f"{store.root} is a file, not a folder: give --output a folder (new, empty, or an output of fleet-goodput)"
        )
    if not files.exists():
        return
    if files.is_file(MARKER):
        try:
            store_format = json.loads(files.read_text(MARKER))["format"]
        except (OSError, ValueError, KeyError, TypeError):
            raise StoreError(
                f"{store.path(MARKER)} cannot be read: the store's marker is damaged; write "
                f'{{"format": {STORE_FORMAT}}} into it if {store.root} is a store of fleet-goodput'
            ) from None
        if store_format > STORE_FORMAT:
            raise StoreError(
                f"{store.root} was written by a newer fleet-goodput (store format {store_format}, this "
                f"one knows {STORE_FORMAT}): upgrade fleet-goodput to use it"
            )
        return
    foreign = sorted(
        name + ("/" if files.is_dir(name) else "") for name in files.names() if name not in RUN_SCAFFOLDING
    )
    if foreign and not _made_before_the_marker(store):
        shown = ", ".join(foreign[:8]) + (f" and {len(foreign) - 8} more" if len(foreign) > 8 else "")
        raise NotAStore(
            f"{store.root} is not empty and is not an output of fleet-goodput (no {MARKER} file, no "
            f"runs table of ours): it holds {shown}. A run writes only into an empty folder or one of "
            "its outputs, and --replace deletes only those: give --output a new or empty folder"
        )


def _made_before_the_marker(store: Store) -> bool:
    """A store written before stores were marked: it has our `runs` table (or had: our manifest.json)."""
    if manifest_run(store) is not None:
        return True
    try:
        table = store._delta(RUNS)
    except Exception:  # a damaged runs log still has our shape of folder: StoreDamaged says more
        return StoreFiles(store.root).is_dir(f"{RUNS}/_delta_log")
    return table is not None and set(RUNS_SCHEMA.names) <= set(table.schema().to_arrow().names)


def mark(store: Store) -> None:
    """Mark the folder as a store of this project (the lock is held; refuse_foreign passed)."""
    files = StoreFiles(store.root)
    if files.exists(MARKER):
        return
    files.write_whole(
        MARKER,
        (
            json.dumps({"format": STORE_FORMAT, "store": "fleet-goodput output (docs/tables-and-views.md)"}) + "\n"
        ).encode(),
    )


def manifest_run(store: Store) -> int | None:
    """The run our manifest.json copy names (None: no such file, or not ours)."""
    try:
        manifest = json.loads(StoreFiles(store.root).read_text("manifest.json"))
        return manifest["run_id"] if "settled_counts" in manifest else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
