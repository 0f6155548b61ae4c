"""Cutting a long input into event-time chunks, so a backfill's memory follows one chunk.

A run over weeks of telemetry holds every event of the period in memory at
once. With `--chunk_hours`, the run first decodes and validates its new files
once, file by file, as a run's read step does (`decode_file_fast`), and files
every event under its chunk of event time (UTC-aligned: 24 h chunks start at
midnight) in one staging file per chunk. Records rejected while decoding,
and the count of records read, go with the first chunk, so that every record
is counted once. The run then computes the chunks one after the other, each
pipeline reading its chunk's file (`ReadDecodedChunk` in transforms/read.py)
and continuing the state the one before staged, and commits them together
as one run. Cutting by event time gives the figures of one pass (the runs of
a store are split-invariant, tests/test_split_invariance.py); memory then
follows one chunk plus the jobs still open.

A chunk file is a sequence of marshalled items, written as files are decoded
and read back in order: marshal is the fastest serialiser for these plain
tuples, and the file lives only as long as the run's staging folder.
"""

from __future__ import annotations

import marshal
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fleet_goodput.columnar import decode_file_fast
from fleet_goodput.events import pack
from fleet_goodput.windows import window_start

EVENTS, REJECTED, READ = "events", "rejected", "read"  # the kinds of item in a chunk file


@dataclass
class Chunk:
    start_us: int | None  # None: a chunk of rejected records only (no event was readable)
    paths: list[str] = field(default_factory=list)  # its files of decoded items, read in this order
    events: int = 0


def cut_into_chunks(files: list[tuple[str, str]], chunk_us: int, target: Path, accelerators) -> list[Chunk]:
    """Decode (stream, path) files into one file of items per chunk under `target`; the chunks in time order."""
    target.mkdir(parents=True, exist_ok=True)
    sinks: dict[int, object] = {}
    events: dict[int, int] = defaultdict(int)
    extras_path = target / "decoding.marshal"  # rejected records and read counts
    try:
        with open(extras_path, "wb") as extras:
            for stream, path in files:
                with open(path, "rb") as handle:
                    decoded = decode_file_fast(stream, path, handle, accelerators)
                for row in decoded.rejected:
                    marshal.dump((REJECTED, row), extras)
                marshal.dump((READ, stream, decoded.read), extras)
                for key, batch in decoded.batches.items():
                    for start_us, batch_part in _by_chunk(batch, chunk_us).items():
                        if start_us not in sinks:
                            sinks[start_us] = open(target / f"chunk-{start_us}.marshal", "wb")
                        # Packed as the pipeline carries it, so reading the chunk unpacks nothing.
                        marshal.dump((EVENTS, key, pack(batch_part)), sinks[start_us])
                        events[start_us] += len(batch_part)
    finally:
        for sink in sinks.values():
            sink.close()
    chunks = [Chunk(start, [str(target / f"chunk-{start}.marshal")], events[start]) for start in sorted(sinks)]
    chunks = chunks or [Chunk(None)]
    chunks[0].paths.append(str(extras_path))
    return chunks


def _by_chunk(batch: list[tuple], chunk_us: int) -> dict[int, list[tuple]]:
    chunks = defaultdict(list)
    for event in batch:  # an event tuple starts with its time
        chunks[window_start(event[0], chunk_us)].append(event)
    return chunks


def read_chunk_file(path: str) -> Iterator[tuple]:
    """The items `cut_into_chunks` wrote to `path`, in order."""
    with open(path, "rb") as handle:
        while True:
            try:
                yield marshal.load(handle)
            except EOFError:
                return
