"""Avro schemas of the telemetry contract (docs/metric.md section 2), version 1.

`load(stream)` returns the parsed schema, used both to write and (as the
reader schema) to read, so a file written with an incompatible schema fails
loudly at its header instead of yielding odd records.

Version 1 evolves only by added fields with defaults, which Avro's schema
resolution fills in when it reads a file written before them: the profiler
schema gained `precision` (null = bf16) that way, and
tests/telemetry/test_schemas.py reads a file written with the schema as it was before.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources

STREAMS = ("scheduler", "runtime", "profiler")
VERSION = 1


def schema_path(stream: str, version: int = VERSION):
    if stream not in STREAMS:
        raise ValueError(f"unknown stream {stream!r}; expected one of {', '.join(STREAMS)}")
    return resources.files(__name__) / f"{stream}_event.v{version}.avsc"


@cache
def schema_json(stream: str, version: int = VERSION) -> dict:
    return json.loads(schema_path(stream, version).read_text())


@cache
def load(stream: str, version: int = VERSION) -> dict:
    """The parsed writer schema of a stream."""
    import fastavro  # here, not at the top: the streams' names are read where no Avro is (`mpg --help`)

    return fastavro.parse_schema(copy.deepcopy(schema_json(stream, version)))
