"""Panes of a streaming pipeline's results, made by hand, and their commit to a store
(fleet_goodput/store/stream_commit.py): shared by tests/store/test_stream_commit_store.py and
tests/store/test_store_on_object_storage.py."""

from __future__ import annotations

import pyarrow as pa

from fleet_goodput.core.config import load_settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.stream_commit import Pane, commit_pane
from fleet_goodput.store.tables import JOB_WINDOW

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000_000
SETTINGS = load_settings()
RUN_SETTINGS = RunSettings()
STREAM = "fleet-goodput-stream-test"


def window_row(window: int, version: int, productive_chip_s: float) -> dict:
    """A job_window row of job j1: window number `window` (one hour each), as of firing `version` (minutes)."""
    row = {column.key: 0.0 for column in JOB_WINDOW.columns if pa.types.is_floating(column.type)}
    return {
        **row,
        "job_id": "j1",
        "window_start_us": T0 + window * 60 * MINUTE,
        "version_us": T0 + version * MINUTE,
        "productive_chip_s": productive_chip_s,
        "lifetime_chip_s": productive_chip_s,
        "all_allocated_chip_s": productive_chip_s,
    }


def late_row(event_id: str) -> dict:
    return {
        "stream": "runtime",
        "event_id": event_id,
        "job_id": "j1",
        "event_time_us": T0,
        "type": "STEP_END",
        "lateness_s": 7200.0,
        "allowed_lateness_s": 3600.0,
    }


def commit(store: Store, pane: Pane, sequence: int, stream_id: str = STREAM):
    return commit_pane(
        store, pane, stream_id=stream_id, sequence=sequence, settings=SETTINGS, run_settings=RUN_SETTINGS, source="test"
    )


def productive(store: Store, run: RunRecord | None = None) -> dict[int, float]:
    table = store.read("job_window", run or store.latest()).to_pylist()
    return {
        (row["window_start"].timestamp() * 1_000_000 - T0) // (60 * MINUTE): row["productive_chip_s"] for row in table
    }


FIRST = Pane(
    {"job_window": [window_row(0, 60, 100.0)], "late": [late_row("r1")]},
    {("runtime", "read"): 3, ("runtime", "accepted"): 1, ("runtime", "late"): 1},
)
SECOND = Pane(
    {"job_window": [window_row(0, 120, 250.0), window_row(1, 120, 40.0)]},
    {("runtime", "read"): 1, ("runtime", "accepted"): 2},
)
