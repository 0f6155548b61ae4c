"""Decoding Avro telemetry files into validated events, and naming what is bad.

`read_avro_file` turns one file into (key, event) pairs and rejected rows; it
never raises on bad content: a record with impossible values, a record the
contract cannot take, a file whose schema does not match the contract, or a
truncated file each become rejected rows with a specific reason, so a run
reconciles instead of crashing, and good records beside a bad one are kept.

Jobs and capacity share the pipeline's key space: capacity keys start with a
control character, which no accepted `job_id` may hold, so no job can pose as
capacity.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO

import fastavro

from fleet_goodput import schemas
from fleet_goodput.core.asof import CLOCK_STREAM, kept_times, observed_entries
from fleet_goodput.core.config import PRECISIONS
from fleet_goodput.core.events import PROFILE, Event, make_event
from fleet_goodput.core.keys import capacity_key, is_capacity_key
from fleet_goodput.core.timeutil import EPOCH, ONE_MICROSECOND
from fleet_goodput.telemetry import avro_codecs, observed
from fleet_goodput.telemetry.avro_blocks import AvroBlocks, Damage
from fleet_goodput.telemetry.avro_bounds import UnsafeSchema, most_records, records_beyond
from fleet_goodput.telemetry.plausible import (
    EARLIEST_PLAUSIBLE_US,
    LATEST_PLAUSIBLE_US,
    MAX_IDENTIFIER_LENGTH,  # noqa: F401
    Invalid,
    check_identifier,
)

# Every block fastavro decompresses in this process is bounded (a decompression bomb is a damaged block).
avro_codecs.install()

# An event more than a day after the run's wall-clock time may be a clock running ahead, or this
# machine's clock running behind: it is not rejected (a reason that depends on the wall clock
# would be final on a machine whose clock is wrong), but it cannot move the as-of time
# (fleet_goodput/core/asof.py): it waits until later events reach it. A day covers clock skew and a
# local time written as UTC (at most 14 h).
FUTURE_TOLERANCE_US = 86_400_000_000


def rejected_row(stream: str, reason: str, source: str, record: dict | None = None, records: int = 1) -> dict:
    record = record or {}
    return {
        "stream": stream,
        "event_id": _text(record.get("event_id")),
        "job_id": _text(record.get("job_id")),
        "event_time_us": _plausible_time(record.get("event_time")),
        "type": _text(record.get("type")) or ("PROFILE" if stream == "profiler" and record else None),
        "reason": reason,
        "source": source,
        "records": records,
    }


def _plausible_time(event_time) -> int | None:
    """The event time, when it is one a row can be filed under (the reason keeps any other)."""
    if isinstance(event_time, datetime):
        event_time = (event_time - EPOCH) // ONE_MICROSECOND
    if isinstance(event_time, int) and EARLIEST_PLAUSIBLE_US <= event_time < LATEST_PLAUSIBLE_US:
        return event_time
    return None


def _text(value) -> str | None:
    return None if value is None else str(value)


# ---- validation, one function per stream --------------------------------
def _common(record: dict) -> None:
    """Checks every stream shares; also turns `event_time` into integer micros."""
    event_time = record["event_time"]
    if isinstance(event_time, datetime):
        record["event_time"] = (event_time - EPOCH) // ONE_MICROSECOND
    if not record.get("event_id"):
        raise Invalid("empty event_id")
    if record["event_time"] < EARLIEST_PLAUSIBLE_US:
        raise Invalid(f"event_time {record['event_time']} µs is before 2000-01-01: not plausible telemetry")
    if record["event_time"] >= LATEST_PLAUSIBLE_US:
        raise Invalid(f"event_time {record['event_time']} µs is after 2100-01-01: not plausible telemetry")
    if record.get("job_id") is not None:
        check_identifier("job_id", record["job_id"])


def scheduler_event(record: dict, accelerators) -> tuple[str, Event]:
    _common(record)
    kind, chips = record["type"], record["chips"]
    check_identifier("cluster", record["cluster"])
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
        payload = (
            record["cluster"],
            record["accelerator"],
            chips,
            record.get("workload"),
            record.get("framework"),
            record.get("team"),
            record.get("topology"),
            record.get("priority"),
            record.get("queue"),
        )
    elif kind == "ALLOCATE":
        payload = (chips,)
    elif kind == "PREEMPT":
        payload = (chips, _reason(record))
    else:
        payload = (_reason(record),)
    return record["job_id"], make_event(record["event_time"], record["event_id"], kind, payload)


def _reason(record: dict) -> str | None:
    """Why a job was interrupted or ended (the optional `reason`, null in files written before it)."""
    reason = record.get("reason")
    if reason is not None:
        check_identifier("reason", reason)
    return reason


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
    precision = record.get("precision")
    if precision is not None and precision not in PRECISIONS:
        raise Invalid(f"unknown precision {precision!r}: expected one of {', '.join(PRECISIONS)} (or null for bf16)")
    payload = (
        record["step"],
        record["duration_s"],
        record["chips"],
        record["ideal_flops"],
        record["flops_source"],
        precision,
    )
    return record["job_id"], make_event(record["event_time"], record["event_id"], PROFILE, payload)


VALIDATORS = {"scheduler": scheduler_event, "runtime": runtime_event, "profiler": profiler_event}


# ---- reading a file --------------------------------------------------------
def read_avro_file(stream: str, source: str, handle: BinaryIO, accelerators) -> Iterator[tuple[str, object]]:
    """Yield ("event", (key, event)) and ("rejected", row) for every record of one file.

    Each record yields exactly one of the two, except what cannot be decoded
    at all: a damaged stretch of the file yields one rejected row whose
    `records` is the count its block header declares (1, with the reason
    saying so, where that count is unknowable). A block that fastavro cannot
    read as a whole is read again record by record, so one bad record does not
    take its neighbours down with it. No count the file declares is believed
    beyond what its bytes can hold, and a file whose writer schema is unsafe
    to decode (fleet_goodput/telemetry/avro_bounds.py) is refused unread.
    """
    validate = VALIDATORS[stream]
    try:
        blocks = AvroBlocks(handle.read(), schemas.load(stream))
    except UnsafeSchema as exc:
        reason = f"Avro file refused unread: {exc}; the number of records in it is unknowable"
        yield "rejected", rejected_row(stream, reason, source)
        return
    except Exception as exc:  # noqa: BLE001 - any header failure means the file is unreadable
        reason = (
            f"not a readable Avro file of the {stream} schema, so the number of records in it "
            f"is unknowable: {type(exc).__name__}: {str(exc)[:200]}"
        )
        yield "rejected", rejected_row(stream, reason, source)
        return
    for block in blocks:
        if isinstance(block, Damage):
            yield "rejected", rejected_row(stream, block.reason, source, records=block.records or 1)
            continue
        try:
            records = list(block)
        except Exception:  # noqa: BLE001 - some record of the block is bad: find which
            yield from _one_by_one(stream, source, blocks, block, validate, accelerators)
            continue
        for record in records:
            yield _validated(stream, source, record, validate, accelerators)


def _validated(stream: str, source: str, record: dict, validate, accelerators) -> tuple[str, object]:
    try:
        return "event", validate(record, accelerators)
    except Invalid as exc:
        return "rejected", rejected_row(stream, str(exc), source, record)


def _one_by_one(stream: str, source: str, blocks: AvroBlocks, block, validate, accelerators):
    """Read a block that failed as a whole record by record, naming what is wrong with each bad one.

    Records are first read with the writer schema alone and without logical
    types (an `event_time` of 2^62 µs has no datetime), which finds where each
    record's bytes end; each record is then resolved to the contract on its
    own. Only bytes that do not decode even so end the block.
    """
    writer = json.loads(blocks.metadata["avro.schema"])
    plain_writer = fastavro.parse_schema(_plain(writer))
    plain_reader = fastavro.parse_schema(_plain(schemas.schema_json(stream)))
    time_unit = _event_time_unit(writer)
    data = block.bytes_
    data.seek(0)
    for index in range(block.num_records):
        start = data.tell()
        try:
            raw = fastavro.schemaless_reader(data, plain_writer, None)
        except Exception as exc:  # noqa: BLE001 - the rest of the block is unreadable bytes
            reason = (
                f"Avro block whose records {index + 1} to {block.num_records} do not decode: "
                f"{type(exc).__name__}: {str(exc)[:200]}"
            )
            yield _rest_of_block(stream, source, reason, block, index, start, blocks.bounds)
            return
        try:
            record = fastavro.schemaless_reader(
                io.BytesIO(data.getbuffer()[start : data.tell()]), plain_writer, plain_reader
            )
        except Exception:  # noqa: BLE001 - this record does not fit the contract: say how
            problem = contract_violation(raw, schemas.schema_json(stream))
            if problem is None:  # nothing record-specific: the writer schema itself does not resolve
                reason = f"written with a schema that does not resolve to the {stream} v1 schema ({_describe(blocks.writer_schema)})"
                yield _rest_of_block(stream, source, reason, block, index, start, blocks.bounds)
                return
            yield "rejected", rejected_row(stream, problem, source, raw)
            continue
        if isinstance(record.get("event_time"), int):
            record["event_time"] *= time_unit
        yield _validated(stream, source, record, validate, accelerators)


def _rest_of_block(
    stream: str, source: str, reason: str, block, index: int, start: int, bounds: tuple[int, str]
) -> tuple[str, dict]:
    """The rejected row of a `block`'s records from `index` on, whose bytes start at `start` of its
    decompressed data: as many records as the block declares, when those bytes can hold them or,
    the block being compressed, when its bytes in the file can (data that decompressed to
    garbage says nothing of what the block held); else 1, the number being unknowable."""
    record_bytes, codec = bounds
    records, remaining = block.num_records - index, len(block.bytes_.getbuffer()) - start
    room = [(remaining, "null")] + ([(block.size, codec)] if codec != "null" else [])
    available, coded = max(room, key=lambda item: most_records(item[0], record_bytes, item[1]))
    if records > most_records(available, record_bytes, coded):
        reason = (
            f"{reason}; the block declares {records} records from there, "
            f"{records_beyond(available, record_bytes, coded)}, so the number of records lost is unknowable"
        )
        records = 1
    return "rejected", rejected_row(stream, reason, source, records=records)


def _plain(schema):
    """A schema without logical types: values stay the plain longs, ints and bytes written."""
    if isinstance(schema, dict):
        return {key: _plain(value) for key, value in schema.items() if key != "logicalType"}
    if isinstance(schema, list):
        return [_plain(item) for item in schema]
    return schema


def _event_time_unit(writer_schema) -> int:
    """Microseconds per unit of the writer's `event_time` (the contract says micros)."""
    for item in writer_schema.get("fields", []) if isinstance(writer_schema, dict) else []:
        if item["name"] == "event_time" and isinstance(item["type"], dict):
            return 1000 if item["type"].get("logicalType") == "timestamp-millis" else 1
    return 1


