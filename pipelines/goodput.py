"""The batch goodput pipeline: Avro telemetry → goodput tables.

`build_goodput` wires the business steps on already-decoded streams, so tests
pass `beam.Create` records through `DecodeRecords` where production reads
files; `run` parses options, reads the input folder and writes the tables.
Run it through the CLI: `mpg run --input DIR --output DIR`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import schemas
from fleet_goodput.config import Settings, peak_table
from fleet_goodput.decode import CAPACITY_KEY_PREFIX
from fleet_goodput.tables import TABLES
from transforms.goodput import ComputeGoodput
from transforms.read import EVENTS, READ_COUNTS, REJECTED, ReadAvroFiles
from transforms.sessionize import CAPACITY, COUNTS, JOBS, WINDOW_VECTORS, MeasureCapacity, SessionizeJobs
from transforms.write import WriteTable

COUNTS_FILE = "_run/counts.json"


def _latest_event_time(keyed_batch) -> int:
    return max(event[0] for event in keyed_batch[1])


class AsOfFn(beam.CombineFn):
    """The as-of time: the one given, or else the latest event time seen.

    Derived from the events even when given, so the side input always hangs
    off the input graph (an independent `Create` feeding a side input of a
    stateful DoFn was mis-wired as its main input in Beam 2.77's TestPipeline).
    """

    def __init__(self, given_us: int | None):
        self.given_us = given_us

    def create_accumulator(self):
        return None

    def add_input(self, latest, time_us):
        return time_us if latest is None else max(latest, time_us)

    def merge_accumulators(self, accumulators):
        return max((a for a in accumulators if a is not None), default=None)

    def extract_output(self, latest):
        return self.given_us if self.given_us is not None else latest


def job_or_capacity(keyed_batch, partitions: int) -> int:
    return int(keyed_batch[0].startswith(CAPACITY_KEY_PREFIX))


def _partition_time(row: dict, as_of_us: int) -> dict:
    """Rejected rows are filed under their event's day, or the as-of day when unreadable."""
    return {**row, "partition_time_us": row["event_time_us"] if row["event_time_us"] is not None else as_of_us}


def build_goodput(p: beam.Pipeline, decoded: dict, settings: Settings, as_of_us: int | None = None) -> dict:
    """Decoded streams → {job_window, jobs, capacity_window, rejected, counts} PCollections.

    `decoded` maps each stream name to the tagged outputs of `ReadAvroFiles`
    or `DecodeRecords`. `as_of_us` ends the lifetime of whatever is still
    running; by default it is the latest accepted event time.
    """
    events = [decoded[stream][EVENTS] for stream in decoded] | "AllEvents" >> beam.Flatten()
    as_of = (
        events
        | "LatestEventTime" >> beam.Map(_latest_event_time)
        | "AsOf" >> beam.CombineGlobally(AsOfFn(as_of_us))
    )
    as_of_side = beam.pvalue.AsSingleton(as_of)

    job_events, capacity_events = events | "SplitJobsFromCapacity" >> beam.Partition(job_or_capacity, 2)
    jobs = job_events | "SessionizeJobs" >> SessionizeJobs(settings.window_s, peak_flops(settings), as_of_side)
    capacity = capacity_events | "MeasureCapacity" >> MeasureCapacity(settings.window_s, as_of_side)
    job_window = jobs[WINDOW_VECTORS] | "ComputeGoodput" >> ComputeGoodput()

    rejected = (
        [decoded[stream][REJECTED] for stream in decoded] + [jobs[REJECTED], capacity[REJECTED]]
        | "AllRejected" >> beam.Flatten()
        | "FileUnderDay" >> beam.Map(_partition_time, as_of_us=as_of_side)
    )
    rejected_counts = rejected | "CountRejected" >> beam.Map(lambda row: ((row["stream"], "rejected"), row["records"]))
    counts = (
        [decoded[stream][READ_COUNTS] for stream in decoded] + [jobs[COUNTS], capacity[COUNTS], rejected_counts]
        | "AllCounts" >> beam.Flatten()
        | "SumCounts" >> beam.CombinePerKey(sum)
    )
    return {
        "job_window": job_window,
        "jobs": jobs[JOBS],
        "capacity_window": capacity[CAPACITY],
        "rejected": rejected,
        "counts": counts,
        "as_of": as_of,
    }


def peak_flops(settings: Settings) -> dict[str, float]:
    return peak_table(settings.accelerators)


def read_sources(p: beam.Pipeline, input_dir: str, settings: Settings) -> dict:
    """Every `INPUT/<stream>/*.avro` file, decoded and validated."""
    return {
        stream: p | f"Read{stream.title()}" >> ReadAvroFiles(stream, f"{input_dir.rstrip('/')}/{stream}/*.avro", settings.accelerators)
        for stream in schemas.STREAMS
    }


def _write_counts(counts_and_as_of, output_dir: str) -> None:
    counts, as_of_us = counts_and_as_of
    with beam.io.filesystems.FileSystems.create(f"{output_dir.rstrip('/')}/{COUNTS_FILE}") as out:
        out.write(json.dumps({"as_of_us": as_of_us, "counts": sorted([list(k), v] for k, v in counts)}).encode())


def write_outputs(outputs: dict, output_dir: str) -> None:
    for name, table in TABLES.items():
        if name in outputs:  # `late` exists only in streaming
            outputs[name] | f"Write_{name}" >> WriteTable(table, output_dir)
    (
        outputs["counts"]
        | "CollectCounts" >> beam.combiners.ToList()
        | "WithAsOf" >> beam.Map(lambda counts, as_of_us: (counts, as_of_us), as_of_us=beam.pvalue.AsSingleton(outputs["as_of"]))
        | "WriteCounts" >> beam.Map(_write_counts, output_dir=output_dir)
    )


def build_batch(p: beam.Pipeline, input_dir: str, output_dir: str, settings: Settings,
                as_of_us: int | None = None) -> dict:
    """The whole batch job on `p`: read INPUT, compute, write OUTPUT; returns the outputs."""
    outputs = build_goodput(p, read_sources(p, input_dir, settings), settings, as_of_us)
    write_outputs(outputs, output_dir)
    return outputs


@dataclass(frozen=True)
class BatchRun:
    as_of_us: int | None
    counts: dict[tuple[str, str], int]


def run(input_dir: str, output_dir: str, settings: Settings, as_of_us: int | None = None,
        beam_args: list[str] | None = None) -> BatchRun:
    """Build and run the batch pipeline; returns the counts it wrote."""
    args = list(beam_args or [])
    if not any(arg.startswith("--runner") for arg in args):
        # The default DirectRunner first tries to fetch the Prism runner, which
        # hangs offline; the in-process FnApiRunner needs nothing.
        args.append("--runner=FnApiRunner")
    with beam.Pipeline(options=PipelineOptions(args)) as p:
        build_batch(p, input_dir, output_dir, settings, as_of_us)
    return read_counts(output_dir)


def read_counts(output_dir: str) -> BatchRun:
    with beam.io.filesystems.FileSystems.open(f"{output_dir.rstrip('/')}/{COUNTS_FILE}") as handle:
        raw = json.loads(handle.read())
    return BatchRun(raw["as_of_us"], {tuple(key): value for key, value in raw["counts"]})
