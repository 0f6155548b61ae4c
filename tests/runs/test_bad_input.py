"""Bad input gets a specific reason, nothing is lost, and good results do not move.

The worked example is written shuffled across several files, then joined by
duplicates, a job on an unknown accelerator, records with impossible values,
a file of a foreign schema and a truncated file. The run must give the same
job_window rows as the clean run of the worked example (tests/conftest.py),
name every rejection, and reconcile.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import fastavro
import pytest

from fleet_goodput import schemas
import worked_example
from fleet_goodput.cli import main
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events

T0 = worked_example.T0_US


def _write_shuffled(root: Path, records_by_stream: dict, seed: int) -> None:
    rng = random.Random(seed)
    for stream, records in records_by_stream.items():
        records = list(records)
        rng.shuffle(records)
        for part in range(3):
            write_events(root / stream / f"part-{part}.avro", stream, records[part::3])


def _job_window(output: Path) -> list[tuple]:
    with connect(output) as connection:
        return connection.execute("select * exclude (date) from job_window order by job_id, window_start").fetchall()


def _truncated_avro(stream: str, records: list[dict]) -> bytes:
    """Several small blocks, cut in the middle of the last one."""
    buffer = io.BytesIO()
    fastavro.writer(buffer, schemas.load(stream), records, codec="null", sync_interval=64)
    data = buffer.getvalue()
    return data[: len(data) - 40]


@pytest.fixture(scope="module")
def dirty(tmp_path_factory) -> tuple[Path, Path]:
    root, output = tmp_path_factory.mktemp("dirty_in"), tmp_path_factory.mktemp("dirty_out")
    records = worked_example.records()
    _write_shuffled(root, records, seed=2)
    # Duplicate deliveries of four runtime events.
    write_events(root / "runtime" / "redelivered.avro", "runtime", records["runtime"][2:6])
    # A job on an accelerator the catalogue does not know, with its runtime events.
    submit = {**records["scheduler"][0], "event_id": "j2-submit", "job_id": "j2", "accelerator": "h900"}
    step = {**records["runtime"][4], "event_id": "j2-step", "job_id": "j2"}
    write_events(root / "scheduler" / "unknown.avro", "scheduler", [submit])
    write_events(root / "runtime" / "unknown.avro", "runtime", [step])
    # Records whose values are impossible though the bytes are valid Avro.
    negative = {**records["scheduler"][1], "event_id": "neg", "chips": -8}
    no_duration = {**records["profiler"][0], "event_id": "zero", "duration_s": 0.0}
    write_events(root / "scheduler" / "impossible.avro", "scheduler", [negative])
    write_events(root / "profiler" / "impossible.avro", "profiler", [no_duration])
    # A file written with some other schema, in the runtime folder.
    foreign = fastavro.parse_schema({"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]})
    with open(root / "runtime" / "foreign.avro", "wb") as handle:
        fastavro.writer(handle, foreign, [{"x": 1}, {"x": 2}, {"x": 3}])
    # A truncated file of redelivered events (its readable part is duplicates).
    (root / "runtime" / "truncated.avro").write_bytes(_truncated_avro("runtime", records["runtime"][:10]))
    assert main(["run", "--input", str(root), "--output", str(output)]) == 0
    return root, output


def test_good_results_do_not_move(worked_example_run, dirty):
    """The same rows as the clean worked example's run (tests/conftest.py: one file, in order)."""
    assert _job_window(dirty[1]) == _job_window(worked_example_run[1])


def test_each_rejection_has_its_specific_reason(dirty):
    with connect(dirty[1]) as connection:  # settled and provisional rejections alike
        rows = connection.execute("select stream, coalesce(event_id, '-'), reason, records from rejected").fetchall()
    reasons = {(stream, event_id): reason for stream, event_id, reason, _ in rows}
    assert reasons[("scheduler", "j2-submit")] == "unknown accelerator 'h900': not in the accelerator catalogue"
    assert reasons[("runtime", "j2-step")] == "no SUBMIT for this job at or before this event"
    assert reasons[("scheduler", "neg")] == "negative chips (-8) on ALLOCATE"
    assert reasons[("profiler", "zero")] == "duration_s must be a positive finite number, got 0.0"
    file_level = sorted(
        (reason.split(" (")[0].split(":")[0], records) for stream, event_id, reason, records in rows if event_id == "-"
    )
    assert file_level == [
        ("truncated Avro block at byte 1258", 2),
        ("written with a schema that does not resolve to the runtime v1 schema", 3),
    ]


def test_the_manifest_reconciles_every_event(dirty):
    root, output = dirty
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["reconciles"]
    runtime = manifest["streams"]["runtime"]
    # The truncated file held 10 records: 8 in complete blocks (duplicates of
    # clean ones), 2 in the block it cuts, which its header declares.
    assert runtime == {
        "read": 14 + 4 + 1 + 3 + 10,
        "accepted": 14,
        "duplicate": 4 + 8,
        "rejected": 1 + 3 + 2,
        "late": 0,
        "waiting": 0,
        "reconciles": True,
    }
    assert manifest["streams"]["scheduler"]["rejected"] == 2
    assert manifest["streams"]["profiler"] == {
        "read": 2,
        "accepted": 1,
        "duplicate": 0,
        "rejected": 1,
        "late": 0,
        "waiting": 0,
        "reconciles": True,
    }