def contract_violation(record: dict, contract: dict, missing_is_a_violation: bool = False) -> str | None:
    """The first field of `record` whose value the contract cannot take, as a
    rejection reason; None when every value fits. A required field that is
    missing is a violation of a record given as a dict; in an Avro file it
    is the writer schema that differs, which the caller reports."""
    for item in contract["fields"]:
        name = item["name"]
        if name not in record:
            if "default" in item:
                continue
            return f"{name}: missing, and the contract requires it" if missing_is_a_violation else None
        problem = _value_problem(record[name], item["type"])
        if problem:
            return f"{name}: {problem}"
    return None


def _value_problem(value, avro_type) -> str | None:
    if isinstance(avro_type, list):
        problems = [_value_problem(value, branch) for branch in avro_type]
        if not all(problems):
            return None
        if value is not None:  # say what is wrong with it as the one non-null branch, if there is one
            non_null = [problem for branch, problem in zip(avro_type, problems) if branch != "null"]
            if len(non_null) == 1:
                return non_null[0]
        return f"{value!r} fits none of {_type_names(avro_type)}"
    name = avro_type.get("type") if isinstance(avro_type, dict) else avro_type
    if value is None:
        return None if name == "null" else f"null where the contract requires {_type_names(avro_type)}"
    if name == "enum":
        if value not in avro_type["symbols"]:
            return f"{value!r} is not a symbol of the contract's {avro_type['name']} enum ({', '.join(avro_type['symbols'])})"
        return None
    if (
        isinstance(avro_type, dict)
        and avro_type.get("logicalType", "").startswith("timestamp")
        and isinstance(value, datetime)
    ):
        return None
    expected = {
        "string": str,
        "long": int,
        "int": int,
        "double": (int, float),
        "float": (int, float),
        "boolean": bool,
        "bytes": bytes,
        "null": type(None),
    }.get(name)
    if expected is None or isinstance(value, expected):
        return None
    return f"{value!r} is not a {name}"


