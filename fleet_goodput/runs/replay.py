"""Replaying recorded telemetry into a watched folder, at N times real time.

Events are cut into event-time slices (five minutes by default) and each
slice is written as one Avro file per stream, in order, sleeping between
slices so that event time passes `speed` times faster than the wall clock.
`mpg stream --input` on the same folder then sees a fleet live.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import fastavro

from fleet_goodput import schemas
from fleet_goodput.core.timeutil import micros_of
from fleet_goodput.telemetry.avro_io import write_events


def load_slices(source: str | Path, slice_s: int) -> dict[int, dict[str, list[dict]]]:
    """slice start (µs) → stream → records, from SOURCE/<stream>/*.avro."""
    slices: dict[int, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    slice_us = slice_s * 1_000_000
    for stream in schemas.STREAMS:
        for path in sorted(Path(source, stream).glob("*.avro")):
            with open(path, "rb") as handle:
                for record in fastavro.reader(handle):
                    time_us = micros_of(record["event_time"])
                    slices[time_us - time_us % slice_us][stream].append({**record, "event_time": time_us})
    return slices


def replay(source: str | Path, target: str | Path, speed: float, slice_s: int = 300,
           report: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> int:
    """Write SOURCE's events into TARGET slice by slice; returns the events written.

    `speed` is how many seconds of event time pass per wall-clock second
    (0 means as fast as possible). Slice k is written `(start_k - start_0) /
    speed` wall seconds after the first: the schedule runs on the clock, so
    the time spent writing does not slow the replay below `speed` (with a
    fixed sleep after each write, 6 h of a fleet in one-minute slices at 1000x
    took 25.3 s instead of 21.6), and a stretch of event time without events
    takes its wall time too.
    """
    slices = load_slices(source, slice_s)
    starts = sorted(slices)
    began = clock()
    written = 0
    for n, start_us in enumerate(starts):
        if speed > 0:
            due = began + (start_us - starts[0]) / 1e6 / speed
            if (wait := due - clock()) > 0:
                sleep(wait)
        for stream, records in sorted(slices[start_us].items()):
            records.sort(key=lambda record: record["event_time"])
            written += write_events(Path(target, stream, f"replay-{n:06d}.avro"), stream, records)
        stamp = datetime.fromtimestamp(start_us / 1e6, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
        report(f"replayed slice {n + 1}/{len(slices)} ({stamp} UTC): {written:,} events so far")
    return written
