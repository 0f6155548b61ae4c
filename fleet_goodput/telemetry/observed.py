"""What a telemetry file says its source observed: per cluster, the period it looked at.

A source states, with the telemetry itself, the interval it observed of each
cluster: from when it began looking (a collector's first poll, a watch's
start, the first record of an imported history) to how far it is complete (a
poll's time less the collector's hold-back, a watch's latest heartbeat, the
end of a finished log or dump). The statement is the Avro file's metadata
entry `fleet_goodput.observed`, a JSON object {cluster: [from_us, to_us]} in
microseconds since the Unix epoch, so the files alone say it and a copy of
them says the same; a file without it states nothing (every file written
before the rule).

What a statement changes, file by file, so that however files are cut or
run, the same events are moved or set aside (docs/metric.md, "Time and the
as-of time"):
- a CAPACITY level dated before its cluster's `from` holds from `from` on:
  the source saw that level when it began looking, and no capacity is
  counted where nobody looked;
- a scheduler event dated after its cluster's `to` is a clock error (a host
  writing local time as UTC, a clock ahead) and is rejected with that
  reason: it moves nothing and is counted;
- the stated periods, not the events' times, set the run's as-of time
  (fleet_goodput/core/asof.py).
"""

from __future__ import annotations

import io
import json
import math
from typing import BinaryIO

import fastavro
from fastavro.read import HEADER_SCHEMA

from fleet_goodput.core.events import make_event
from fleet_goodput.core.keys import is_capacity_key, parse_capacity_key
from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.telemetry.plausible import EARLIEST_PLAUSIBLE_US, LATEST_PLAUSIBLE_US, Invalid, check_identifier

META_KEY = "fleet_goodput.observed"
# Statements name at most this many clusters: a header is read whole, and no source watches more.
MAX_CLUSTERS = 10_000


class BadStatement(ValueError):
    """A file's `fleet_goodput.observed` entry that is not a valid statement; the message says why."""


def metadata(periods: dict[str, tuple[int, int]] | None) -> dict[str, str]:
    """The Avro metadata that states `periods` ({cluster: (from_us, to_us)}); none for None."""
    if periods is None:
        return {}
    checked = check_periods({cluster: list(period) for cluster, period in periods.items()})
    return {
        META_KEY: json.dumps(
            {cluster: [from_us, to_us] for cluster, (from_us, to_us) in checked.items()}, sort_keys=True
        )
    }


def header_meta(source: bytes | BinaryIO) -> dict[str, bytes]:
    """An Avro file's metadata, from the file's bytes or an open file (of which only the header is read);
    whatever fastavro raises for an unreadable header."""
    return fastavro.schemaless_reader(io.BytesIO(source) if isinstance(source, bytes) else source, HEADER_SCHEMA)[
        "meta"
    ]


def statement_of(source: bytes | BinaryIO) -> dict[str, tuple[int, int]] | None:
    """The periods an Avro file's header states (None: it states nothing), from the file's bytes or an
    open file (of which only the header is read). Raises BadStatement for a malformed entry, and whatever
    fastavro raises for an unreadable header (the decoder reports that)."""
    return statement_in(header_meta(source))


def statement_in(meta: dict[str, bytes]) -> dict[str, tuple[int, int]] | None:
    """The periods a header's metadata (`header_meta`) states; None: it states nothing."""
    raw = meta.get(META_KEY)
    if raw is None:
        return None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadStatement(f"its {META_KEY} metadata is not JSON ({exc})") from None
    return check_periods(value)


def check_periods(value) -> dict[str, tuple[int, int]]:
    """A statement's periods, checked: {cluster: (from_us, to_us)} with from <= to, plausible times."""
    if not isinstance(value, dict) or not value:
        raise BadStatement(f"its {META_KEY} metadata is not an object of clusters: {str(value)[:80]!r}")
    if len(value) > MAX_CLUSTERS:
        raise BadStatement(f"its {META_KEY} metadata names {len(value):,} clusters, more than {MAX_CLUSTERS:,}")
    periods = {}
    for cluster, period in value.items():
        try:
            if not cluster:
                raise Invalid("an empty cluster name")
            check_identifier("cluster", cluster)
        except Invalid as exc:
            raise BadStatement(f"its {META_KEY} metadata names a bad cluster: {exc}") from None
        if (
            not isinstance(period, list)
            or len(period) != 2
            or not all(isinstance(t, int) and not isinstance(t, bool) for t in period)
        ):
            raise BadStatement(
                f"its {META_KEY} metadata gives cluster {cluster!r} {str(period)[:80]!r}, "
                "not [from_us, to_us] in integer microseconds"
            )
        from_us, to_us = period
        if not EARLIEST_PLAUSIBLE_US <= from_us <= to_us < LATEST_PLAUSIBLE_US:
            raise BadStatement(
                f"its {META_KEY} metadata gives cluster {cluster!r} an impossible period "
                f"[{from_us}, {to_us}] (from after to, or before 2000 or from 2100 on)"
            )
        periods[cluster] = (from_us, to_us)
    return dict(sorted(periods.items()))