def _type_names(avro_type) -> str:
    if isinstance(avro_type, list):
        return " or ".join(_type_names(branch) for branch in avro_type)
    if isinstance(avro_type, dict):
        return avro_type.get("name") or avro_type["type"]
    return avro_type


def _describe(writer_schema) -> str:
    """A short account of a foreign writer schema, for a rejection reason."""
    if isinstance(writer_schema, dict) and writer_schema.get("type") == "record":
        fields = ", ".join(field["name"] for field in writer_schema.get("fields", []))
        return f"record {writer_schema.get('name')} with fields {fields}"
    return f"a {type(writer_schema).__name__} schema"


@dataclass
class DecodedFile:
    """One file's events grouped by key (slim tuples), its rejected rows, how
    many records it held, and, of a scheduler file, the kept times of its
    events and the periods it states it observed (fleet_goodput/core/asof.py,
    fleet_goodput/telemetry/observed.py; runtime and profiler events never move
    the clock, so their files' are not gathered)."""

    batches: dict[str, list[tuple]] = field(default_factory=lambda: defaultdict(list))
    rejected: list[dict] = field(default_factory=list)
    read: int = 0
    kept_times: list[tuple[int, str]] = field(default_factory=list)  # (time, key), then the stated periods
    observed: dict[str, tuple[int, int]] = field(default_factory=dict)  # {cluster: (from_us, to_us)} stated

    def during(self, times: TimeSlice) -> DecodedFile:
        """The same file with only the events `times` holds, and the kept times of those."""
        batches = {
            key: kept
            for key, batch in self.batches.items()
            if (kept := [event for event in batch if times.holds(event[0])])
        }
        periods = observed.sliced(self.observed, times.since_us, times.until_us)
        # A file without kept times (not a scheduler file's, or none before the horizon) has none in a slice.
        latest = (
            clock_sample((event[0], key) for key, batch in batches.items() for event in batch) + clock_periods(periods)
            if self.kept_times
            else []
        )
        return DecodedFile(batches, self.rejected, self.read, latest, periods)


