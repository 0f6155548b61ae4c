"""Every example record of schemas/examples/ passes or fails as it says.

A record fails either the Avro schema itself (fastavro's validation) or the
contract's rules that Avro cannot express (the pipeline's validators).
"""

from __future__ import annotations

import json
from importlib import resources

import fastavro
import fastavro.validation
import pytest

import schemas
from fleet_goodput.config import load_settings
from fleet_goodput.decode import VALIDATORS, Invalid

ACCELERATORS = load_settings().accelerators


def _examples():
    for stream in schemas.STREAMS:
        path = resources.files("schemas") / "examples" / f"{stream}_event.v{schemas.VERSION}.json"
        for example in json.loads(path.read_text())["examples"]:
            yield pytest.param(stream, example, id=f"{stream}: {example['name']}")


@pytest.mark.parametrize(("stream", "example"), list(_examples()))
def test_example_record(stream, example):
    record = example["record"]
    schema_valid = fastavro.validation.validate(record, schemas.load(stream), raise_errors=False)
    if example["expect"] == "fail" and example["reason"] == "schema":
        assert not schema_valid
        return
    assert schema_valid
    if example["expect"] == "pass":
        key, event = VALIDATORS[stream](dict(record), ACCELERATORS)
        assert event.event_id == record["event_id"] and event.time_us == record["event_time"]
    else:
        with pytest.raises(Invalid, match=example["reason"]):
            VALIDATORS[stream](dict(record), ACCELERATORS)


def test_every_stream_has_passing_and_failing_examples():
    kinds = {(stream, example.values[1]["expect"]) for example in _examples() for stream in [example.values[0]]}
    assert kinds == {(stream, expect) for stream in schemas.STREAMS for expect in ("pass", "fail")}


@pytest.mark.parametrize("stream", schemas.STREAMS)
def test_new_fields_have_defaults_so_version_1_readers_keep_working(stream):
    """Schemas evolve only by adding fields with defaults (MPG.md section 2):
    every optional field of v1 carries a default."""
    for field in schemas.schema_json(stream)["fields"]:
        if isinstance(field["type"], list) and "null" in field["type"]:
            assert "default" in field, f"{stream}.{field['name']} is nullable but has no default"
