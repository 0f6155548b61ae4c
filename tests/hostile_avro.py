"""Hostile Avro files, written byte by byte: what no Avro writer library would produce.

A container file is its header (magic, metadata, sync marker) and blocks of
(record count, byte size, data, sync marker); here every part is written as
given, so a count may claim what the bytes do not hold and a schema may be
one that no decoder should follow (tests/telemetry/test_bad_input_cases.py,
tests/telemetry/test_decode_bounds.py).
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import zlib

import fastavro

from fleet_goodput import schemas

SYNC = b"fleet-goodput-16"
ZERO_ITEMS = 2**40
NESTING = 500_000
DECLARED = 2**31


def zigzag(value: int) -> bytes:
    """An Avro long: zig-zag, then base-128 varint."""
    encoded, out = (value << 1) ^ (value >> 63), bytearray()
    while encoded > 0x7F:
        out.append(encoded & 0x7F | 0x80)
        encoded >>= 7
    return bytes(out + bytes([encoded]))


def container(schema: dict, blocks: list[tuple[int, bytes]], codec: str = "null") -> bytes:
    """An Avro container file of `blocks` (declared count, data) exactly as given."""
    meta = {"avro.schema": json.dumps(schema).encode(), "avro.codec": codec.encode()}
    header = (
        b"Obj\x01"
        + zigzag(len(meta))
        + b"".join(zigzag(len(key)) + key.encode() + zigzag(len(value)) + value for key, value in meta.items())
        + zigzag(0)
    )
    return header + SYNC + b"".join(zigzag(count) + zigzag(len(data)) + data + SYNC for count, data in blocks)


def encoded(stream: str, record: dict) -> bytes:
    """`record` in the binary encoding of the stream's contract schema."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schemas.load(stream), record)
    return buffer.getvalue()


def with_extra_field(stream: str, avro_type) -> dict:
    """The stream's contract schema with one more field, `extra`, last (so its bytes follow a record's)."""
    schema = copy.deepcopy(schemas.schema_json(stream))
    schema["fields"].append({"name": "extra", "type": avro_type})
    return schema


def zero_byte_array(record: dict, stream: str = "runtime") -> bytes:
    """A file whose one record ends in an array of `null` claiming 2^40 items (which take no bytes)."""
    data = encoded(stream, record) + zigzag(ZERO_ITEMS) + zigzag(0)
    return container(with_extra_field(stream, {"type": "array", "items": "null"}), [(1, data)])


def deeply_nested(record: dict, stream: str = "runtime") -> bytes:
    """A file whose one record ends in a self-recursive `Node` nested 500,000 deep."""
    node = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    data = encoded(stream, record) + zigzag(1) * NESTING + zigzag(0)
    return container(with_extra_field(stream, node), [(1, data)])


def overclaiming_block(record: dict, stream: str = "runtime") -> bytes:
    """A file whose one block declares 2^31 records and holds one."""
    return container(schemas.schema_json(stream), [(DECLARED, encoded(stream, record))])


def truncated_overclaiming_block(record: dict, stream: str = "runtime") -> bytes:
    """A file that ends inside a block declaring 2^31 records (and 1 MiB), 12 bytes (of `record`) into it."""
    data = container(schemas.schema_json(stream), [])
    return data + zigzag(DECLARED) + zigzag(1 << 20) + encoded(stream, record)[:12]


def undecompressable_overclaiming_block(record: dict, stream: str = "runtime") -> bytes:
    """A deflate file whose one block declares 2^31 records in 40 bytes that do not decompress
    (`record` taken as by the other files: this one holds none)."""
    return container(schemas.schema_json(stream), [(DECLARED, b"\xff" * 40)], codec="deflate")


def deflate_bomb(record: dict, stream: str = "runtime") -> bytes:
    """A deflate file whose one block declares one record, and holds it followed by 80 MiB of zeros
    (80 KiB compressed): a decompression bomb."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = compressor.compress(encoded(stream, record) + bytes(BOMB_BYTES)) + compressor.flush()
    return container(schemas.schema_json(stream), [(1, data)], codec="deflate")


BOMB_BYTES = 80 << 20


# ---- the reasons they are rejected with, word for word -----------------------------------------------
REFUSED = "Avro file refused unread: its writer schema"
UNKNOWABLE = "so the number of records lost is unknowable"
ZERO_BYTE_ARRAY_REASON = (
    f'{REFUSED} has an array of items that take no bytes ("null"): such an array can claim '
    "any number of items without the file holding them; the number of records in it is unknowable"
)
RECURSIVE_REASON = (
    f"{REFUSED}'s type Node contains itself: a value of a recursive type nests as deep as the "
    "file's bytes go, deeper than a decoder can follow; the number of records in it is unknowable"
)
# What follows the one record of `overclaiming_block` (a runtime record takes 6 bytes or more).
OVERCLAIM_REASON = (
    f"Avro block whose records 2 to {DECLARED} do not decode: EOFError: ; the block declares "
    f"{DECLARED - 1} records from there, more than its 0 bytes can hold (at most 0: a record takes "
    f"6 bytes or more), {UNKNOWABLE}"
)

TRUNCATED_OVERCLAIM_REASON = (
    f"truncated Avro block at byte {len(container(schemas.schema_json('runtime'), []))}: the file ends inside it; "
    f"its header declares {DECLARED} records, more than its 12 bytes can hold (at most 2: a record takes 6 bytes "
    f"or more), {UNKNOWABLE} (EOFError: Expected {1 << 20} bytes, read 12)"
)

UNDECOMPRESSABLE_OVERCLAIM_REASON = (
    f"Avro block at byte {len(container(schemas.schema_json('runtime'), [], codec='deflate'))} that does not "
    f"decode; its header declares {DECLARED} records, more than its 40 bytes of deflate data can hold (at most "
    f"{40 * 1032 // 6}: a record takes 6 bytes or more, and deflate makes 1032 bytes of one at most), {UNKNOWABLE} "
    "(error: Error -3 while decompressing data: invalid block type)"
)


def bomb_reason(record: dict) -> str:
    start = len(container(schemas.schema_json("runtime"), [], codec="deflate"))
    return (
        f"Avro block at byte {start} that does not decode; its header declares 1 records (BlockTooLarge: a "
        "deflate block that decompresses to more than 64 MiB (a decompression bomb?): not decompressed further)"
    )


def not_a_regular_file_reason(kind: str) -> str:
    return (
        f"not a regular file but {kind}: skipped unread, since reading it could wait forever or never end "
        "(counted as one record, the number in it being unknowable)"
    )


def run_bounded(code: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python, failing clearly (not hanging, not crashing the tests) when it
    does not finish within `timeout_s` or dies of a signal."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(__file__), os.environ.get("PYTHONPATH")])),
            },
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"did not finish within {timeout_s} s") from None
    assert done.returncode == 0, (
        f"exit status {done.returncode} (negative: killed by that signal): {done.stderr[-2000:]}"
    )
    return done
