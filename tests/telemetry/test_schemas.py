"""Every example record of schemas/examples/ passes or fails as it says.

A record fails either the Avro schema itself (fastavro's validation) or the
contract's rules that Avro cannot express (the pipeline's validators).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import fastavro
import fastavro.validation
import pytest

from fleet_goodput import schemas
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.events import Sample, Submit
from fleet_goodput.telemetry.avro_io import write_events
from fleet_goodput.telemetry.decode import VALIDATORS, Invalid, decode_file

ACCELERATORS = load_settings().accelerators
FIXTURES = Path(__file__).parents[1] / "data"


def _examples():
    for stream in schemas.STREAMS:
        path = resources.files(schemas) / "examples" / f"{stream}_event.v{schemas.VERSION}.json"
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
    """Schemas evolve only by adding fields with defaults (docs/metric.md section 2):
    every optional field of v1 carries a default."""
    for field in schemas.schema_json(stream)["fields"]:
        if isinstance(field["type"], list) and "null" in field["type"]:
            assert "default" in field, f"{stream}.{field['name']} is nullable but has no default"


def test_profiler_files_written_before_the_precision_field_still_read_as_bf16(tmp_path):
    """`precision` was added to the profiler schema with a default (docs/metric.md section 2):
    a file written with the schema as it was before reads, each sample with precision None."""
    old_schema = fastavro.parse_schema(json.loads((FIXTURES / "profiler_event.v1-before-precision.avsc").read_text()))
    assert "precision" not in {field["name"] for field in old_schema["fields"]}
    record = {
        "event_id": "p1",
        "event_time": 1767225600000000,
        "job_id": "j1",
        "step": 5,
        "duration_s": 1.5,
        "chips": 8,
        "ideal_flops": 7.88e15,
        "flops_source": "HLO_UNOPTIMIZED",
        "bytes_accessed": None,
    }
    path = tmp_path / "old.avro"
    with open(path, "wb") as handle:
        fastavro.writer(handle, old_schema, [record, {**record, "event_id": "p2", "step": 6}])
    with open(path, "rb") as handle:
        decoded = decode_file("profiler", str(path), handle, ACCELERATORS)
    assert decoded.rejected == [] and decoded.read == 2
    samples = [Sample(*event[4]) for event in decoded.batches["j1"]]
    assert [(s.step, s.ideal_flops, s.precision) for s in samples] == [(5, 7.88e15, None), (6, 7.88e15, None)]


def test_a_precision_written_by_the_current_schema_reaches_the_sample(tmp_path):
    record = {
        "event_id": "p1",
        "event_time": 1767225600000000,
        "job_id": "j1",
        "step": 5,
        "duration_s": 1.5,
        "chips": 8,
        "ideal_flops": 7.88e15,
        "flops_source": "ANALYTIC",
        "bytes_accessed": None,
        "precision": "fp8",
    }
    path = tmp_path / "new.avro"
    write_events(path, "profiler", [record])
    with open(path, "rb") as handle:
        decoded = decode_file("profiler", str(path), handle, ACCELERATORS)
    assert Sample(*decoded.batches["j1"][0][4]).precision == "fp8"


def test_scheduler_files_written_before_the_queue_field_still_read_with_no_queue(tmp_path):
    """`queue` was added to the scheduler schema with a default: a SUBMIT written before it reads, its
    queue None, and one written with it carries it to the event."""
    old_schema = fastavro.parse_schema(json.loads((FIXTURES / "scheduler_event.v1-before-queue.avsc").read_text()))
    assert "queue" not in {field["name"] for field in old_schema["fields"]}
    submit = {
        "event_id": "s1",
        "event_time": 1767225600000000,
        "job_id": "j1",
        "type": "SUBMIT",
        "cluster": "c1",
        "accelerator": "h100",
        "chips": 8,
        "workload": None,
        "framework": None,
        "team": "llm",
        "topology": None,
        "priority": 3,
    }
    with open(tmp_path / "old.avro", "wb") as handle:
        fastavro.writer(handle, old_schema, [submit])
    write_events(tmp_path / "new.avro", "scheduler", [{**submit, "queue": "cq/llm/lq"}])
    queues = []
    for name in ("old.avro", "new.avro"):
        with open(tmp_path / name, "rb") as handle:
            decoded = decode_file("scheduler", str(tmp_path / name), handle, ACCELERATORS)
        assert decoded.rejected == []
        queues.append(Submit(*decoded.batches["j1"][0][4]))
    assert [(s.team, s.priority, s.queue) for s in queues] == [("llm", 3, None), ("llm", 3, "cq/llm/lq")]


def test_scheduler_files_written_before_the_reason_field_still_read(tmp_path):
    """`reason` was added to the scheduler schema with a default (docs/metric.md section 2): a file
    written without it reads, each event's reason None; one written with it carries it to the event."""
    current = schemas.schema_json("scheduler")
    old_schema = fastavro.parse_schema({**current, "fields": [f for f in current["fields"] if f["name"] != "reason"]})
    base = {
        "event_time": 1767225600000000,
        "job_id": "j1",
        "cluster": "c1",
        "accelerator": "h100",
        "workload": None,
        "framework": None,
        "team": None,
        "topology": None,
        "priority": None,
    }
    records = [
        {**base, "event_id": "s1", "type": "SUBMIT", "chips": 8},
        {**base, "event_id": "s2", "type": "PREEMPT", "chips": 0},
        {**base, "event_id": "s3", "type": "FAIL", "chips": 0},
    ]
    old, new = tmp_path / "old.avro", tmp_path / "new.avro"
    with open(old, "wb") as handle:
        fastavro.writer(handle, old_schema, records)
    write_events(
        new,
        "scheduler",
        [
            {**records[0], "reason": None},
            {**records[1], "reason": "PREEMPTED"},
            {**records[2], "reason": "NODE_FAIL: xid 79"},
        ],
    )
    payloads = {}
    for path in (old, new):
        with open(path, "rb") as handle:
            decoded = decode_file("scheduler", str(path), handle, ACCELERATORS)
        assert decoded.rejected == [] and decoded.read == 3
        payloads[path.stem] = [event[4] for event in decoded.batches["j1"][1:]]
    assert payloads == {"old": [(0, None), (None,)], "new": [(0, "PREEMPTED"), ("NODE_FAIL: xid 79",)]}