def apply_statement(
    batches: dict[str, list[tuple]], periods: dict[str, tuple[int, int]], stream: str, source: str
) -> list[dict]:
    """Hold `batches` (a scheduler file's events by key) to the file's stated `periods`, in place:
    CAPACITY levels before their cluster's start move to it, events after their cluster's end are taken
    out. Returns the rejected rows of those taken out. A job's cluster is its SUBMIT's in the file; a
    job without one there is held to the latest end the file states."""
    latest_end = max(to_us for _, to_us in periods.values())
    rejected = []
    for key, batch in list(batches.items()):
        if is_capacity_key(key):
            cluster = parse_capacity_key(key)[0]
            job_id = None
        else:
            cluster = next((event[4][0] for event in batch if event[3] == "SUBMIT"), None)
            job_id = key
        period = periods.get(cluster)
        from_us, to_us = period if period else (None, latest_end)
        # Of the levels before the start, the latest is the one that held then; the others it superseded.
        early = [event for event in batch if from_us is not None and event[0] < from_us and event[3] == "CAPACITY"]
        holding = max(early, key=lambda event: event[:3]) if early else None
        kept = []
        for event in batch:
            if event[0] > to_us:
                rejected.append(past_end_row(stream, source, job_id, event, cluster if period else None, to_us))
            elif event is holding:
                kept.append(tuple(make_event(from_us, event[2], event[3], tuple(event[4]))))
            elif early and event in early:
                rejected.append(
                    event_row(
                        stream,
                        source,
                        job_id,
                        event,
                        (
                            f"a capacity level superseded before the period its file states cluster {cluster} observed "
                            f"began ({format_time_us(from_us)}): the later level holds there; no figure rests on it"
                        ),
                    )
                )
            else:
                kept.append(event)
        if kept:
            batches[key] = kept
        else:
            del batches[key]
    return rejected


def past_end_row(stream: str, source: str, job_id: str | None, event: tuple, cluster: str | None, to_us: int) -> dict:
    ahead = (event[0] - to_us) / 3.6e9
    whose = f"cluster {cluster}'s" if cluster else "its"
    return event_row(
        stream,
        source,
        job_id,
        event,
        (
            f"dated {_hours(ahead)} after the end of {whose} period its file states it observed "
            f"({format_time_us(to_us)}): a clock ahead (local time written as UTC?); no figure rests on it"
        ),
    )


def event_row(stream: str, source: str, job_id: str | None, event: tuple, reason: str) -> dict:
    """A `rejected` row of a decoded event tuple."""
    return {
        "stream": stream,
        "event_id": event[2],
        "job_id": job_id,
        "event_time_us": event[0],
        "type": event[3],
        "reason": reason,
        "source": source,
        "records": 1,
    }


def union(*statements: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Periods stated by several files: each cluster from its earliest start to its latest end."""
    periods: dict[str, tuple[int, int]] = {}
    for statement in statements:
        for cluster, (from_us, to_us) in statement.items():
            known = periods.get(cluster)
            periods[cluster] = (from_us, to_us) if known is None else (min(known[0], from_us), max(known[1], to_us))
    return dict(sorted(periods.items()))


def _hours(hours: float) -> str:
    if hours >= 48:
        return f"{hours / 24:,.0f} days"
    if hours >= 1:
        return f"{hours:,.1f} h"
    return f"{max(math.ceil(hours * 3600), 1):,} s"


def sliced(periods: dict[str, tuple[int, int]], since_us: int | None, until_us: int | None) -> dict:
    """What a slice of a stated file, its events at or after `since_us` and before `until_us`, states: each
    cluster observed by then, up to the slice's end at most. A slice of the periods a whole file states
    gives the same as-of time in its last slice, and never more in an earlier one."""
    del since_us  # a cluster observed before a slice stays stated in it: the fleet is complete only to its end
    if until_us is None:
        return dict(periods)
    return {
        cluster: (from_us, min(to_us, until_us - 1))
        for cluster, (from_us, to_us) in periods.items()
        if from_us < until_us
    }
