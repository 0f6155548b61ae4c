"""The streaming goodput pipeline: unbounded telemetry → versioned goodput tables.

`build_streaming` wires the same steps as the batch pipeline on decoded
streams (tests pass one tagged `TestStream`); the sessionizers update
(job, window) results as the watermark passes window ends and as late events
and later resolutions arrive. On Dataflow it reads Pub/Sub subscriptions
(`mpg stream` with `streaming.source: pubsub`); a local `mpg stream` commits
one continued batch run per batch of new files instead (fleet_goodput/stream_run.py).
"""

from __future__ import annotations

import apache_beam as beam

from fleet_goodput import schemas
from fleet_goodput.config import Settings
from fleet_goodput.stream_settings import StreamSettings
from fleet_goodput.tables import TABLES
from fleet_goodput.pipelines.goodput import peak_flops
from fleet_goodput.transforms.goodput import ComputeGoodput
from fleet_goodput.transforms.read import EVENTS, READ_COUNTS, REJECTED
from fleet_goodput.transforms.sessionize import CAPACITY, COUNTS, JOBS, LATE, WINDOW_VECTORS
from fleet_goodput.transforms.stream_sessionize import StreamSessionize
from fleet_goodput.transforms.pubsub import ReadPubSubEvents
from fleet_goodput.transforms.write import AppendCounts, AppendTable


def _with_partition_time(row: dict, timestamp=beam.DoFn.TimestampParam) -> dict:
    """Rejected rows are filed under their event's day; unreadable ones under the element's time."""
    if row.get("partition_time_us") is not None:
        return row
    fallback = timestamp.micros if timestamp.micros > 0 else 0
    return {**row, "partition_time_us": row["event_time_us"] if row["event_time_us"] is not None else fallback}


def build_streaming(decoded: dict, settings: Settings, stream_settings: StreamSettings) -> dict:
    """Decoded streams → {job_window, jobs, capacity_level, rejected, late, counts} PCollections."""
    events = [decoded[stream][EVENTS] for stream in decoded] | "AllEvents" >> beam.Flatten()
    # Jobs and capacity share one stateful step here (see StreamSessionize).
    sessions = events | "SessionizeJobsAndCapacity" >> StreamSessionize(
        settings.window_s, stream_settings.allowed_lateness_s, stream_settings.max_silence_s, peak_flops(settings))
    job_window = sessions[WINDOW_VECTORS] | "ComputeGoodput" >> ComputeGoodput()
    rejected = (
        [decoded[stream][REJECTED] for stream in decoded] + [sessions[REJECTED]]
        | "AllRejected" >> beam.Flatten()
        | "FileUnderDay" >> beam.Map(_with_partition_time)
    )
    late = sessions[LATE]
    counts = (
        [decoded[stream][READ_COUNTS] for stream in decoded]
        + [sessions[COUNTS],
           rejected | "CountRejected" >> beam.Map(lambda row: ((row["stream"], "rejected"), row["records"])),
           late | "CountLate" >> beam.Map(lambda row: ((row["stream"], "late"), 1))]
        | "AllCounts" >> beam.Flatten()
    )
    return {"job_window": job_window, "jobs": sessions[JOBS], "capacity_level": sessions[CAPACITY],
            "rejected": rejected, "late": late, "counts": counts}


def read_pubsub_sources(p: beam.Pipeline, settings: Settings, stream_settings: StreamSettings) -> dict:
    """One Pub/Sub subscription per stream (Dataflow)."""
    missing = [stream for stream in schemas.STREAMS if stream not in stream_settings.subscriptions]
    if missing:
        raise ValueError(f"streaming.subscriptions needs a subscription for {', '.join(missing)}")
    return {stream: p | f"Read{stream.title()}" >> ReadPubSubEvents(
                stream, stream_settings.subscriptions[stream], settings.accelerators)
            for stream in schemas.STREAMS}


def write_streaming_outputs(outputs: dict, output_dir: str) -> None:
    for name in ("job_window", "jobs", "capacity_level", "rejected", "late"):
        outputs[name] | f"Append_{name}" >> AppendTable(TABLES[name], output_dir)
    outputs["counts"] | "AppendCounts" >> AppendCounts(output_dir)
