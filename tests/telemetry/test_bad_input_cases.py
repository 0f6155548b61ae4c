"""Hostile and careless input, case by case (issue 10): each case a crafted Avro file.

Every case owns a prefix (`c01`, …): its good job is the worked example of
docs/metric.md section 4 under job id `c01`, on its own cluster `c01` with its own
CAPACITY, and its bad records carry ids starting `c01-`. All cases' files
go into ONE input folder and one `mpg run` (one pipeline run keeps the suite
fast); a clean run of the worked example alone is the baseline. For every case:

- the rejected rows it caused (by event id or file name) are exactly the
  expected ones, each with its specific reason and record count;
- its good job's `job_window` rows equal the clean run's, to the last bit;
- and over all cases, the manifest's `read` equals the TRUE number of records
  written to the files, and every stream reconciles.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import fastavro
import pytest

from fleet_goodput import schemas
import hostile_avro
import worked_example
from fleet_goodput.report.headline import fleet_totals, render
from fleet_goodput.sql import view_sql
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_blocks import read_long
from fleet_goodput.telemetry.decode import contract_violation

T0 = worked_example.T0_US
SECOND = 1_000_000
YEAR_9999_US = 253_402_300_799_000_000


# ---- crafting files ----------------------------------------------------------
def good_records(prefix: str) -> dict[str, list[dict]]:
    """The worked example as job `prefix` on cluster `prefix`, with its CAPACITY."""
    out = {}
    for stream, records in worked_example.records().items():
        out[stream] = []
        for record in records:
            record = {**record, "event_id": f"{prefix}-{record['event_id']}"}
            if record.get("job_id"):
                record["job_id"] = prefix
            if stream == "scheduler":
                record["cluster"] = prefix
            out[stream].append(record)
    return out


def schema_json(stream: str) -> dict:
    return copy.deepcopy(schemas.schema_json(stream))


def with_field_type(stream: str, name: str, avro_type) -> dict:
    schema = schema_json(stream)
    next(f for f in schema["fields"] if f["name"] == name)["type"] = avro_type
    return schema


def with_symbol(stream: str, name: str, symbol: str) -> dict:
    schema = schema_json(stream)
    avro_type = next(f for f in schema["fields"] if f["name"] == name)["type"]
    enum = next(t for t in avro_type if isinstance(t, dict)) if isinstance(avro_type, list) else avro_type
    enum["symbols"].append(symbol)
    return schema


def avro_bytes(
    stream: str, records: list[dict], schema: dict | None = None, codec: str = "deflate", sync_interval: int = 16000
) -> bytes:
    buffer = io.BytesIO()
    fastavro.writer(
        buffer, fastavro.parse_schema(schema or schema_json(stream)), records, codec=codec, sync_interval=sync_interval
    )
    return buffer.getvalue()


class Input:
    """The combined input folder; counts every record written, the truth the manifest must match."""

    def __init__(self, root: Path):
        self.root = root
        self.true_records = {stream: 0 for stream in schemas.STREAMS}
        self.countable = {stream: 0 for stream in schemas.STREAMS}

    def write(
        self, prefix: str, name: str, stream: str, data: bytes, records: int, countable: int | None = None
    ) -> None:
        """`countable`: what the pipeline can know of `records`, where a damaged
        stretch's count is unknowable (it then counts the stretch as 1)."""
        path = self.root / stream / f"{prefix}-{name}.avro"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.true_records[stream] += records
        self.countable[stream] += records if countable is None else countable

    def special(self, prefix: str, name: str, stream: str, make: Callable[[Path], None]) -> None:
        """A `*.avro` that `make` creates as something other than a regular file (one unknowable row)."""
        path = self.root / stream / f"{prefix}-{name}.avro"
        path.parent.mkdir(parents=True, exist_ok=True)
        make(path)
        self.countable[stream] += 1

    def records(self, prefix: str, name: str, stream: str, records: list[dict], **options) -> None:
        self.write(prefix, name, stream, avro_bytes(stream, records, **options), len(records))

    def good_job(self, prefix: str, skip: tuple[str, ...] = ()) -> dict[str, list[dict]]:
        """Write the case's good job, each stream in its own file, except `skip`; returns its records."""
        records = good_records(prefix)
        for stream, stream_records in records.items():
            if stream not in skip:
                self.records(prefix, "good", stream, stream_records)
        return records


def insert_middle(records: list[dict], bad: dict) -> list[dict]:
    middle = len(records) // 2
    return records[:middle] + [bad] + records[middle:]


