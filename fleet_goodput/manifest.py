"""The run manifest: what was read, and what became of every event.

Reconciliation is the promise that nothing is lost: for every stream,
read = accepted + duplicate + rejected + late, with each count taken where the
event's fate was decided (decoding, the job timelines, the rejected table,
and in streaming the `late` table of events beyond the allowed lateness).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from apache_beam.io.filesystems import FileSystems

import schemas
from fleet_goodput.timeutil import format_time_us

MANIFEST_FILE = "manifest.json"
OUTCOMES = ("read", "accepted", "duplicate", "rejected", "late")


@dataclass(frozen=True)
class StreamCounts:
    read: int
    accepted: int
    duplicate: int
    rejected: int
    late: int = 0  # only streaming has events beyond the allowed lateness

    @property
    def reconciles(self) -> bool:
        return self.read == self.accepted + self.duplicate + self.rejected + self.late


def stream_counts(counts: dict[tuple[str, str], int]) -> dict[str, StreamCounts]:
    return {stream: StreamCounts(*(counts.get((stream, outcome), 0) for outcome in OUTCOMES))
            for stream in schemas.STREAMS}


def write_manifest(output_dir: str | Path, *, input_dir: str, as_of_us: int | None, window_s: int,
                   counts: dict[tuple[str, str], int], extra: dict | None = None) -> dict:
    streams = stream_counts(counts)
    manifest = {
        "input": str(input_dir),
        "as_of": format_time_us(as_of_us),
        "as_of_us": as_of_us,
        "window_s": window_s,
        "schema_version": schemas.VERSION,
        "streams": {name: {**vars(c), "reconciles": c.reconciles} for name, c in streams.items()},
        "reconciles": all(c.reconciles for c in streams.values()),
        **(extra or {}),
    }
    # Beam's file systems write local paths and, with the gcp extra, gs:// alike.
    with FileSystems.create(manifest_path(output_dir)) as out:
        out.write((json.dumps(manifest, indent=2) + "\n").encode())
    return manifest


def manifest_path(output_dir: str | Path) -> str:
    return f"{str(output_dir).rstrip('/')}/{MANIFEST_FILE}"