@dataclass(frozen=True)
class TimeSlice:
    """The events at or after `since_us` and before `until_us` (None: no bound): a backfill's chunk of
    event time (fleet_goodput/runs/compute.py). Every file has a share in every chunk; only the first reports
    what belongs to no time (records rejected while decoding, records read), so each is counted once."""

    since_us: int | None = None
    until_us: int | None = None
    first: bool = True

    def holds(self, time_us: int) -> bool:
        return (self.since_us is None or time_us >= self.since_us) and (
            self.until_us is None or time_us < self.until_us
        )


def clock_horizon_us() -> int:
    """The latest event time that may set the scheduler's clock: later ones could drag the as-of
    time into the future (FUTURE_TOLERANCE_US)."""
    return time.time_ns() // 1000 + FUTURE_TOLERANCE_US


def clock_sample(times_and_keys) -> list[tuple[int, str]]:
    """The (time, key) a file gives the scheduler's clock (fleet_goodput/core/asof.py), none past the horizon."""
    horizon_us = clock_horizon_us()
    return kept_times(item for item in times_and_keys if item[0] <= horizon_us)


def clock_periods(periods: dict[str, tuple[int, int]]) -> list[tuple[int, str]]:
    """The kept-times entries of a file's stated periods, none ending past the horizon (a clock ahead)."""
    horizon_us = clock_horizon_us()
    return observed_entries({cluster: period for cluster, period in periods.items() if period[1] <= horizon_us})


def decode_file(stream: str, source: str, handle: BinaryIO, accelerators) -> DecodedFile:
    decoded = DecodedFile()
    data = handle.read()
    for outcome, value in read_avro_file(stream, source, io.BytesIO(data), accelerators):
        if outcome == "event":
            key, event = value
            decoded.batches[key].append(tuple(event))
            decoded.read += 1
        else:
            decoded.read += value["records"]
            decoded.rejected.append(value)
    if stream == CLOCK_STREAM:
        _hold_to_statement(decoded, data, source)
        decoded.kept_times = clock_sample(
            (event[0], key) for key, batch in decoded.batches.items() for event in batch
        ) + clock_periods(decoded.observed)
    return decoded


def _hold_to_statement(decoded: DecodedFile, data: bytes, source: str) -> None:
    """Hold a scheduler file's events to the periods its header states (fleet_goodput/telemetry/observed.py).
    A file whose statement is malformed has every event rejected with the reason: the periods would set
    the as-of time, and a guess in their place could move it anywhere."""
    try:
        periods = observed.statement_of(data)
    except observed.BadStatement as exc:
        reason = f"the file's statement of what it observed is malformed: {exc}; its events are not read"
        decoded.rejected += [
            observed.event_row(CLOCK_STREAM, source, None if is_capacity_key(key) else key, event, reason)
            for key, batch in decoded.batches.items()
            for event in batch
        ]
        decoded.batches.clear()
        return
    except Exception:  # noqa: BLE001 - an unreadable header: read_avro_file has rejected the file already
        return
    if periods:
        decoded.observed = periods
        decoded.rejected += observed.apply_statement(decoded.batches, periods, CLOCK_STREAM, source)