def scheduler(prefix: str, event: str, kind: str, seconds: float, **fields) -> dict:
    return {
        "event_id": f"{prefix}-{event}",
        "event_time": T0 + int(seconds * SECOND),
        "job_id": f"{prefix}-bad",
        "type": kind,
        "cluster": prefix,
        "accelerator": "tpu-v5e",
        "chips": 1,
        "workload": "TRAINING",
        "framework": None,
        "team": None,
        "topology": None,
        "priority": None,
        **fields,
    }


def runtime(prefix: str, event: str, kind: str, seconds: float, **fields) -> dict:
    return {
        "event_id": f"{prefix}-{event}",
        "event_time": T0 + int(seconds * SECOND),
        "job_id": prefix,
        "type": kind,
        "step": None,
        "attempt": None,
        **fields,
    }


def profile(prefix: str, event: str, seconds: float, **fields) -> dict:
    return {
        "event_id": f"{prefix}-{event}",
        "event_time": T0 + int(seconds * SECOND),
        "job_id": prefix,
        "step": 5,
        "duration_s": 10.0,
        "chips": 8,
        "ideal_flops": 7.88e15,
        "flops_source": "ANALYTIC",
        "bytes_accessed": None,
        **fields,
    }


# ---- the cases ----------------------------------------------------------------
@dataclass
class Case:
    name: str
    build: Callable[[Input, str], None]
    # (event id without the prefix, or None for a file-level row; reason regex; records)
    rejected: list[tuple[str | None, str, int]] = field(default_factory=list)


def bad_record_in_a_block(stream: str, bad: Callable[[str], dict], schema: Callable[[], dict] | None = None):
    """The good job's records of `stream` with one bad record in the middle of the same block."""

    def build(given: Input, prefix: str) -> None:
        records = given.good_job(prefix, skip=(stream,))
        given.records(
            prefix, "block", stream, insert_middle(records[stream], bad(prefix)), schema=schema() if schema else None
        )

    return build


def good_job_with(extra_stream: str, *extra: Callable[[str], dict], name: str = "extra"):
    """The good job, plus a file of further records."""

    def build(given: Input, prefix: str) -> None:
        given.good_job(prefix)
        given.records(prefix, name, extra_stream, [make(prefix) for make in extra])

    return build


def bad_job(*events: Callable[[str], dict]):
    """The good job, plus a one-chip job `<prefix>-bad` whose scheduler events are `events`."""
    return good_job_with("scheduler", lambda p: scheduler(p, "submit", "SUBMIT", 0), *events)


def in_codec(codec: str):
    def build(given: Input, prefix: str) -> None:
        for stream, records in good_records(prefix).items():
            given.records(prefix, codec, stream, records, codec=codec)

    return build


def damaged(cut: Callable[[bytes], bytes], unknowable: bool = False):
    """The good job, plus a redelivered copy of its 14 runtime records in
    blocks of 4, 4, 4, 2 (as fastavro reads the undamaged file), damaged by `cut`."""

    def build(given: Input, prefix: str) -> None:
        records = given.good_job(prefix)
        data = avro_bytes("runtime", records["runtime"], codec="deflate", sync_interval=100)
        assert [block.num_records for block in fastavro.block_reader(io.BytesIO(data))] == [4, 4, 4, 2]
        given.write(prefix, "damaged", "runtime", cut(data), 14, countable=14 - 4 + 1 if unknowable else None)

    return build


def _block_starts(data: bytes) -> list[int]:
    return [block.offset for block in fastavro.block_reader(io.BytesIO(data))]


def corrupt_second_block_data(data: bytes) -> bytes:
    start = _block_starts(data)[1]
    out = bytearray(data)
    for i in range(start + 4, start + 24):
        out[i] ^= 0xA5
    return bytes(out)


def corrupt_second_block_codec(data: bytes) -> bytes:
    """Overwrite the second block's compressed bytes (after its count and size) with 0xFF, which deflate rejects."""
    start, end = _block_starts(data)[1:3]
    _, after_count = read_long(data, start)
    _, data_start = read_long(data, after_count)
    out = bytearray(data)
    out[data_start : end - 16] = b"\xff" * (end - 16 - data_start)
    return bytes(out)


def corrupt_second_block_header(data: bytes) -> bytes:
    start = _block_starts(data)[1]
    out = bytearray(data)
    out[start : start + 2] = b"\xff\x7f"  # a count of -8192 records
    return bytes(out)


def raw_file(data: bytes, stream: str = "runtime"):
    """The good job, plus a file of `data` that holds no readable record (counted as one unknowable row)."""

    def build(given: Input, prefix: str) -> None:
        given.good_job(prefix)
        given.write(prefix, "raw", stream, data, 0, countable=1)

    return build


