"""The streaming goodput pipeline: unbounded telemetry → versioned goodput tables, committed to the store.

It is the batch pipeline (pipelines/goodput.py) with another source and
another trigger: its sources are unbounded (Pub/Sub on Dataflow; tests pass
one tagged `TestStream` through `DecodeRecords`), and keys advance at each
window end as the watermark passes it (`StreamSessionize`) instead of once to
the run's as-of time, so (job, window) results get a new version as late
events and later resolutions arrive. The tables come out of the batch
pipeline's own tail (`goodput_tables`), and `CommitToStore` commits what
they hold every minute, and when the stream drains, as runs of the Delta
store (transforms/commit.py), on Dataflow as on any runner. A local
`mpg stream` commits one continued batch run per batch of new files instead
(fleet_goodput/runs/stream_run.py).
"""

from __future__ import annotations

import apache_beam as beam

from fleet_goodput import schemas
from fleet_goodput.core.config import Settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.pipelines.goodput import all_of, goodput_tables, key_rules
from fleet_goodput.transforms.pubsub import ReadPubSubEvents
from fleet_goodput.transforms.read import EVENTS
from fleet_goodput.transforms.stream_sessionize import StreamSessionize
from fleet_goodput.transforms.commit import CommitToStore

COMMITTED = ("job_window", "jobs", "capacity_level", "rejected", "late", "counts")


def build_streaming(decoded: dict, settings: Settings, run_settings: RunSettings) -> dict:
    """Decoded streams → {job_window, jobs, capacity_level, rejected, late, counts} PCollections."""
    # Jobs and capacity share one stateful step here (see StreamSessionize).
    sessions = all_of(decoded, EVENTS, "AllEvents") | "SessionizeJobsAndCapacity" >> StreamSessionize(
        key_rules(settings, run_settings)
    )
    return goodput_tables(decoded, sessions)


def read_pubsub_sources(p: beam.Pipeline, settings: Settings, run_settings: RunSettings) -> dict:
    """One Pub/Sub subscription per stream (Dataflow)."""
    missing = [stream for stream in schemas.STREAMS if stream not in run_settings.subscriptions]
    if missing:
        raise ValueError(f"runs.subscriptions needs a subscription for {', '.join(missing)}")
    return {
        stream: p
        | f"Read{stream.title()}" >> ReadPubSubEvents(stream, run_settings.subscriptions[stream], settings.accelerators)
        for stream in schemas.STREAMS
    }


def commit_streaming_outputs(
    outputs: dict, output: str, settings: Settings, run_settings: RunSettings, source: str, **sink
):
    """Commit the tables' rows and the count deltas to the store at `output` (a folder or gs://), a run
    every minute of the stream and one when it drains (`CommitToStore`); returns the committed runs' ids."""
    return {name: outputs[name] for name in COMMITTED} | "CommitToStore" >> CommitToStore(
        output, settings, run_settings, source, **sink
    )
