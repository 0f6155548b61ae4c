"""A streaming pipeline's commits: each pane of its results, one run of the store.

A Beam streaming pipeline (pipelines/streaming.py, on Dataflow or any runner)
never ends, so it commits what its windows produced as it goes: every pane
its sink fires (transforms/commit.py) is committed here as one run of the
store, with the guarantees of any run (fleet_goodput/store/delta_store.py):
the tables are written first, then the run's `runs` row makes it visible, so
a writer killed in between leaves the previous run exactly as it was, and the
next commit (or `mpg check --repair`) puts back what it moved. Keyed tables
keep the latest `version` of each key across panes (keyed_tables.py), and
`rejected` and `late` take each row once.

Exactly once: a runner retries a bundle whose commit may have been made (a
worker lost after the commit, before the runner recorded the bundle done).
Each pane is numbered (its pane index: panes of one key in one window come in
order, and the runner feeds a retry the same pane), and the `runs` row carries
(the stream's id, that number) as a Delta transaction identifier in the same
Delta commit, so a pane whose number the store already holds is not committed
again. The id is made when the pipeline is built, so a new pipeline on the
same store numbers afresh under its own.

A store is written either by runs (`mpg run`, `mpg stream`, a Flex Template
job), which keep every open job's state in the store, or by a streaming
pipeline, whose state lives in its runner: each refuses a store the other
wrote, since neither could continue the other's state.

Counts: a pane adds the counts of what it settled to the store's. Events read
but not yet settled wait in the runner's state; the manifest counts them as
`waiting` (read minus every settled fate), so it reconciles while they wait
and once the pipeline drains they are all settled. A settled count above
what was read (an event counted twice) is refused: nothing is committed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fleet_goodput import schemas
from fleet_goodput.core.config import Settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.core.session import STATE_FORMAT
from fleet_goodput.store import maintenance
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.layout import STATE_FILES_SCHEMA, STATE_KEYS_SCHEMA, delta_schema
from fleet_goodput.store.manifest import OUTCOMES, add_counts, build_manifest, counts_from_json, write_manifest_copy
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.store_check import require_intact
from fleet_goodput.store.stored_settings import commit_settings
from fleet_goodput.store.tables import TABLES
from fleet_goodput.store.transaction import begin

STREAM_MODE = "stream-pipeline"  # the `mode` of a streaming pipeline's runs
SETTLED = tuple(outcome for outcome in OUTCOMES if outcome not in ("read", "waiting"))


class CountsDoNotAddUp(StoreError):
    """A pane's counts would make some stream's settled events more than it read."""


@dataclass(frozen=True)
class Pane:
    """What one firing of a streaming pipeline's sink holds."""

    rows: dict[str, list[dict]] = field(default_factory=dict)  # table name → rows of it
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (stream, outcome) → events


def refuse_stream_store(previous: RunRecord | None, root: str) -> None:
    """StoreError if `previous`, the run a run of `mpg run` or `mpg stream` would continue, was committed
    by a streaming pipeline: its jobs' state is in the pipeline's runner, not in the store."""
    if previous is not None and previous.mode == STREAM_MODE:
        raise StoreError(
            f"{root} was written by a streaming pipeline (run {previous.run_id}), which keeps its jobs' "
            "state in its runner, not in the store: a run cannot continue it. Give the run another "
            "output; the stream's tables read as any store's (`mpg sql`, `mpg report`)"
        )