def hostile(build: Callable[[dict], bytes], records: int, countable: int):
    """The good job, plus a file `build` crafts around a redelivered copy of its first runtime record
    (tests/hostile_avro.py): `records` truly written, `countable` the pipeline can know of."""

    def build_case(given: Input, prefix: str) -> None:
        good = given.good_job(prefix)
        given.write(prefix, "hostile", "runtime", build(good["runtime"][0]), records, countable=countable)

    return build_case


def not_a_file(make: Callable[[Path], None]):
    """The good job, plus a runtime `*.avro` that `make` creates as a pipe, a device or a link to one."""

    def build(given: Input, prefix: str) -> None:
        given.good_job(prefix)
        given.special(prefix, "special", "runtime", make)

    return build


def link_to_nothing(given: Input, prefix: str) -> None:
    """The good job, plus a runtime `*.avro` linking to nothing: not listed, as a deleted file is not
    (it holds nothing), and no crash where the run sizes its input."""
    given.good_job(prefix)
    (given.root / "runtime" / f"{prefix}-gone.avro").symlink_to("/nonexistent/telemetry.avro")


def foreign_schema(given: Input, prefix: str) -> None:
    given.good_job(prefix)
    foreign = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
    given.write(prefix, "foreign", "runtime", avro_bytes("runtime", [{"x": 1}, {"x": 2}, {"x": 3}], schema=foreign), 3)


def header_only(given: Input, prefix: str) -> None:
    given.good_job(prefix)
    given.write(prefix, "empty", "runtime", avro_bytes("runtime", []), 0)


