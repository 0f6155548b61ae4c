"""Cutting a long input into event-time chunks, so a backfill's memory follows one chunk.

A run over weeks of telemetry holds every event of the period in memory at
once. With `--chunk_hours`, the run first copies its new files into one
folder per chunk of event time (UTC-aligned: 24 h chunks start at midnight),
record by record, then computes the chunks one after the other, each
continuing the state the one before staged, and commits them together as one
run. Cutting by event time gives the figures of one pass (the runs of a store
are split-invariant, tests/test_split_invariance.py); memory then follows one
chunk plus the jobs still open.

A file that cannot be read whole is not cut: it goes to the first chunk as it
is, where decoding names what is wrong with it, as in any run.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import fastavro

from fleet_goodput import schemas
from fleet_goodput.timeutil import micros_of
from fleet_goodput.windows import window_start


@dataclass
class Chunk:
    start_us: int
    folder: Path
    files: dict[str, list[str]] = field(default_factory=dict)  # stream -> paths


def cut_into_chunks(files: list[tuple[str, str]], chunk_us: int, target: Path) -> list[Chunk]:
    """Copy (stream, path) files into chunk folders under `target`; returns the chunks in time order."""
    chunks: dict[int, Chunk] = {}
    unreadable: list[tuple[str, str]] = []
    for number, (stream, path) in enumerate(files):
        name = f"{number:05d}-{Path(path).name}"
        if not _cut_file(stream, path, name, chunk_us, target, chunks):
            unreadable.append((stream, path))
    ordered = [chunks[start] for start in sorted(chunks)]
    if unreadable:
        first = ordered[0] if ordered else chunks.setdefault(0, Chunk(0, target / "chunk-unreadable"))
        ordered = ordered or [first]
        for stream, path in unreadable:
            destination = first.folder / stream / f"unreadable-{Path(path).name}"
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
            first.files.setdefault(stream, []).append(str(destination))
    return ordered


def _cut_file(stream: str, path: str, name: str, chunk_us: int, target: Path, chunks: dict[int, Chunk]) -> bool:
    """Write `path`'s records into their chunks; False (and nothing written) when it cannot be read whole."""
    schema = schemas.load(stream)
    writers: dict[int, tuple] = {}
    try:
        with open(path, "rb") as handle:
            for record in fastavro.reader(handle, reader_schema=schema):
                start = window_start(micros_of(record["event_time"]), chunk_us)
                if start not in writers:
                    out = target / f"chunk-{start}" / stream / name
                    out.parent.mkdir(parents=True, exist_ok=True)
                    sink = open(out, "wb")
                    writers[start] = (out, sink, fastavro.write.Writer(sink, schema, codec="deflate"))
                writers[start][2].write(record)
    except Exception:  # noqa: BLE001 - any decoding failure: the reference path names it
        for out, sink, _ in writers.values():
            sink.close()
            out.unlink(missing_ok=True)
        return False
    for start, (out, sink, writer) in writers.items():
        writer.flush()
        sink.close()
        chunk = chunks.setdefault(start, Chunk(start, target / f"chunk-{start}"))
        chunk.files.setdefault(stream, []).append(str(out))
    return True
