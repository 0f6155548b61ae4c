"""One job's streams in tests: its scheduler stream written as a cluster's exporter would (to put an importer's
or the recorder's runtime events beside, as a fleet combines a job's streams), and a stream read back with
fastavro alone."""

from __future__ import annotations

from pathlib import Path

import fastavro

from fleet_goodput.telemetry.avro_io import write_events


def write_job_scheduler(
    input_dir: Path, job_id: str, chips: int, submit_us: int, finish_us: int, accelerator: str = "tpu-v5e"
) -> None:
    """SUBMIT and ALLOCATE of all `chips` at `submit_us`, FINISH at `finish_us`, into INPUT/scheduler/."""
    events = [("SUBMIT", submit_us, chips), ("ALLOCATE", submit_us, chips), ("FINISH", finish_us, 0)]
    write_events(
        Path(input_dir, "scheduler", f"{job_id}.avro"),
        "scheduler",
        [
            {
                "event_id": f"{job_id}/s{n}",
                "event_time": time_us,
                "job_id": job_id,
                "type": type_,
                "cluster": "c",
                "accelerator": accelerator,
                "chips": count,
                "workload": "TRAINING" if type_ == "SUBMIT" else None,
                "framework": None,
                "team": None,
                "topology": None,
                "priority": None,
            }
            for n, (type_, time_us, count) in enumerate(events)
        ],
    )


def read_stream(input_dir: Path, stream: str) -> list[dict]:
    """Every record of INPUT/stream/*.avro, in (event time, event id) order."""
    records = []
    for path in sorted(Path(input_dir, stream).glob("*.avro")):
        with open(path, "rb") as handle:
            records += list(fastavro.reader(handle))
    return sorted(records, key=lambda r: (r["event_time"], r["event_id"]))


def micros(record: dict) -> int:
    """A record's event time in µs since the epoch (fastavro gives timestamp-micros as an aware datetime)."""
    moment = record["event_time"]
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond
