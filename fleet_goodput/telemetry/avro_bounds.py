"""What an Avro file's own numbers may claim, checked before fastavro acts on them.

fastavro believes a file: it follows a value as deep as the writer schema lets
it nest (a recursive type nested 500,000 deep overflows the C stack), loops as
many times as an array's count says (2^40 items of `null` take no bytes, so no
end of file stops the loop), and a block header's record count is whatever it
declares. This module checks the writer schema before fastavro is handed the
file, and gives the bound every declared count is held to: a record takes at
least `record_bytes_at_least` bytes, so N records need N times that many bytes
of (decompressed) block data.

A writer schema is refused, with the reason, when it
- nests deeper than `MAX_SCHEMA_DEPTH` (no telemetry schema comes near it),
- holds a recursive type (a value of it nests as deep as its bytes allow),
- holds an array whose items can take no bytes (null, an empty record, a
  fixed of size 0): its count is bounded by nothing in the file, so the only
  sane maximum for such an array is none at all; the contract has no arrays,
  and a writer that adds one of nothing carries no telemetry in it,
- or makes a record that can take no bytes (then a block's count is bounded
  by nothing either; such a record cannot hold the contract's fields).
"""

from __future__ import annotations

import json

MAX_SCHEMA_DEPTH = 64
# The fewest bytes a value of each primitive type takes in Avro's binary encoding.
PRIMITIVE_BYTES = {"null": 0, "boolean": 1, "int": 1, "long": 1, "float": 4, "double": 8, "bytes": 1, "string": 1}
# The most bytes one byte of block data can decompress to, per codec: what a
# damaged block, whose data cannot be decompressed, could have held. deflate's
# is 1032 (the zlib technical details); snappy's 22 (a 3-byte copy makes at
# most 64 bytes). Codecs whose bound is far higher (bzip2, xz, zstandard) are
# held to deflate's: a damaged block of theirs that declares more records
# than that is counted as unknowable, never as more than a file could hold.
MAX_EXPANSION = {"null": 1, "snappy": 22}
DEFAULT_MAX_EXPANSION = 1032


class UnsafeSchema(Exception):
    """A writer schema that fastavro cannot be trusted to decode in bounded time, memory or stack."""


def record_bytes_at_least(schema_text: str | bytes) -> int:
    """The fewest bytes a record of this writer schema (the file's `avro.schema`) takes.

    Raises `UnsafeSchema` naming what makes the schema unsafe to decode.
    Malformed schemas are left for fastavro to describe (at least 1 byte here).
    """
    try:
        schema = json.loads(schema_text)
    except RecursionError:
        raise UnsafeSchema(f"its writer schema nests deeper than {MAX_SCHEMA_DEPTH} levels") from None
    except ValueError:
        return 1  # not JSON: fastavro says so
    try:
        smallest = _SchemaWalk().bytes_at_least(schema, "", 0)
    except (KeyError, TypeError, AttributeError, ValueError):
        return 1  # malformed: fastavro says how
    if smallest == 0:
        raise UnsafeSchema(
            "a record of its writer schema can take no bytes at all, so nothing in the file "
            "bounds how many records a block holds"
        )
    return smallest


def most_records(available_bytes: int, record_bytes: int, codec: str = "null") -> int:
    """The most records `available_bytes` of block data of `codec` can hold."""
    return max(available_bytes, 0) * MAX_EXPANSION.get(codec, DEFAULT_MAX_EXPANSION) // record_bytes


def records_beyond(available_bytes: int, record_bytes: int, codec: str = "null") -> str:
    """Why a declared count is not believed: what `available_bytes` of block data can hold."""
    most = most_records(available_bytes, record_bytes, codec)
    if codec == "null":
        return (
            f"more than its {available_bytes} bytes can hold (at most {most}: a record takes {record_bytes} "
            "bytes or more)"
        )
    return (
        f"more than its {available_bytes} bytes of {codec} data can hold (at most {most}: a record takes "
        f"{record_bytes} bytes or more, and {codec} makes {MAX_EXPANSION.get(codec, DEFAULT_MAX_EXPANSION)} "
        "bytes of one at most)"
    )


class _SchemaWalk:
    """One pass over a schema's JSON: depth, recursion, arrays of nothing, and each type's smallest size."""

    def __init__(self):
        self.sizes: dict[str, int] = {}  # named types defined so far → their smallest size
        self.defining: set[str] = set()  # named types whose definition the walk is inside

    def bytes_at_least(self, schema, namespace: str, depth: int) -> int:
        if depth > MAX_SCHEMA_DEPTH:
            raise UnsafeSchema(f"its writer schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        if isinstance(schema, str):
            return PRIMITIVE_BYTES[schema] if schema in PRIMITIVE_BYTES else self._reference(schema, namespace)
        if isinstance(schema, list):  # a union: the branch's index, then the branch
            return 1 + min((self.bytes_at_least(branch, namespace, depth + 1) for branch in schema), default=0)
        kind = schema["type"]
        if isinstance(kind, (dict, list)):
            return self.bytes_at_least(kind, namespace, depth + 1)
        if kind in ("record", "error"):
            return self._record(schema, namespace, depth)
        if kind == "array":
            if self.bytes_at_least(schema["items"], namespace, depth + 1) == 0:
                raise UnsafeSchema(
                    f"its writer schema has an array of items that take no bytes "
                    f"({json.dumps(schema['items'])[:80]}): such an array can claim any number "
                    "of items without the file holding them"
                )
            return 1  # its item count, even when 0
        if kind == "map":
            self.bytes_at_least(schema["values"], namespace, depth + 1)
            return 1  # its entry count; every entry's key takes a byte at least
        if kind in ("enum", "fixed"):
            size = 1 if kind == "enum" else int(schema["size"])
            self.sizes[_full_name(schema["name"], schema.get("namespace", namespace))] = size
            return size
        return self.bytes_at_least(kind, namespace, depth)  # a primitive with attributes, or a named type's name

    def _record(self, schema: dict, namespace: str, depth: int) -> int:
        name = _full_name(schema["name"], schema.get("namespace", namespace))
        inner = name.rpartition(".")[0]
        self.defining.add(name)
        size = sum(self.bytes_at_least(field["type"], inner, depth + 1) for field in schema["fields"])
        self.defining.discard(name)
        self.sizes[name] = size
        return size

    def _reference(self, name: str, namespace: str) -> int:
        candidates = (_full_name(name, namespace), name)
        if self.defining.intersection(candidates):
            raise UnsafeSchema(
                f"its writer schema's type {name} contains itself: a value of a recursive type "
                "nests as deep as the file's bytes go, deeper than a decoder can follow"
            )
        return next((self.sizes[c] for c in candidates if c in self.sizes), 1)  # unknown: fastavro says so


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"
