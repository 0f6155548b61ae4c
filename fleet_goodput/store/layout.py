"""The output store's layout: where each Delta table of a run lives under the output, its schema, and
the files a run leaves beside them (the lock, the staging folder, the marker that says a folder is a store).

The folders are drawn in fleet_goodput/store/delta_store.py, the store's front door.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from fleet_goodput.store.tables import TABLES, Table

STATE_KEYS = "state/keys"
STATE_FILES = "state/files"
SETTINGS = "settings"
RUNS = "runs"
STAGING = "_staging"
LOCK_FILE = ".lock"
MARKER = ".fleet-goodput-store"
STORE_FORMAT = 1  # the layout of delta_store.py; a marker with a later one was written by a newer fleet-goodput
# What a run leaves in a folder even before its first commit (a killed first run).
RUN_SCAFFOLDING = (LOCK_FILE, STAGING, MARKER, f"{MARKER}.tmp")

STATE_KEYS_SCHEMA = pa.schema([("key", pa.string()), ("blob", pa.binary())])
STATE_FILES_SCHEMA = pa.schema(
    [
        ("sha256", pa.string()),
        ("path", pa.string()),
        ("stream", pa.string()),
        ("size", pa.int64()),
        ("run_id", pa.int64()),
        ("modified_us", pa.int64()),
    ]
)


def is_remote(path: str | Path) -> bool:
    return "://" in str(path)


def table_paths() -> dict[str, str]:
    """Every Delta table of a run, by name → its path under the output."""
    paths = {name: f"tables/{name}" for name in TABLES}
    paths.update({"state_keys": STATE_KEYS, "state_files": STATE_FILES, SETTINGS: SETTINGS})
    return paths


def delta_schema(table: Table) -> pa.Schema:
    """A people-facing table as stored: its columns plus the `date` partition."""
    return table.schema.append(pa.field("date", pa.string()))