def commit_pane(
    store: Store,
    pane: Pane,
    *,
    stream_id: str,
    sequence: int,
    settings: Settings,
    run_settings: RunSettings,
    source: str,
) -> RunRecord | None:
    """Commit `pane`, number `sequence` of stream `stream_id` (reading `source`), as one run of `store`;
    None when the store holds that pane already (a retry), or when the pane holds nothing (the last, as
    a stream drains, may). StoreBusy while another run holds a local store, or committed to a gs:// one
    meanwhile: the same commit later is right."""
    if not any(pane.rows.values()) and not any(pane.counts.values()):
        return None
    with store.lock():
        require_intact(store)  # a damaged store is refused before anything changes
        transaction = begin(store)  # marks the store, and puts back what a killed commit moved
        previous = transaction.previous
        if previous is not None and previous.mode != STREAM_MODE:
            raise StoreError(
                f"{store.root} holds runs of `mpg run` or `mpg stream` (run {previous.run_id}, "
                f"{previous.mode}), which keep their jobs' state in the store; a streaming pipeline keeps "
                "its own in the runner and cannot continue them: give the pipeline a store of its own"
            )
        done = store.committed_sequence(stream_id)
        if done is not None and sequence <= done:
            return None
        run_id = previous.run_id + 1 if previous else 1
        manifest = _manifest(run_id, previous, pane, settings, run_settings, stream_id, sequence, source, store.root)
        commit_settings(transaction, run_id, settings, run_settings)
        for name, table in TABLES.items():  # every table, made on the first commit: those the stream never fills empty
            rows = table.to_arrow(pane.rows.get(name, []), dated=True)
            if table.key:
                transaction.write_keyed(table, rows=rows)
            else:
                transaction.write(name, rows, delta_schema(table), partition_by=["date"])
        # The runs' saved state lives in the runner: these tables are made, empty, so that every table exists.
        transaction.write("state_keys", STATE_KEYS_SCHEMA.empty_table(), STATE_KEYS_SCHEMA)
        transaction.write("state_files", STATE_FILES_SCHEMA.empty_table(), STATE_FILES_SCHEMA)
        transaction.compact()
        record = RunRecord(
            run_id=run_id,
            committed_at_us=time.time_ns() // 1000,
            mode=STREAM_MODE,
            input=source,
            as_of_us=manifest["as_of_us"],
            frontier_us=None,
            files_applied=0,
            files_skipped=0,
            state_format=STATE_FORMAT,
            versions=dict(transaction.versions),
            manifest=manifest,
        )
        transaction.commit(record, marks=(stream_id, sequence))
        write_manifest_copy(store.root, manifest)
        maintenance.maintain(store, run_settings.retention_hours)
    return record


def _manifest(
    run_id: int,
    previous: RunRecord | None,
    pane: Pane,
    settings: Settings,
    run_settings: RunSettings,
    stream_id: str,
    sequence: int,
    source: str,
    output: str,
) -> dict:
    """The store's manifest after `pane`: its counts added to the settled ones, what was read and not
    yet settled `waiting`, and its as-of time the latest `version` it or an earlier pane reached."""
    earlier = previous.manifest if previous else {}
    settled = add_counts(counts_from_json(earlier.get("settled_counts", [])), pane.counts)
    waiting = {}
    for stream in schemas.STREAMS:
        left = settled.get((stream, "read"), 0) - sum(settled.get((stream, outcome), 0) for outcome in SETTLED)
        if left < 0:
            raise CountsDoNotAddUp(
                f"counts do not reconcile: stream {stream} would have {-left} more events settled "
                f"than read after pane {sequence} of stream {stream_id}; nothing was committed"
            )
        if left:
            waiting[(stream, "waiting")] = left
    versions = [row["version_us"] for rows in pane.rows.values() for row in rows if row.get("version_us") is not None]
    as_of_us = max(
        [*versions, *([previous.as_of_us] if previous and previous.as_of_us is not None else [])], default=None
    )
    return build_manifest(
        run_id=run_id,
        input_dir=source,
        as_of_us=as_of_us,
        window_s=settings.window_s,
        previous=earlier,
        counts=pane.counts,
        pending=waiting,
        extra={
            "mode": STREAM_MODE,
            "version_us": as_of_us,
            "frontier_us": None,
            "stream": {"id": stream_id, "pane": sequence},
            "allowed_lateness_s": run_settings.allowed_lateness_s,
            "files_applied": 0,
            "files_skipped": 0,
            "output": output,
        },
    )
