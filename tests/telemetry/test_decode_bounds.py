"""Bounded decoding: no count, length, depth or size a file states is acted on before it is checked.

Each hostile file is decoded in a fresh Python with a time limit
(`hostile_avro.run_bounded`), so a decoder that loops for hours or overflows
its stack fails this test in seconds instead of hanging or killing the suite.
The same files, in one run with everything else, are named cases of
tests/telemetry/test_bad_input_cases.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import hostile_avro
import worked_example
from fleet_goodput import schemas
from fleet_goodput.telemetry.avro_bounds import MAX_SCHEMA_DEPTH, UnsafeSchema, record_bytes_at_least

RECORD = worked_example.records()["runtime"][0]
ACCELERATORS = ("tpu-v5e",)


def decode_in_a_fresh_process(path: Path) -> list[dict]:
    """What a run (which decodes a small file with the reference), the columnar fast path and fastavro's
    reference path make of the file at `path`: read count, events, rejected (reason, records)."""
    code = f"""
import json
from fleet_goodput.telemetry.columnar import decode_file_fast, decode_input_file
from fleet_goodput.telemetry.decode import decode_file

def outcome(decoded):
    events = sum(len(batch) for batch in decoded.batches.values())
    return {{"read": decoded.read, "events": events,
             "rejected": [[row["reason"], row["records"]] for row in decoded.rejected]}}

run = decode_input_file("runtime", {str(path)!r}, {ACCELERATORS!r})
with open({str(path)!r}, "rb") as handle:
    fast = decode_file_fast("runtime", {str(path)!r}, handle, {ACCELERATORS!r})
with open({str(path)!r}, "rb") as handle:
    reference = decode_file("runtime", {str(path)!r}, handle, {ACCELERATORS!r})
print(json.dumps([outcome(run), outcome(fast), outcome(reference)]))
"""
    return json.loads(hostile_avro.run_bounded(code).stdout)


# name: (the file, what decoding it gives: records read, events, rejected (reason, records))
HOSTILE = {
    "array of 2^40 null items": (hostile_avro.zero_byte_array, 1, 0, [(hostile_avro.ZERO_BYTE_ARRAY_REASON, 1)]),
    "record nested 500,000 deep": (hostile_avro.deeply_nested, 1, 0, [(hostile_avro.RECURSIVE_REASON, 1)]),
    # The one record it holds is read; the 2^31 - 1 it only declares are one unknowable stretch.
    "block declaring 2^31 records, holding one": (
        hostile_avro.overclaiming_block,
        2,
        1,
        [(hostile_avro.OVERCLAIM_REASON, 1)],
    ),
    "file ending inside a block declaring 2^31 records": (
        hostile_avro.truncated_overclaiming_block,
        1,
        0,
        [(hostile_avro.TRUNCATED_OVERCLAIM_REASON, 1)],
    ),
    "deflate block declaring 2^31 records that does not decompress": (
        hostile_avro.undecompressable_overclaiming_block,
        1,
        0,
        [(hostile_avro.UNDECOMPRESSABLE_OVERCLAIM_REASON, 1)],
    ),
    "deflate block of one record that decompresses to 80 MiB": (
        hostile_avro.deflate_bomb,
        1,
        0,
        [(hostile_avro.bomb_reason(RECORD), 1)],
    ),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_file_is_rejected_with_its_reason_in_bounded_time(tmp_path, name):
    build, read, events, rejected = HOSTILE[name]
    path = tmp_path / "hostile.avro"
    path.write_bytes(build(RECORD))
    run, fast, reference = decode_in_a_fresh_process(path)
    assert run == fast == reference == {"read": read, "events": events, "rejected": [list(row) for row in rejected]}


def test_a_pipe_or_a_device_is_never_read(tmp_path):
    """Listing, decoding (as a run and as a chunked run do) a FIFO, /dev/zero and a link to the FIFO
    returns at once: each is one rejected record saying what it is, and listing takes the hash of its path."""
    folder = tmp_path / "input" / "runtime"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "a-pipe.avro")
    (folder / "b-zero.avro").symlink_to("/dev/zero")
    (folder / "c-link-to-pipe.avro").symlink_to(folder / "a-pipe.avro")
    code = f"""
import json
from fleet_goodput.runs.inputs import list_input
from fleet_goodput.telemetry.columnar import decode_input_file
from fleet_goodput.telemetry.decode import TimeSlice

listed = list_input({str(tmp_path / "input")!r})
decoded = [decode_input_file(f.stream, f.path, ()) for f in listed]
chunked = [decode_input_file(f.stream, f.path, (), TimeSlice(since_us=0)) for f in listed]
print(json.dumps({{"listed": [[f.path, f.size, f.sha256] for f in listed],
                  "decoded": [[d.read, [[r["reason"], r["records"], r["source"]] for r in d.rejected]] for d in decoded],
                  "chunked": [[d.read, [[r["reason"], r["records"], r["source"]] for r in d.rejected]] for d in chunked]}}))
