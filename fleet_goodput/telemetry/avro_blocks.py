"""Reading an Avro container file block by block, past the blocks that are broken.

fastavro stops at the first block it cannot frame or decompress. The container
format ends every block with the file's 16-byte sync marker so that a reader
can find the next block after a damaged one; `AvroBlocks` does that, and says
for each damaged stretch how many records it held: the count its block header
declares when the header is intact and the block's bytes can hold that many
records (fleet_goodput/telemetry/avro_bounds.py), or None when it is unknowable.

`declared_records` counts a file's records from its block headers alone.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import fastavro
from fastavro.read import HEADER_SCHEMA

from fleet_goodput.telemetry.avro_bounds import most_records, record_bytes_at_least, records_beyond

SYNC_SIZE = 16


@dataclass(frozen=True)
class Damage:
    """A stretch of the file that could not be read."""

    records: int | None  # records lost, as declared by the block header; None when unknowable
    reason: str


class AvroBlocks:
    """The blocks of one Avro file held in memory, and a `Damage` for each broken stretch.

    Construction reads the header and raises (any exception of fastavro's)
    when the file is not a readable Avro file at all, or `UnsafeSchema` when
    its writer schema is not safe to decode (before fastavro parses it).
    """

    def __init__(self, data: bytes, reader_schema):
        self.data = data
        self.reader_schema = reader_schema
        record_bytes = record_bytes_at_least(_writer_schema_text(data))  # before fastavro parses the schema
        stream = io.BytesIO(data)
        self._blocks = fastavro.block_reader(stream, reader_schema=reader_schema)  # reads the header only
        self.writer_schema = self._blocks.writer_schema
        self.metadata = self._blocks.metadata
        # What bounds the records a block can hold: the fewest bytes a record takes, and the codec.
        self.bounds = (record_bytes, self._blocks.codec)
        self.header_end = stream.tell()
        self.sync = data[self.header_end - SYNC_SIZE : self.header_end]

    def __iter__(self) -> Iterator:
        blocks, shift = self._blocks, 0  # shift: real file offset minus the reader's offset
        position = self.header_end
        while True:
            try:
                block = next(blocks)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - any framing or codec failure is damage, not a crash
                damage, resume = self._assess(position, exc)
                yield damage
                if resume is None:
                    return
                position, shift = resume, resume - self.header_end
                blocks = fastavro.block_reader(
                    _HeaderThenRest(self.data, self.header_end, resume), reader_schema=self.reader_schema
                )
                continue
            position = block.offset + block.size + shift
            yield block

    def _assess(self, start: int, exc: Exception) -> tuple[Damage, int | None]:
        """What the broken block at `start` declared, and where reading can go on.

        The count its header declares is believed only when the block's bytes
        in the file (up to the end of the file, for a truncated one) can hold
        that many records; otherwise the number lost is unknowable.
        """
        detail = f"{type(exc).__name__}: {str(exc)[:200]}"
        count, after_count = read_long(self.data, start)
        size, after_size = read_long(self.data, after_count) if count is not None else (None, after_count)
        next_sync = self.data.find(self.sync, start)
        header_ok = count is not None and count > 0 and size is not None and size >= 0
        if next_sync < 0:
            if not header_ok:
                return Damage(
                    None,
                    f"truncated Avro file at byte {start}: the block header is unreadable, "
                    f"so the number of records lost is unknowable ({detail})",
                ), None
            present = min(size, len(self.data) - after_size)
            return self._declared(
                f"truncated Avro block at byte {start}: the file ends inside it", count, present, detail
            ), None
        resume = next_sync + SYNC_SIZE
        if not header_ok or next_sync != after_size + size:
            return Damage(
                None,
                f"corrupt Avro block header at byte {start}: the number of records before the "
                f"next block (byte {resume}) is unknowable ({detail})",
            ), resume
        return self._declared(f"Avro block at byte {start} that does not decode", count, size, detail), resume

    def _declared(self, what: str, count: int, available: int, detail: str) -> Damage:
        """The damage `what` with its header's `count`, believed when the block's `available` bytes
        can hold that many records."""
        if count > most_records(available, *self.bounds):
            return Damage(
                None,
                f"{what}; its header declares {count} records, "
                f"{records_beyond(available, *self.bounds)}, so the number of records lost is "
                f"unknowable ({detail})",
            )
        return Damage(count, f"{what}; its header declares {count} records ({detail})")


def _writer_schema_text(data: bytes) -> bytes:
    """The writer schema in the file's header; empty where the header is unreadable (fastavro says why)."""
    try:
        return fastavro.schemaless_reader(io.BytesIO(data), HEADER_SCHEMA)["meta"]["avro.schema"]
    except Exception:  # noqa: BLE001 - any failure here is fastavro's to describe
        return b""


# The most bytes a block's header (its count and its size, two longs) takes.
BLOCK_HEADER_BYTES = 20


def declared_records(handle: BinaryIO) -> int:
    """How many records the blocks of the Avro file open in `handle` declare, read from their headers
    alone: each block is skipped with a seek, neither read nor decompressed, so a file of millions of
    records costs a few reads a block. Counting stops at a header that is unreadable or declares more
    records than its block's bytes can hold (a damaged or hostile file counts what came before; its
    decode says what is wrong); 0 for a file whose own header is unreadable. An estimate to plan by
    (fleet_goodput/runs/compute.py), never a count of what is read."""
    try:
        header = fastavro.schemaless_reader(handle, HEADER_SCHEMA)
        bounds = (
            record_bytes_at_least(header["meta"]["avro.schema"]),
            header["meta"].get("avro.codec", b"null").decode(),
        )
    except Exception:  # noqa: BLE001 - not an Avro file, or an unsafe schema: nothing to plan by
        return 0
    records, position = 0, handle.tell()
    while True:
        head = handle.read(BLOCK_HEADER_BYTES)
        count, after_count = read_long(head, 0)
        size, after_size = read_long(head, after_count) if count is not None else (None, after_count)
        if count is None or size is None or count <= 0 or size < 0 or count > most_records(size, *bounds):
            return records
        records, position = records + count, position + after_size + size + SYNC_SIZE
        handle.seek(position)


def read_long(data: bytes, position: int) -> tuple[int | None, int]:
    """An Avro (zig-zag varint) long at `position`: (value, position after it), or None if unreadable."""
    value, shift = 0, 0
    while position < len(data) and shift < 64:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), position
        shift += 7
    return None, position


class _HeaderThenRest(io.RawIOBase):
    """The file's header followed by its bytes from `resume` on, as one stream:
    what fastavro needs to go on reading blocks after a damaged one."""

    def __init__(self, data: bytes, header_end: int, resume: int):
        super().__init__()
        self._view = memoryview(data)
        self._header_end = header_end
        self._shift = resume - header_end
        self._length = len(data) - self._shift
        self._position = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        end = self._length if size is None or size < 0 else min(self._length, self._position + size)
        start, self._position = self._position, max(self._position, end)
        head = self._view[start : min(end, self._header_end)] if start < self._header_end else b""
        tail_start = max(start, self._header_end) + self._shift
        tail = self._view[tail_start : end + self._shift] if end > self._header_end else b""
        return bytes(head) + bytes(tail)

    def readinto(self, buffer) -> int:
        chunk = self.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)
