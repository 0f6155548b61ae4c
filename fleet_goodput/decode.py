"""Decoding Avro telemetry files into validated events, and naming what is bad.

`read_avro_file` turns one file into (key, event) pairs and rejected rows; it
never raises on bad content: a record with impossible values, a file whose
schema does not match the contract, or a truncated file each become rejected
rows with a specific reason, so a run reconciles instead of crashing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import BinaryIO

import fastavro

import schemas
from fleet_goodput.events import PROFILE, Event, make_event

CAPACITY_KEY_PREFIX = "capacity|"
# Telemetry from before this (2000-01-01) is a unit or clock error, not history.
EARLIEST_PLAUSIBLE_US = 946_684_800_000_000


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MICROSECOND = timedelta(microseconds=1)


class Invalid(ValueError):
    """A record that breaks the contract; the message is its rejection reason."""


def capacity_key(cluster: str, accelerator: str) -> str:
    return f"{CAPACITY_KEY_PREFIX}{cluster}|{accelerator}"


def is_capacity_key(key: str) -> bool:
    return key.startswith(CAPACITY_KEY_PREFIX)


def parse_capacity_key(key: str) -> tuple[str, str]:
    cluster, accelerator = key[len(CAPACITY_KEY_PREFIX):].split("|", 1)
    return cluster, accelerator


def rejected_row(stream: str, reason: str, source: str, record: dict | None = None, records: int = 1) -> dict:
    record = record or {}
    event_time = record.get("event_time")
    return {
        "stream": stream,
        "event_id": _text(record.get("event_id")),
        "job_id": _text(record.get("job_id")),
        "event_time_us": event_time if isinstance(event_time, int) else None,
        "type": _text(record.get("type")) or ("PROFILE" if stream == "profiler" and record else None),
        "reason": reason,
        "source": source,
        "records": records,
    }


def _text(value) -> str | None:
    return None if value is None else str(value)


# ---- validation, one function per stream --------------------------------
def _common(record: dict) -> None:
    """Checks every stream shares; also turns `event_time` into integer micros."""
    event_time = record["event_time"]
    if isinstance(event_time, datetime):
        record["event_time"] = (event_time - _EPOCH) // _ONE_MICROSECOND
    if not record.get("event_id"):
        raise Invalid("empty event_id")
    if record["event_time"] < EARLIEST_PLAUSIBLE_US:
        raise Invalid(f"event_time {record['event_time']} µs is before 2000-01-01: not plausible telemetry")


def scheduler_event(record: dict, accelerators) -> tuple[str, Event]:
    _common(record)
    kind, chips = record["type"], record["chips"]
    if record["accelerator"] not in accelerators:
        raise Invalid(f"unknown accelerator {record['accelerator']!r}: not in the accelerator catalogue")
    if chips < 0:
        raise Invalid(f"negative chips ({chips}) on {kind}")
    if kind == "CAPACITY":
        key = capacity_key(record["cluster"], record["accelerator"])
        return key, make_event(record["event_time"], record["event_id"], kind, (chips,))
    if not record.get("job_id"):
        raise Invalid(f"{kind} without a job_id (only CAPACITY may omit it)")
    if kind == "SUBMIT":
        if chips == 0:
            raise Invalid("SUBMIT requesting 0 chips")
        payload = (record["cluster"], record["accelerator"], chips, record.get("workload"), record.get("framework"),
                   record.get("team"), record.get("topology"), record.get("priority"))
    elif kind in ("ALLOCATE", "PREEMPT"):
        payload = (chips,)
    else:
        payload = ()
    return record["job_id"], make_event(record["event_time"], record["event_id"], kind, payload)


def runtime_event(record: dict, accelerators=None) -> tuple[str, Event]:
    _common(record)
    if not record.get("job_id"):
        raise Invalid("runtime event without a job_id")
    step = record.get("step")
    if step is not None and step < 0:
        raise Invalid(f"negative step ({step}) on {record['type']}")
    return record["job_id"], make_event(record["event_time"], record["event_id"], record["type"], (step,))


def profiler_event(record: dict, accelerators=None) -> tuple[str, Event]:
    _common(record)
    if not record.get("job_id"):
        raise Invalid("profiler sample without a job_id")
    for name in ("duration_s", "ideal_flops"):
        value = record[name]
        if not math.isfinite(value) or value <= 0:
            raise Invalid(f"{name} must be a positive finite number, got {value}")
    if record["chips"] <= 0:
        raise Invalid(f"chips must be positive on a profiler sample, got {record['chips']}")
    if record["step"] < 0:
        raise Invalid(f"negative step ({record['step']}) on a profiler sample")
    payload = (record["step"], record["duration_s"], record["chips"], record["ideal_flops"], record["flops_source"])
    return record["job_id"], make_event(record["event_time"], record["event_id"], PROFILE, payload)


VALIDATORS = {"scheduler": scheduler_event, "runtime": runtime_event, "profiler": profiler_event}


# ---- reading a file --------------------------------------------------------
def read_avro_file(stream: str, source: str, handle: BinaryIO, accelerators) -> Iterator[tuple[str, object]]:
    """Yield ("event", (key, event)) and ("rejected", row) for every record of one file.

    Each record read yields exactly one of the two, except what cannot be
    decoded at all: a truncated or corrupt block yields one rejected row whose
    `records` says how many records the block declared (1 when unknowable).
    """
    validate = VALIDATORS[stream]
    try:
        blocks = fastavro.block_reader(handle, reader_schema=schemas.load(stream))
    except Exception as exc:  # noqa: BLE001 - any header failure means the file is unreadable
        yield "rejected", rejected_row(stream, f"not a readable Avro file of the {stream} schema: {exc}", source)
        return
    while True:
        try:
            block = next(blocks)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - a broken block ends what can be read of the file
            yield "rejected", rejected_row(stream, f"truncated or corrupt Avro block after the last good record: {type(exc).__name__}: {exc}", source)
            return
        try:
            records = list(block)
        except fastavro.read.SchemaResolutionError:
            reason = f"written with a schema that does not resolve to the {stream} v1 schema ({_describe(blocks.writer_schema)})"
            yield "rejected", rejected_row(stream, reason, source, records=block.num_records)
            continue
        except Exception as exc:  # noqa: BLE001 - one undecodable block must not end the run
            reason = f"Avro block that does not decode: {type(exc).__name__}: {str(exc)[:200]}"
            yield "rejected", rejected_row(stream, reason, source, records=block.num_records)
            continue
        for record in records:
            try:
                yield "event", validate(record, accelerators)
            except Invalid as exc:
                yield "rejected", rejected_row(stream, str(exc), source, record)


def _describe(writer_schema) -> str:
    """A short account of a foreign writer schema, for a rejection reason."""
    if isinstance(writer_schema, dict) and writer_schema.get("type") == "record":
        fields = ", ".join(field["name"] for field in writer_schema.get("fields", []))
        return f"record {writer_schema.get('name')} with fields {fields}"
    return f"a {type(writer_schema).__name__} schema"


@dataclass
class DecodedFile:
    """One file's events grouped by key (slim tuples), its rejected rows, and
    how many records it held."""

    batches: dict[str, list[tuple]] = field(default_factory=lambda: defaultdict(list))
    rejected: list[dict] = field(default_factory=list)
    read: int = 0


def decode_file(stream: str, source: str, handle: BinaryIO, accelerators) -> DecodedFile:
    decoded = DecodedFile()
    for outcome, value in read_avro_file(stream, source, handle, accelerators):
        if outcome == "event":
            key, event = value
            decoded.batches[key].append(tuple(event))
            decoded.read += 1
        else:
            decoded.read += value["records"]
            decoded.rejected.append(value)
    return decoded