"""
    got = json.loads(hostile_avro.run_bounded(code).stdout)
    reasons = [
        hostile_avro.not_a_regular_file_reason(kind)
        for kind in (
            "a named pipe (FIFO)",
            "a symbolic link to a character device (/dev/zero)",
            f"a symbolic link to a named pipe (FIFO) ({folder / 'a-pipe.avro'})",
        )
    ]
    paths = [str(folder / name) for name in ("a-pipe.avro", "b-zero.avro", "c-link-to-pipe.avro")]
    assert [(path, size) for path, size, _ in got["listed"]] == [(path, 0) for path in paths]
    assert len({sha for _, _, sha in got["listed"]}) == 3  # each its own: none is taken for a copy of another
    assert got["decoded"] == [[1, [[reason, 1, path]]] for reason, path in zip(reasons, paths)]
    assert got["chunked"] == got["decoded"]


# ---- the writer-schema checks, in this process (they walk a schema's JSON, never a file's data) ----------
def schema_with(avro_type) -> str:
    return json.dumps(hostile_avro.with_extra_field("runtime", avro_type))


def nested_arrays(depth: int) -> dict:
    schema = "long"
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def test_the_contract_schemas_give_the_fewest_bytes_a_record_takes():
    """Runtime: four 1-byte values and two union indexes; scheduler: fourteen 1-byte values (a union's
    index, an int, a string's length, an enum's index; the last two are `queue`'s and `reason`'s union
    indexes); profiler: two doubles and eight 1-byte values."""
    assert {stream: record_bytes_at_least(json.dumps(schemas.schema_json(stream))) for stream in schemas.STREAMS} == {
        "scheduler": 14,
        "runtime": 6,
        "profiler": 24,
    }


@pytest.mark.parametrize(
    "avro_type, bytes_",
    [
        (nested_arrays(MAX_SCHEMA_DEPTH - 2), 1),  # as deep as may be: record, field, then the arrays
        ({"type": "map", "values": "null"}, 1),  # a map's entries each take a key's byte
        (
            {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Pair",
                    "fields": [{"name": "a", "type": "null"}, {"name": "b", "type": "int"}],
                },
            },
            1,
        ),
        ({"type": "fixed", "name": "Digest", "size": 32}, 32),
        (
            {
                "type": "record",
                "name": "Outer",
                "fields": [
                    {
                        "name": "first",
                        "type": {"type": "record", "name": "Leaf", "fields": [{"name": "x", "type": "double"}]},
                    },
                    {"name": "second", "type": "Leaf"},
                ],
            },
            16,
        ),  # a named type used twice is no recursion
    ],
    ids=["deepest-allowed", "map-of-null", "array-of-records", "fixed", "named-type-reused"],
)
def test_a_schema_that_bounds_its_values_is_accepted(avro_type, bytes_):
    assert record_bytes_at_least(schema_with(avro_type)) == 6 + bytes_


@pytest.mark.parametrize(
    "avro_type, problem",
    [
        (nested_arrays(MAX_SCHEMA_DEPTH), f"its writer schema nests deeper than {MAX_SCHEMA_DEPTH} levels"),
        (
            {"type": "array", "items": {"type": "record", "name": "Empty", "fields": []}},
            'its writer schema has an array of items that take no bytes ({"type": "record", "name": "Empty", "fields": []})',
        ),
        (
            {"type": "array", "items": {"type": "fixed", "name": "Nothing", "size": 0}},
            "its writer schema has an array of items that take no bytes",
        ),
        (
            {
                "type": "record",
                "name": "A",
                "namespace": "x.y",
                "fields": [
                    {
                        "name": "b",
                        "type": {"type": "record", "name": "B", "fields": [{"name": "a", "type": ["null", "x.y.A"]}]},
                    }
                ],
            },
            "its writer schema's type x.y.A contains itself",
        ),
        (
            {
                "type": "record",
                "name": "Tree",
                "fields": [{"name": "children", "type": {"type": "array", "items": "Tree"}}],
            },
            "its writer schema's type Tree contains itself",
        ),
    ],
    ids=[
        "too-deep",
        "array-of-empty-records",
        "array-of-empty-fixed",
        "recursion-through-another-type",
        "recursion-through-an-array",
    ],
)
def test_a_schema_that_bounds_nothing_is_refused(avro_type, problem):
    with pytest.raises(UnsafeSchema) as refused:
        record_bytes_at_least(schema_with(avro_type))
    assert str(refused.value).startswith(problem)


def test_a_zero_byte_record_and_a_schema_nested_past_the_json_parser_are_refused():
    with pytest.raises(UnsafeSchema, match="a record of its writer schema can take no bytes at all"):
        record_bytes_at_least(
            json.dumps({"type": "record", "name": "Nothing", "fields": [{"name": "n", "type": "null"}]})
        )
    with pytest.raises(UnsafeSchema, match=f"nests deeper than {MAX_SCHEMA_DEPTH} levels"):
        record_bytes_at_least("[" * 500_000 + "]" * 500_000)


@pytest.mark.parametrize("codec", ["deflate", "bzip2", "xz", "zstandard", "snappy", "lz4"])
def test_every_codec_stops_at_the_bound(monkeypatch, codec):
    """Each codec's block reader decompresses what fits under the bound and refuses what does not,
    as fastavro frames its blocks (a round trip through fastavro with the bounded readers installed)."""
    import io

    import fastavro

    import fleet_goodput.telemetry.decode  # noqa: F401 - importing the decoder bounds fastavro's block readers
    from fleet_goodput.telemetry import avro_codecs

    monkeypatch.setattr(avro_codecs, "MAX_BLOCK_BYTES", 1 << 20)
    schema = {"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"}]}

    def file_of(text_bytes: int) -> io.BytesIO:
        buffer = io.BytesIO()
        fastavro.writer(buffer, schema, [{"s": "x" * text_bytes}], codec=codec, sync_interval=1 << 30)
        buffer.seek(0)
        return buffer

    assert [r["s"] for r in fastavro.reader(file_of(512 << 10))] == ["x" * (512 << 10)]
    with pytest.raises(avro_codecs.BlockTooLarge, match=f"a {codec} block that decompresses to more than 1 MiB"):
        list(fastavro.reader(file_of(2 << 20)))
