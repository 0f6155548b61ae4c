"""Cutting a long input into event-time chunks, so a backfill's memory follows one chunk.

A run over weeks of telemetry holds every event of the period in memory at
once. With `--chunk_hours`, the run first decodes and validates its new files
once, file by file, as a run's read step does (`decode_input_file`), and files
every event under its chunk of event time (UTC-aligned: 24 h chunks start at
midnight) and its shard of the keys (fleet_goodput/shards.py), in one
staging file per chunk and shard. Records rejected while decoding, and the
count of records read, go with the first chunk's first shard, so that every
record is counted once. The run then computes the chunks one after the
other, each pipeline reading its chunk's files (`ReadDecodedChunk` in
transforms/read.py) and continuing the state the one before staged, and
commits them together as one run. Cutting by event time gives the figures of
one pass (the runs of a store are split-invariant,
tests/test_split_invariance.py); memory then follows one chunk plus the jobs
still open.

With several shards, the files are decoded by as many processes at once (each
a contiguous part of the file list, so the items keep the files' order), and
a big chunk is computed by one process per shard (the run decides which:
fleet_goodput/batch.py). Every chunk also gets a file holding its latest
scheduler event times over all keys, from which every shard finds the same
as-of time for the chunk (fleet_goodput/asof.py).

A chunk file is a sequence of marshalled items, written as files are decoded
and read back in order: marshal is the fastest serialiser for these plain
tuples, and the file lives only as long as the run's staging folder.
"""

from __future__ import annotations

import marshal
import os
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from fleet_goodput.asof import CLOCK_STREAM, latest_times
from fleet_goodput.columnar import decode_input_file
from fleet_goodput.events import pack
from fleet_goodput.shards import Shard, process_context, shard_of
from fleet_goodput.windows import window_start

# The kinds of item in a chunk file.
EVENTS, REJECTED, READ, LATEST = "events", "rejected", "read", "latest"


@dataclass
class Chunk:
    start_us: int | None  # None: a chunk of rejected records only (no event was readable)
    # Per shard, its files of decoded items, read in this order.
    paths: list[list[str]] = field(default_factory=lambda: [[]])
    events: int = 0
    latest_path: str | None = None  # the file of the chunk's latest scheduler event times (a LATEST item)

    def clock(self) -> list[tuple[int, str]]:
        """The chunk's latest and earliest scheduler (time, key) (fleet_goodput/asof.py)."""
        if self.latest_path is None:
            return []
        _, times = next(read_chunk_file(self.latest_path))
        return times

    def files_of(self, shard: Shard | None) -> list[str]:
        """What a pipeline computing `shard` of the chunk reads (every shard's files without one)."""
        own = [path for paths in self.paths for path in paths] if shard is None else self.paths[shard.index]
        return [*own, *([self.latest_path] if self.latest_path else [])]


@dataclass
class _Part:
    """What one process cut: per (chunk start, shard) its file and events, and the chunks' latest scheduler times."""

    files: dict[tuple[int, int], str] = field(default_factory=dict)
    events: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    latest_times: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    extras: str = ""  # the file of rejected records and read counts


def cut_into_chunks(files: list[tuple[str, str]], chunk_us: int, target: Path, accelerators,
                    shards: int = 1) -> list[Chunk]:
    """Decode (stream, path) files into files of items per chunk and shard under `target`;
    the chunks in time order. With several shards, as many processes decode at once."""
    groups = _contiguous_groups(files, shards)
    if len(groups) < 2:
        parts = [_cut(files, chunk_us, target / "part-0", accelerators, shards)]
    else:
        with ProcessPoolExecutor(len(groups), mp_context=process_context()) as pool:
            parts = list(pool.map(_cut, groups, [chunk_us] * len(groups),
                                  [target / f"part-{index}" for index in range(len(groups))],
                                  [accelerators] * len(groups), [shards] * len(groups)))
    return _merge(parts, shards, target)


def _contiguous_groups(files: list[tuple[str, str]], count: int) -> list[list[tuple[str, str]]]:
    """`files` in at most `count` runs of similar size on disk, in order."""
    if count < 2 or len(files) < 2:
        return [files]
    sizes = [os.path.getsize(path) for _, path in files]
    share, groups, size = sum(sizes) / count, [[]], 0
    for item, item_size in zip(files, sizes):
        if size >= share * len(groups) and len(groups) < count:
            groups.append([])
        groups[-1].append(item)
        size += item_size
    return groups


def _cut(files: list[tuple[str, str]], chunk_us: int, target: Path, accelerators, shards: int) -> _Part:
    target.mkdir(parents=True, exist_ok=True)
    part, sinks = _Part(extras=str(target / "decoding.marshal")), {}
    try:
        with open(part.extras, "wb") as extras:
            for stream, path in files:
                try:
                    decoded = decode_input_file(stream, path, accelerators)
                except FileNotFoundError:
                    continue  # gone since it was listed: the run computes again without it (batch.py)
                for row in decoded.rejected:
                    marshal.dump((REJECTED, row), extras)
                marshal.dump((READ, stream, decoded.read), extras)
                for key, batch in decoded.batches.items():
                    shard = shard_of(key, shards)
                    for start_us, batch_part in _by_chunk(batch, chunk_us).items():
                        if (start_us, shard) not in sinks:
                            part.files[start_us, shard] = str(target / f"chunk-{start_us}-{shard}.marshal")
                            sinks[start_us, shard] = open(part.files[start_us, shard], "wb")
                        # Packed as the pipeline carries it, so reading the chunk unpacks nothing.
                        marshal.dump((EVENTS, key, pack(batch_part)), sinks[start_us, shard])
                        part.events[start_us] += len(batch_part)
                        if stream == CLOCK_STREAM:  # the chunk's as-of follows them (_merge)
                            part.latest_times[start_us] = latest_times(
                                part.latest_times.get(start_us, ()), ((event[0], key) for event in batch_part))
    finally:
        for sink in sinks.values():
            sink.close()
    return part


def _merge(parts: list[_Part], shards: int, target: Path) -> list[Chunk]:
    starts = sorted({start for part in parts for start in part.events})
    chunks = []
    for start in starts:
        chunk = Chunk(start, [[part.files[start, shard] for part in parts if (start, shard) in part.files]
                              for shard in range(shards)], sum(part.events.get(start, 0) for part in parts))
        times = latest_times(*(part.latest_times.get(start, ()) for part in parts))
        if times:
            chunk.latest_path = str(target / f"latest-{start}.marshal")
            with open(chunk.latest_path, "wb") as handle:
                marshal.dump((LATEST, times), handle)
        chunks.append(chunk)
    chunks = chunks or [Chunk(None, [[] for _ in range(shards)])]
    chunks[0].paths[0].extend(part.extras for part in parts)
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
