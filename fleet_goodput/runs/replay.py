"""Replaying recorded telemetry into a watched folder, at N times real time.

Events are cut into event-time slices (five minutes by default) and each
slice is written as one Avro file per stream, in order, sleeping between
slices so that event time passes `speed` times faster than the wall clock.
`mpg stream --input` on the same folder then sees a fleet live.
"""

from __future__ import annotations

import io
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import fastavro

from fleet_goodput import schemas
from fleet_goodput.core.timeutil import micros_of
from fleet_goodput.telemetry import observed
from fleet_goodput.telemetry.avro_io import write_events


def load_slices(source: str | Path, slice_s: int) -> dict[int, dict[str, list[dict]]]:
    """slice start (µs) → stream → records, from SOURCE/<stream>/*.avro."""
    return _load(source, slice_s)[0]


def _load(source: str | Path, slice_s: int) -> tuple[dict[int, dict[str, list[dict]]], dict[str, tuple[int, int]]]:
    """`load_slices`, and the periods SOURCE's files state they observed (fleet_goodput/telemetry/observed.py)."""
    slices: dict[int, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    slice_us = slice_s * 1_000_000
    stated = []
    for stream in schemas.STREAMS:
        for path in sorted(Path(source, stream).glob("*.avro")):
            data = path.read_bytes()
            stated.append(observed.statement_of(data) or {})
            for record in fastavro.reader(io.BytesIO(data)):
                time_us = micros_of(record["event_time"])
                slices[time_us - time_us % slice_us][stream].append({**record, "event_time": time_us})
    return slices, observed.union(*stated)


def replay(
    source: str | Path,
    target: str | Path,
    speed: float,
    slice_s: int = 300,
    report: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Write SOURCE's events into TARGET slice by slice; returns the events written.

    `speed` is how many seconds of event time pass per wall-clock second
    (0 means as fast as possible). Slice k is written `(start_k - start_0) /
    speed` wall seconds after the first: the schedule runs on the clock, so
    the time spent writing does not slow the replay below `speed` (with a
    fixed sleep after each write, 6 h of a fleet in one-minute slices at 1000x
    took 25.3 s instead of 21.6), and a stretch of event time without events
    takes its wall time too.
    """
    slices, periods = _load(source, slice_s)
    starts = sorted(slices)
    began = clock()
    written = 0
    for n, start_us in enumerate(starts):
        if speed > 0:
            due = began + (start_us - starts[0]) / 1e6 / speed
            if (wait := due - clock()) > 0:
                sleep(wait)
        # A stated source's replay states, slice by slice, what it has observed by the slice's end.
        stating = observed.sliced(periods, None, start_us + slice_s * 1_000_000)
        streams = {**({"scheduler": []} if stating else {}), **slices[start_us]}
        for stream, records in sorted(streams.items()):
            records.sort(key=lambda record: record["event_time"])
            written += write_events(
                Path(target, stream, f"replay-{n:06d}.avro"),
                stream,
                records,
                observed=(stating or None) if stream == "scheduler" else None,
            )
        stamp = datetime.fromtimestamp(start_us / 1e6, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
        report(f"replayed slice {n + 1}/{len(slices)} ({stamp} UTC): {written:,} events so far")
    return written
