"""The run manifest: what was read, and what became of every event.

Reconciliation is the promise that nothing is lost: for every stream,
read = accepted + duplicate + rejected + late + waiting, with each count taken
where the event's fate was decided (decoding, the job timelines, the rejected
table, the `late` table of events behind the allowed lateness, and the state
that holds events after the as-of time until a run's as-of time reaches them).

A manifest covers the whole store, not only its run: the counts of a run that
continues earlier runs add to theirs. Events still inside the allowed
lateness of the as-of time, or after it, have a provisional fate (`pending`
below; `waiting` for those after it): the run that settles them counts them
then, so they are never counted twice.
The manifest is kept in the store's `runs` table; `manifest.json` is a copy of
the latest one for people and scripts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fleet_goodput import schemas
from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.store.store_files import StoreFiles

MANIFEST_FILE = "manifest.json"
# The key under which a run's manifest holds the scheduler's kept times (fleet_goodput/core/asof.py,
# `kept_times`): the name they had when stores began keeping them, which every store holds.
KEPT_TIMES_KEY = "latest_times"
OUTCOMES = ("read", "accepted", "duplicate", "rejected", "late", "waiting")


@dataclass(frozen=True)
class StreamCounts:
    read: int
    accepted: int
    duplicate: int
    rejected: int
    late: int = 0
    waiting: int = 0  # after the as-of time: held in the state until a run's as-of time reaches them

    @property
    def reconciles(self) -> bool:
        return self.read == self.accepted + self.duplicate + self.rejected + self.late + self.waiting


def stream_counts(counts: dict[tuple[str, str], int]) -> dict[str, StreamCounts]:
    return {
        stream: StreamCounts(*(counts.get((stream, outcome), 0) for outcome in OUTCOMES)) for stream in schemas.STREAMS
    }


def counts_from_json(pairs) -> dict[tuple[str, str], int]:
    """Counts as JSON keeps them ([[stream, outcome], n] pairs) → {(stream, outcome): n}."""
    return {tuple(key): n for key, n in pairs}


def add_counts(*counts: dict) -> dict[tuple[str, str], int]:
    total: dict[tuple[str, str], int] = {}
    for part in counts:
        for key, n in part.items():
            total[key] = total.get(key, 0) + n
    return total


def build_manifest(
    *,
    run_id: int,
    input_dir: str,
    as_of_us: int | None,
    window_s: int,
    previous: dict | None,
    counts: dict[tuple[str, str], int],
    pending: dict[tuple[str, str], int],
    extra: dict | None = None,
) -> dict:
    """The store's manifest after a run: the settled counts of every run so far
    plus this run's, and the provisional fates of the events still pending."""
    settled = add_counts(counts_from_json((previous or {}).get("settled_counts", [])), counts)
    streams = stream_counts(add_counts(settled, pending))
    return {
        "run_id": run_id,
        "input": str(input_dir),
        "as_of": format_time_us(as_of_us),
        "as_of_us": as_of_us,
        "window_s": window_s,
        "schema_version": schemas.VERSION,
        "streams": {name: {**vars(c), "reconciles": c.reconciles} for name, c in streams.items()},
        "this_run": {name: vars(c) for name, c in stream_counts(add_counts(counts, pending)).items()},
        "reconciles": all(c.reconciles for c in streams.values()),
        "settled_counts": sorted([list(k), v] for k, v in settled.items()),
        "pending_counts": sorted([list(k), v] for k, v in pending.items()),
        **(extra or {}),
    }


def write_manifest_copy(output_dir: str | Path, manifest: dict) -> None:
    """Write `manifest.json` whole, or not at all (a rename on local disks; one request on gs://)."""
    StoreFiles(str(output_dir)).write_whole(MANIFEST_FILE, (json.dumps(manifest, indent=2) + "\n").encode())


def manifest_path(output_dir: str | Path) -> str:
    return f"{str(output_dir).rstrip('/')}/{MANIFEST_FILE}"