def millis_writer_with_a_bad_record(given: Input, prefix: str) -> None:
    """A writer that declares event_time in milliseconds, with a bad enum record:
    read record by record, the good records keep their true times."""
    records = given.good_job(prefix, skip=("runtime",))
    schema = with_symbol("runtime", "type", "STEP_PAUSE")
    next(f for f in schema["fields"] if f["name"] == "event_time")["type"]["logicalType"] = "timestamp-millis"
    millis = [{**r, "event_time": r["event_time"] // 1000} for r in records["runtime"]]
    bad = {**runtime(prefix, "pause", "STEP_PAUSE", 200), "event_time": (T0 + 200 * SECOND) // 1000}
    given.records(prefix, "millis", "runtime", insert_middle(millis, bad), schema=schema)


def conflict(first: str, second: str):
    """A FAIL and a FINISH 5 s later under one event id, ending job `<prefix>-bad`,
    written to two files in the order `first`, `second`."""

    def build(given: Input, prefix: str) -> None:
        given.good_job(prefix)
        given.records(
            prefix,
            "bad",
            "scheduler",
            [scheduler(prefix, "submit", "SUBMIT", 0), scheduler(prefix, "allocate", "ALLOCATE", 10)],
        )
        ends = {"FAIL": scheduler(prefix, "end", "FAIL", 100), "FINISH": scheduler(prefix, "end", "FINISH", 105)}
        given.records(prefix, "a", "scheduler", [ends[first]])
        given.records(prefix, "b", "scheduler", [ends[second]])

    return build


def bad_steps(first: int, last: int):
    """The good job, plus job `<prefix>-bad` with one step span from step `first` to `last` over 10 s."""

    def build(given: Input, prefix: str) -> None:
        given.good_job(prefix)
        given.records(
            prefix,
            "bad",
            "scheduler",
            [scheduler(prefix, "submit", "SUBMIT", 0), scheduler(prefix, "allocate", "ALLOCATE", 10)],
        )
        job = {"job_id": f"{prefix}-bad"}
        given.records(
            prefix,
            "bad",
            "runtime",
            [
                runtime(prefix, "step-start", "STEP_START", 20, step=first, **job),
                runtime(prefix, "step-end", "STEP_END", 30, step=last, **job),
            ],
        )

    return build


def identical_repeat(given: Input, prefix: str) -> None:
    records = given.good_job(prefix)
    given.records(prefix, "again", "scheduler", records["scheduler"][:3])


def capacity_conflict(given: Input, prefix: str) -> None:
    given.good_job(prefix)
    capacity = scheduler(prefix, "cap", "CAPACITY", 0, job_id=None, chips=8)
    given.records(prefix, "caps", "scheduler", [capacity, {**capacity, "chips": 4096}])


def job_posing_as_capacity(given: Input, prefix: str) -> None:
    """A job id spelling the old capacity key: it is a job like any other, never capacity."""
    given.good_job(prefix)
    fake = f"capacity|{prefix}|tpu-v5e"
    given.records(
        prefix,
        "fake",
        "scheduler",
        [
            scheduler(prefix, "fake-submit", "SUBMIT", 0, job_id=fake, chips=1),
            scheduler(prefix, "fake-allocate", "ALLOCATE", 1, job_id=fake, chips=1),
        ],
    )


def held_above_capacity(given: Input, prefix: str) -> None:
    """The good job holds 8 chips where CAPACITY says 4 are online."""
    records = good_records(prefix)
    records["scheduler"] = [{**r, "chips": 4} if r["type"] == "CAPACITY" else r for r in records["scheduler"]]
    for stream, stream_records in records.items():
        given.records(prefix, "good", stream, stream_records)


def no_capacity(given: Input, prefix: str) -> None:
    records = good_records(prefix)
    records["scheduler"] = [r for r in records["scheduler"] if r["type"] != "CAPACITY"]
    for stream, stream_records in records.items():
        given.records(prefix, "good", stream, stream_records)


def fp8_sample(given: Input, prefix: str) -> None:
    """A second sample at 1.5x the bf16 peak's FLOPs, naming no precision (as fp8 would run, but tpu-v5e
    has no fp8): measured against bf16, the contract's default, it would show PG above 1."""
    records = given.good_job(prefix)
    sample = records["profiler"][0]
    flops = 1.5 * 197e12 * sample["chips"] * sample["duration_s"]
    given.records(
        prefix,
        "fp8",
        "profiler",
        [{**sample, "event_id": f"{prefix}-fp8", "event_time": T0 + 300 * SECOND, "ideal_flops": flops}],
    )


NULL_JOB_ID = "job_id: null where the contract requires string"
FUTURE = r"is after 2100-01-01: not plausible telemetry"

CASES = [
    # ---- good data is not lost with the bad (one bad record in a block of good ones)
    Case(
        "null job_id in a runtime block",
        bad_record_in_a_block(
            "runtime",
            lambda p: runtime(p, "null", "STEP_START", 200, job_id=None),
            lambda: with_field_type("runtime", "job_id", ["null", "string"]),
        ),
        [("null", re.escape(NULL_JOB_ID), 1)],
    ),
    Case(
        "null job_id in a profiler block",
        bad_record_in_a_block(
            "profiler",
            lambda p: profile(p, "null", 200, job_id=None),
            lambda: with_field_type("profiler", "job_id", ["null", "string"]),
        ),
        [("null", re.escape(NULL_JOB_ID), 1)],
    ),
    Case(
        "runtime type the contract lacks",
        bad_record_in_a_block(
            "runtime",
            lambda p: runtime(p, "pause", "STEP_PAUSE", 200),
            lambda: with_symbol("runtime", "type", "STEP_PAUSE"),
        ),
        [("pause", r"type: 'STEP_PAUSE' is not a symbol of the contract's RuntimeEventType enum", 1)],
    ),
    Case(
        "scheduler type the contract lacks",
        bad_record_in_a_block(
            "scheduler",
            lambda p: scheduler(p, "suspend", "SUSPEND", 200),
            lambda: with_symbol("scheduler", "type", "SUSPEND"),
        ),
        [("suspend", r"type: 'SUSPEND' is not a symbol of the contract's SchedulerEventType enum", 1)],
    ),
    Case(
        "workload the contract lacks",
        bad_record_in_a_block(
            "scheduler",
            lambda p: scheduler(p, "rl", "SUBMIT", 200, workload="RL"),
            lambda: with_symbol("scheduler", "workload", "RL"),
        ),
        [
            (
                "rl",
                r"workload: 'RL' is not a symbol of the contract's Workload enum \(TRAINING, SERVING, BULK_INFERENCE\)",
                1,
            )
        ],
    ),
    Case(
        "flops_source the contract lacks",
        bad_record_in_a_block(
            "profiler",
            lambda p: profile(p, "guess", 200, flops_source="GUESSED"),
            lambda: with_symbol("profiler", "flops_source", "GUESSED"),
        ),
        [("guess", r"flops_source: 'GUESSED' is not a symbol of the contract's FlopsSource enum", 1)],
    ),
    Case(
        "runtime event_time of 2^62",
        bad_record_in_a_block("runtime", lambda p: {**runtime(p, "far", "STEP_START", 0), "event_time": 2**62}),
        [("far", f"event_time {2**62} µs {FUTURE}", 1)],
    ),
    Case(
        "scheduler event_time of 2^62",
        bad_record_in_a_block("scheduler", lambda p: {**scheduler(p, "far", "ALLOCATE", 0), "event_time": 2**62}),
        [("far", f"event_time {2**62} µs {FUTURE}", 1)],
    ),
    Case(
        "CAPACITY in year 9999",
        bad_record_in_a_block(
            "scheduler", lambda p: {**scheduler(p, "y9999", "CAPACITY", 0, job_id=None), "event_time": YEAR_9999_US}
        ),
        [("y9999", f"event_time {YEAR_9999_US} µs {FUTURE}", 1)],
    ),
    # Not rejected: a reason that depends on the wall clock would be final on a machine whose clock is
    # wrong. It waits after the as-of time (counted `waiting`), which it cannot move.
    Case(
        "event 400 days after the data",
        good_job_with(
            "runtime", lambda p: {**runtime(p, "soon", "INIT_START", 0), "event_time": T0 + 400 * 86_400 * SECOND}
        ),
        [],
    ),
    Case(
        "event before 2000",
        good_job_with("runtime", lambda p: {**runtime(p, "old", "INIT_START", 0), "event_time": 1}),
        [("old", r"event_time 1 µs is before 2000-01-01", 1)],
    ),
    Case(
        "millisecond writer with a bad record",
        millis_writer_with_a_bad_record,
        [("pause", r"type: 'STEP_PAUSE' is not a symbol", 1)],
    ),
    # ---- every codec the Avro spec names is readable
    Case("snappy file", in_codec("snappy")),
    Case("zstandard file", in_codec("zstandard")),
    Case("lz4 file", in_codec("lz4")),
    Case("bzip2 file", in_codec("bzip2")),
    Case("xz file", in_codec("xz")),
    Case("null codec file", in_codec("null")),
    # ---- damaged files count what their block headers declare
    Case(
        "truncated last block",
        damaged(lambda data: data[:-20]),
        [(None, r"truncated Avro block at byte \d+: the file ends inside it; its header declares 2 records", 2)],
    ),
    Case(
        "block that decompresses to garbage",
        damaged(corrupt_second_block_data),
        [(None, r"Avro block whose records 1 to 4 do not decode: EOFError", 4)],
    ),
    Case(
        "block that does not decompress",
        damaged(corrupt_second_block_codec),
        [(None, r"Avro block at byte \d+ that does not decode; its header declares 4 records \(error: Error -3", 4)],
    ),
    Case(
        "block with a corrupt header",
        damaged(corrupt_second_block_header, unknowable=True),
        [
            (
                None,
                r"corrupt Avro block header at byte \d+: the number of records before the next block .* is unknowable",
                1,
            )
        ],
    ),
    Case(
        "not an Avro file",
        raw_file(b"this is not avro at all" * 4),
        [(None, r"not a readable Avro file of the runtime schema, so the number of records in it is unknowable", 1)],
    ),
    Case("empty file", raw_file(b""), [(None, r"not a readable Avro file of the runtime schema", 1)]),
    Case(
        "foreign schema",
        foreign_schema,
        [
            (
                None,
                r"written with a schema that does not resolve to the runtime v1 schema \(record Other with fields x\)",
                3,
            )
        ],
    ),
    Case("header without blocks", header_only),
    # ---- files whose own numbers would run a decoder out of time, memory or stack (bounded decoding)
    Case(
        "array of 2^40 null items",
        hostile(hostile_avro.zero_byte_array, 1, 1),
        [(None, re.escape(hostile_avro.ZERO_BYTE_ARRAY_REASON), 1)],
    ),
    Case(
        "record nested 500,000 deep",
        hostile(hostile_avro.deeply_nested, 1, 1),
        [(None, re.escape(hostile_avro.RECURSIVE_REASON), 1)],
    ),
    Case(
        "block declaring 2^31 records, holding one",
        hostile(hostile_avro.overclaiming_block, 1, 2),  # 1 duplicate
        [(None, re.escape(hostile_avro.OVERCLAIM_REASON), 1)],
    ),
    Case(
        "file ending inside a block declaring 2^31 records",
        hostile(hostile_avro.truncated_overclaiming_block, 1, 1),
        [(None, re.escape(hostile_avro.TRUNCATED_OVERCLAIM_REASON), 1)],
    ),
    Case(
        "deflate block declaring 2^31 records in 40 bytes",
        hostile(hostile_avro.undecompressable_overclaiming_block, 0, 1),
        [(None, re.escape(hostile_avro.UNDECOMPRESSABLE_OVERCLAIM_REASON), 1)],
    ),
    Case(
        "named pipe",
        not_a_file(os.mkfifo),
        [(None, re.escape(hostile_avro.not_a_regular_file_reason("a named pipe (FIFO)")), 1)],
    ),
    Case(
        "symbolic link to /dev/zero",
        not_a_file(lambda path: path.symlink_to("/dev/zero")),
        [
            (
                None,
                re.escape(hostile_avro.not_a_regular_file_reason("a symbolic link to a character device (/dev/zero)")),
                1,
            )
        ],
    ),
    Case("symbolic link to nothing", link_to_nothing),
    # ---- values that would corrupt figures
    Case(
        "ALLOCATE of 1e9 chips for a 1-chip job",
        bad_job(lambda p: scheduler(p, "huge", "ALLOCATE", 10, chips=10**9)),
        [("huge", r"ALLOCATE of 1000000000 chips is above the 1 requested: a job holds at most its request", 1)],
    ),
    Case(
        "PREEMPT to more chips than requested",
        bad_job(
            lambda p: scheduler(p, "alloc", "ALLOCATE", 10), lambda p: scheduler(p, "more", "PREEMPT", 20, chips=2)
        ),
        [("more", r"PREEMPT of 2 chips is above the 1 requested", 1)],
    ),
    Case(
        "negative chips",
        bad_job(lambda p: scheduler(p, "neg", "ALLOCATE", 10, chips=-1)),
        [("neg", r"negative chips \(-1\) on ALLOCATE", 1)],
    ),
    Case(
        "SUBMIT of 0 chips",
        good_job_with("scheduler", lambda p: scheduler(p, "zero", "SUBMIT", 0, chips=0)),
        [("zero", r"SUBMIT requesting 0 chips", 1)],
    ),
    Case(
        "unknown accelerator",
        good_job_with("scheduler", lambda p: scheduler(p, "h900", "SUBMIT", 0, accelerator="h900")),
        [("h900", r"unknown accelerator 'h900': not in the accelerator catalogue", 1)],
    ),
    Case(
        "ideal_flops of 1e308",
        good_job_with("profiler", lambda p: profile(p, "inf", 250, ideal_flops=1e308)),
        [
            (
                "inf",
                r"ideal_flops 1e\+308 over 8 chips in 10 s implies PG .* against the tpu-v5e bf16 peak \(the "
                r"sample names no precision\): more FLOPs than the chips' peak allows",
                1,
            )
        ],
    ),
    Case(
        "ideal_flops per chip written as per job x 1000",
        good_job_with("profiler", lambda p: profile(p, "x1000", 250, ideal_flops=7.88e18)),
        [("x1000", r"implies PG 500 against the tpu-v5e bf16 peak", 1)],
    ),
    Case(
        "a sample above the bf16 peak naming no precision",
        fp8_sample,
        [
            (
                "fp8",
                r"implies PG 1.5 against the tpu-v5e bf16 peak \(the sample names no precision\): more FLOPs "
                r"than the chips' peak allows \(a faster precision the sample does not name",
                1,
            )
        ],
    ),
    Case(
        "step lasting more than a day",
        good_job_with("profiler", lambda p: profile(p, "slow", 250, duration_s=1e6)),
        [("slow", r"duration_s 1e\+06 for one step is more than a day", 1)],
    ),
    Case(
        "zero duration",
        good_job_with("profiler", lambda p: profile(p, "zero", 250, duration_s=0.0)),
        [("zero", r"duration_s must be a positive finite number, got 0.0", 1)],
    ),
    Case(
        "step numbers going backwards",
        bad_steps(10, 5),
        [("step-end", r"STEP_END at step 5 is before its STEP_START's step 10: step numbers going backwards", 1)],
    ),
    Case(
        "2^62 steps in ten seconds",
        bad_steps(1, 2**62),
        [
            (
                "step-end",
                r"STEP_END claims 4611686018427387904 steps in 10000000 µs: more than one step per microsecond",
                1,
            )
        ],
    ),
    Case(
        "event_id conflict: FAIL then FINISH 5 s later",
        conflict("FAIL", "FINISH"),
        [("end", rf"event_id conflict: already carried by a different event \(FAIL at {T0 + 100 * SECOND} µs\)", 1)],
    ),
    Case(
        "event_id conflict, files in the other order",
        conflict("FINISH", "FAIL"),
        [("end", rf"event_id conflict: already carried by a different event \(FAIL at {T0 + 100 * SECOND} µs\)", 1)],
    ),
    Case("identical repeats are duplicates", identical_repeat),
    Case(
        "CAPACITY event_id conflict",
        capacity_conflict,
        [("cap", r"event_id conflict: already carried by a different event \(CAPACITY", 1)],
    ),
    # ---- trust boundaries
    Case("job_id spelling a capacity key", job_posing_as_capacity),
    Case(
        "job_id with control characters",
        good_job_with(
            "scheduler", lambda p: scheduler(p, "ctl", "SUBMIT", 0, job_id=f"\x1fcapacity\x1f{p}\x1ftpu-v5e")
        ),
        [("ctl", r"job_id .* holds control characters: not an identifier", 1)],
    ),
    Case(
        "job_id of 10,000 characters",
        good_job_with("runtime", lambda p: runtime(p, "long", "INIT_START", 0, job_id="j" * 10_000)),
        [("long", r"job_id of 10000 characters: longer than 256 is not an identifier", 1)],
    ),
    Case(
        "cluster with control characters",
        good_job_with("scheduler", lambda p: scheduler(p, "cluster", "CAPACITY", 0, job_id=None, cluster="a\nb")),
        [("cluster", r"cluster 'a\\nb' holds control characters", 1)],
    ),
    # ---- capacity telemetry that does not cover the chips held (no rejection: views exclude it)
    Case("chips held above the cluster's capacity", held_above_capacity),
    Case("cluster without capacity", no_capacity),
]


# ---- running them ---------------------------------------------------------------
def prefix_of(index: int) -> str:
    return f"c{index:02d}"


PREFIXES = {case.name: prefix_of(i) for i, case in enumerate(CASES)}


@pytest.fixture(scope="module")
def clean(worked_example_run) -> list[tuple]:
    """The `job_window` rows of `mpg run` over the worked example alone (job j1; tests/conftest.py)."""
    return job_windows(worked_example_run[1])["j1"]


@pytest.fixture(scope="module")
def dirty(tmp_path_factory) -> tuple[Input, Path]:
    given = Input(tmp_path_factory.mktemp("dirty_in"))
    for case in CASES:
        case.build(given, PREFIXES[case.name])
    output = tmp_path_factory.mktemp("dirty_out")
    run(given.root, output)
    return given, output


def run(input_dir: Path, output: Path) -> None:
    """`mpg run` in a fresh process with a time limit: a file that hangs or crashes a decoder fails
    these tests in minutes instead of hanging or killing the suite."""
    hostile_avro.run_bounded(
        "from fleet_goodput.cli import main; "
        f"raise SystemExit(main(['run', '--input', {str(input_dir)!r}, '--output', {str(output)!r}]))",
        timeout_s=300,
    )


def job_windows(output: Path) -> dict[str, list[tuple]]:
    """Every job's latest `job_window` rows in window order, read in one query (one read for all cases)."""
    with connect(output) as connection:
        rows = connection.execute("""
            select job_id, * exclude (job_id, version, date) from job_window
            order by job_id, window_start""").fetchall()
    windows: dict[str, list[tuple]] = {}
    for job_id, *row in rows:
        windows.setdefault(job_id, []).append(tuple(row))
    return windows


def rejected_rows(output: Path) -> list[tuple]:
    with connect(output) as connection:  # settled and provisional rejections alike
        return connection.execute("select event_id, reason, records, source from rejected").fetchall()


def rejected_of(rows: list[tuple], prefix: str) -> list[tuple]:
    mine = []
    for event_id, reason, records, source in rows:
        if event_id is not None and event_id.startswith(f"{prefix}-"):
            mine.append((event_id.removeprefix(f"{prefix}-"), reason, records))
        elif event_id is None and source and Path(source).name.startswith(f"{prefix}-"):
            mine.append((None, reason, records))
    return sorted(mine, key=lambda row: (row[0] or "", row[1]))


@pytest.fixture(scope="module")
def dirty_rows(dirty) -> tuple[dict[str, list[tuple]], list[tuple]]:
    """The dirty run's job windows and rejections, read once for the ~90 per-case tests."""
    return job_windows(dirty[1]), rejected_rows(dirty[1])


def test_there_are_enough_named_cases():
    assert len(CASES) >= 40 and len(PREFIXES) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_rejection_has_its_specific_reason(dirty_rows, case):
    got = rejected_of(dirty_rows[1], PREFIXES[case.name])
    expected = sorted(case.rejected, key=lambda row: (row[0] or "", row[1]))
    assert len(got) == len(expected), got
    for (event_id, reason, records), (want_id, pattern, want_records) in zip(got, expected):
        assert (event_id, records) == (want_id, want_records), (event_id, reason)
        assert re.search(pattern, reason), reason


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_good_job_equals_a_clean_run(clean, dirty_rows, case):
    assert clean and dirty_rows[0].get(PREFIXES[case.name]) == clean


def test_the_manifest_reconciles_with_the_true_record_counts(dirty):
    given, output = dirty
    manifest = json.loads((output / "manifest.json").read_text())
    assert {stream: counts["read"] for stream, counts in manifest["streams"].items()} == given.countable
    assert manifest["reconciles"]
    # Only the stretches whose count is unknowable (said so in their reason) differ from the truth: a
    # block of 4 counted as 1; three files, a pipe and a device holding none, each counted as 1; and
    # the block declaring 2^31 records, whose one record is counted and the rest as 1.
    assert given.true_records["runtime"] - given.countable["runtime"] == (4 - 1) + (0 - 1) * 5 + (1 - 2)
    assert all(given.true_records[s] == given.countable[s] for s in ("scheduler", "profiler"))


# ---- what the views make of the cases that are not rejections -------------------------
def test_capacity_gaps_name_the_clusters_left_out(dirty):
    over, missing = PREFIXES["chips held above the cluster's capacity"], PREFIXES["cluster without capacity"]
    with connect(dirty[1]) as connection:
        gaps = connection.execute("select cluster, accelerator, problem from capacity_gaps order by cluster").fetchall()
        headline = render(connection)
    assert gaps == [(over, "tpu-v5e", "over_capacity"), (missing, "tpu-v5e", "no_capacity")]
    assert f"{over}/tpu-v5e: more chips held than online" in headline
    assert f"{missing}/tpu-v5e: no CAPACITY level" in headline


def test_no_fleet_figure_is_impossible(dirty):
    with connect(dirty[1]) as connection:
        sg_max, idle_min, excluded = connection.execute(
            "select max(sg), min(idle_capacity_chip_s), sum(excluded_windows) from fleet_daily"
        ).fetchone()
        idle_capacity = connection.execute(
            "select chip_hours from badput_breakdown where category = 'idle_capacity'"
        ).fetchone()[0]
        totals = fleet_totals(connection)
    assert sg_max <= 1 and idle_min >= 0 and idle_capacity >= 0 and excluded > 0
    assert all(0 <= totals[factor] <= 1 for factor in ("sg", "rg", "pg", "mpg"))


def test_a_job_id_spelling_a_capacity_key_is_just_a_job(dirty):
    prefix, ordinary = PREFIXES["job_id spelling a capacity key"], PREFIXES["snappy file"]
    with connect(dirty[1]) as connection:
        capacity = dict(
            connection.execute(
                "select cluster, sum(capacity_chip_s) from capacity_window where cluster in (?, ?) group by cluster",
                [prefix, ordinary],
            ).fetchall()
        )
        jobs = connection.execute("select job_id from jobs where job_id like 'capacity|%'").fetchall()
    assert capacity[prefix] == capacity[ordinary]
    assert jobs == [(f"capacity|{prefix}|tpu-v5e",)]


@pytest.mark.parametrize(
    "ideal, productive, profiled, base, expected",
    [
        (None, 80.0, 0.0, 100.0, None),  # productive time without a profile: PG and so MPG unknown
        (None, 0.0, 0.0, 100.0, 0.0),  # no productive time, no profile: MPG 0
        (0.0, 0.0, 0.0, 100.0, 0.0),  # no productive time, profiled: MPG 0, not null
        (40.0, 80.0, 80.0, 100.0, 0.4),  # full coverage: ideal / base
        (20.0, 80.0, 40.0, 100.0, 0.4),  # half coverage: PG extrapolated to the unprofiled half
        (0.0, 0.0, 0.0, 0.0, None),  # no base at all
    ],
    ids=["unknown", "empty", "empty-profiled", "covered", "half-covered", "no-base"],
)
def test_mpg_of_unknown_and_empty_groups(ideal, productive, profiled, base, expected):
    """docs/metric.md section 1, "Unknown and empty factors", as the views' mpg() macro computes it."""
    connection = duckdb.connect()
    connection.execute(view_sql("derived/macros.sql"))
    (got,) = connection.execute(
        "select mpg(?::double, ?::double, ?::double, ?::double)", [ideal, productive, profiled, base]
    ).fetchone()
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"type": "BOGUS"}, "type: 'BOGUS' is not a symbol of the contract's RuntimeEventType enum"),
        ({"job_id": None}, "job_id: null where the contract requires string"),
        ({"step": "ten"}, "step: 'ten' is not a long"),
        ({"event_id": None}, "event_id: null where the contract requires string"),
    ],
    ids=["enum", "null-job-id", "wrong-type", "null-event-id"],
)
def test_records_given_as_dicts_are_checked_against_the_contract(record, reason):
    """DecodeRecords (message queues, tests) gets dicts that Avro never resolved."""
    good = runtime("dict", "e", "STEP_START", 0, step=1)
    assert contract_violation(good, schemas.schema_json("runtime"), missing_is_a_violation=True) is None
    assert contract_violation(
        {**good, **record}, schemas.schema_json("runtime"), missing_is_a_violation=True
    ).startswith(reason)
    missing = {key: value for key, value in good.items() if key != "type"}
    assert (
        contract_violation(missing, schemas.schema_json("runtime"), missing_is_a_violation=True)
        == "type: missing, and the contract requires it"
    )


def test_a_second_run_reads_no_file_again(dirty):
    """Every file is known as applied, the pipe and the device among them (listed under the hash of
    their path, never read): a second run over the same input has nothing new and commits nothing,
    so the rejected pipe and device are counted once. Last in the file: it runs on the dirty store."""
    given, output = dirty
    before = (output / "manifest.json").read_text()
    run(given.root, output)
    assert (output / "manifest.json").read_text() == before
