"""Decompressing Avro blocks with a bound, so a decompression bomb is a rejected block, not an exhausted machine.

An Avro block is compressed as a whole, and fastavro decompresses each block
it reads in one call: a 1 MB deflate block can expand to about 1 GB. A
block of real telemetry holds some thousands of records (a few MB at most),
so a block that decompresses to more than `MAX_BLOCK_BYTES` is taken for
what it is: each codec here stops decompressing there and raises
`BlockTooLarge`, which the decoders report as a damaged block with its
reason (fleet_goodput/telemetry/avro_blocks.py), and the rest of the file goes on.

`install()` puts these readers in fastavro's table of block readers
(`fastavro.read.BLOCK_READERS`, the table fastavro looks codecs up in, which
it documents for adding codecs), so every fastavro read in the process is
bounded; `check_block` bounds the blocks the columnar fast path hands to
polars (fleet_goodput/telemetry/columnar.py), which decompresses them itself.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from io import BytesIO

MAX_BLOCK_BYTES = 64 << 20


class BlockTooLarge(ValueError):
    """A block that decompresses to more than MAX_BLOCK_BYTES."""


def _too_large(codec: str) -> BlockTooLarge:
    return BlockTooLarge(
        f"a {codec} block that decompresses to more than {MAX_BLOCK_BYTES >> 20} MiB "
        "(a decompression bomb?): not decompressed further"
    )


def _incremental(decompressor, data: bytes, codec: str) -> bytes:
    """`data` through an incremental decompressor that stops one byte past the bound."""
    out = decompressor.decompress(data, MAX_BLOCK_BYTES + 1)
    if len(out) > MAX_BLOCK_BYTES:
        raise _too_large(codec)
    return out


def decompress(codec: str, data: bytes) -> bytes:
    """A block's bytes (as the container holds them, CRC included for snappy) decompressed, bounded."""
    if codec == "null":
        return data
    if codec == "deflate":
        return _incremental(zlib.decompressobj(-15), data, codec)
    if codec == "bzip2":
        return _incremental(bz2.BZ2Decompressor(), data, codec)
    if codec == "xz":
        return _incremental(lzma.LZMADecompressor(), data, codec)
    if codec == "zstandard":
        from backports import zstd

        return _incremental(zstd.ZstdDecompressor(), data, codec)
    if codec == "snappy":
        from cramjam import snappy

        body = data[:-4]  # a CRC32 follows the compressed bytes
        if _snappy_length(body) > MAX_BLOCK_BYTES:  # raw snappy starts with the length it expands to
            raise _too_large(codec)
        return bytes(snappy.decompress_raw(body))
    if codec == "lz4":
        import lz4.block

        declared = int.from_bytes(data[:4], "little")  # lz4.block's size prefix
        if declared > MAX_BLOCK_BYTES:
            raise _too_large(codec)
        return lz4.block.decompress(data)
    raise ValueError(f"unknown Avro codec {codec!r}")


def _snappy_length(body: bytes) -> int:
    length = shift = 0
    for byte in body[:10]:
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return length
        shift += 7
    return 1 << 62  # no length header: not a snappy block


def _read_long(fo) -> int:
    """A zig-zag varint long from a file object (how a container frames a block's size)."""
    shift = accumulated = 0
    while True:
        byte = fo.read(1)
        if not byte:
            raise EOFError("the file ends inside a block's size")
        accumulated |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return (accumulated >> 1) ^ -(accumulated & 1)
        shift += 7
        if shift > 63:
            raise ValueError("an Avro long longer than 10 bytes")


def _reader(codec: str):
    def read_block(fo):
        size = _read_long(fo)
        data = fo.read(size)
        if len(data) != size:
            raise EOFError(f"the file ends inside a {codec} block")
        return BytesIO(decompress(codec, data))

    read_block.__name__ = f"bounded_{codec}_read_block"
    return read_block


def install() -> None:
    """Bound every compressed codec fastavro reads in this process (idempotent)."""
    import fastavro.read

    for codec in ("deflate", "bzip2", "xz", "zstandard", "snappy", "lz4"):
        fastavro.read.BLOCK_READERS[codec] = _reader(codec)


# Deflate never expands a byte to more than 1032 (RFC 1951's longest match from the shortest code):
# a block that small cannot pass the bound, so checking it would only decompress it twice.
DEFLATE_MAX_EXPANSION = 1032


def check_block(codec: str, data: bytes) -> None:
    """Raise BlockTooLarge if the block would decompress past the bound (what it decompresses to is discarded)."""
    if codec == "null" or (codec == "deflate" and len(data) * DEFLATE_MAX_EXPANSION <= MAX_BLOCK_BYTES):
        return
    decompress(codec, data)
