"""Writing telemetry as Avro files of the contract's schemas.

Records are plain dicts with `event_time` in integer microseconds since the
Unix epoch (UTC); fastavro encodes that as `timestamp-micros`.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import fastavro

from fleet_goodput import schemas
from fleet_goodput.telemetry import observed as statement
from fleet_goodput.telemetry import queue_quotas
from fleet_goodput.core.timeutil import micros_of


def write_events(
    path: str | Path,
    stream: str,
    records: Iterable[dict],
    codec: str = "deflate",
    sync_marker: bytes | None = None,
    observed: dict[str, tuple[int, int]] | None = None,
    quotas: list[dict] | None = None,
) -> int:
    """Write `records` of `stream` to `path` atomically; returns how many were written.

    `observed` ({cluster: (from_us, to_us)}) is what the file's source states it observed of each
    cluster (fleet_goodput/telemetry/observed.py): the statement that sets the as-of time. A file of a
    source that knows it should state it; without it the file states nothing. `quotas` are the queue
    quota levels it states (fleet_goodput/telemetry/queue_quotas.py).

    The file appears under its final name only when complete, so a reader
    watching the folder never sees half a file. The Avro sync marker (random
    in fastavro) defaults to one derived from the stream and file name, so the
    same records give byte-identical files.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0

    def counted():  # the records stream into the file, never all held at once
        nonlocal written
        for record in records:
            written += 1
            yield record

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as out:
            marker = sync_marker or hashlib.sha256(f"{stream}:{path.name}".encode()).digest()[:16]
            fastavro.writer(
                out,
                schemas.load(stream),
                counted(),
                codec=codec,
                sync_marker=marker,
                metadata={**statement.metadata(observed), **queue_quotas.metadata(quotas)},
            )
        os.replace(tmp, path)
    except BaseException:  # a full disk, a kill: no partial file is left under any name
        tmp.unlink(missing_ok=True)
        raise
    return written


def telemetry_files(root: str | Path) -> list[Path]:
    """The Avro files of every stream under `root`."""
    return [path for stream in schemas.STREAMS for path in sorted(Path(root, stream).glob("*.avro"))]


def clear_telemetry(root: str | Path, also: tuple[str, ...] = ()) -> None:
    """Remove `root`'s stream folders (and the named siblings), so a new set of
    files cannot mix with an old one's leftovers."""
    for name in (*schemas.STREAMS, *also):
        shutil.rmtree(Path(root, name), ignore_errors=True)


def split_by_time(source: str | Path, boundaries_us: list[int], target: str | Path) -> list[Path]:
    """Cut `source`'s telemetry at `boundaries_us` into consecutive folders
    `target/part-00`, `part-01`, …: part k holds the events with
    boundaries[k-1] < event_time <= boundaries[k] (the last part: the rest).

    How telemetry arrives day by day; used to check that consecutive runs
    give the figures of one run over all of it, and by the benchmarks.
    """
    edges = sorted(boundaries_us)
    parts = [Path(target, f"part-{k:02d}") for k in range(len(edges) + 1)]
    for stream in schemas.STREAMS:
        for path in sorted(Path(source, stream).glob("*.avro")):
            with open(path, "rb") as handle:
                data = handle.read()
            records = list(fastavro.reader(io.BytesIO(data)))
            periods = statement.statement_of(data)
            chunks: list[list[dict]] = [[] for _ in parts]
            for record in records:
                time_us = micros_of(record["event_time"])
                chunks[bisect.bisect_left(edges, time_us)].append(record)
            for number, (part, chunk) in enumerate(zip(parts, chunks)):
                # A part of a stated file states what the whole did, up to the part's end.
                until_us = edges[number] + 1 if number < len(edges) else None
                part_periods = statement.sliced(periods, None, until_us) if periods else None
                if chunk or part_periods:
                    write_events(part / stream / path.name, stream, chunk, observed=part_periods or None)
    return parts
