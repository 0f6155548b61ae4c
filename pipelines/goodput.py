"""The batch goodput pipeline: Avro telemetry (and the store's saved state) → goodput tables.

`build_goodput` wires the business steps on already-decoded streams, so tests
pass `beam.Create` records through `DecodeRecords` where production reads
files; `build_batch` reads the run's new input files and the saved state, and
stages what it computes for the store to commit (fleet_goodput/runs/commit.py).
Run it through the CLI: `mpg run --input DIR --output DIR`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions

from fleet_goodput.core.config import Settings, peak_table
from fleet_goodput.core.continuation import Continuation
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.pipelines.options import ViewCachingOptions, announce_job, runner_class
from fleet_goodput.store.layout import STATE_KEYS_SCHEMA
from fleet_goodput.store.manifest import counts_from_json
from fleet_goodput.store.tables import STATED, TABLES
from fleet_goodput.telemetry.decode import TimeSlice
from fleet_goodput.transforms.goodput import ComputeGoodput
from fleet_goodput.transforms.read import EVENTS, KEPT_TIMES, READ_COUNTS, REJECTED, ReadAvroFiles
from fleet_goodput.transforms.sessionize import (
    CAPACITY,
    COUNTS,
    JOBS,
    LATE,
    PENDING_COUNTS,
    PENDING_REJECTED,
    STATE,
    WINDOW_VECTORS,
    KeyRules,
    SessionizeKeys,
)
from fleet_goodput.transforms.slices import ReadDecodedSlices, SliceFiles, file_groups
from fleet_goodput.transforms.write import StageRows, StageTables

# What a run's pipeline hands back to whoever commits the run: its clock and its counts, as a file
# in the run's staging folder beside the tables it staged. A file, because the committer is not the
# process that computed them: Beam's worker processes (--workers) or Dataflow's workers compute, and
# a Flex Template job commits in a step of its own, on a worker, after the job's writes (launcher.py).
# A pipeline returns nothing else to its launcher, and Beam's metrics carry numbers, not the clock's
# (time, key) list. Written by `_write_tally`, read by `read_tally`, and nowhere else.
TALLY_FILE = "tally.json"
# The runner of a run given no --runner: the default DirectRunner first tries to
# fetch the Prism runner, which hangs offline; the in-process FnApiRunner needs nothing.
DEFAULT_RUNNER = "FnApiRunner"


# The counts output of `_file_under_day`.
FILED_COUNTS = "filed_counts"


def _file_under_day(row: dict, timestamp=beam.DoFn.TimestampParam, as_of_us: int | None = None):
    """A rejected row filed under its event's day; an unreadable one under the run's as-of day
    (batch) or the element's time (a stream), else the epoch. Its count, ((stream, "rejected"),
    records), leaves by `FILED_COUNTS` from the same step: one DoFn instead of a second Map."""
    fallback = as_of_us if as_of_us is not None else max(timestamp.micros, 0)
    yield {**row, "partition_time_us": row["event_time_us"] if row["event_time_us"] is not None else fallback}
    yield beam.pvalue.TaggedOutput(FILED_COUNTS, ((row["stream"], "rejected"), row["records"]))


def file_under_day(rows, label: str, as_of_side=None):
    """`rows` of the rejected table → their filed rows (main) and their counts (`FILED_COUNTS`); `as_of_side`
    is the run's as-of time as a side input (batch), which each row gets as `as_of_us`."""
    return rows | label >> beam.FlatMap(_file_under_day, as_of_us=as_of_side).with_outputs(FILED_COUNTS, main="rows")


def key_rules(settings: Settings, run_settings: RunSettings) -> KeyRules:
    return KeyRules(
        window_s=settings.window_s,
        allowed_lateness_s=run_settings.allowed_lateness_s,
        max_silence_us=run_settings.max_silence_us,
        peak_flops=peak_flops(settings),
    )


def all_of(decoded: dict, tag: str, label: str):
    """One output (`tag`) of every decoded stream, as one PCollection."""
    return [decoded[stream][tag] for stream in decoded] | label >> beam.Flatten()


def build_goodput(
    p: beam.Pipeline,
    decoded: dict,
    settings: Settings,
    given_as_of_us: int | None = None,
    *,
    run_settings: RunSettings | None = None,
    continuation: Continuation = Continuation(),
) -> dict:
    """Decoded streams (+ saved state) → {job_window, jobs, capacity_level, rejected,
    rejected_pending, late, counts, pending_counts, state, as_of, clock} PCollections.

    `decoded` maps each stream name to the tagged outputs of `ReadAvroFiles`
    or `DecodeRecords`; the events output of `ReadAvroFiles` also holds the
    keys the store's last run saved, each with its state. Every key advances
    once, to the run's as-of time, which ends the lifetime of whatever is
    still running: `given_as_of_us` (--as_of), or by default how far the
    scheduler's clock has reached (fleet_goodput/core/asof.py). The streaming
    pipeline (pipelines/streaming.py) is this one with keys advanced at each
    window end instead: both end in `goodput_tables`.
    """
    inputs = {"events": all_of(decoded, EVENTS, "AllEvents"), "kept_times": all_of(decoded, KEPT_TIMES, "AllKeptTimes")}
    sessions = inputs | "SessionizeKeys" >> SessionizeKeys(
        key_rules(settings, run_settings or RunSettings()), continuation, given_as_of_us
    )
    as_of_side = beam.pvalue.AsSingleton(sessions["as_of"])
    tables = goodput_tables(decoded, sessions, as_of_side)
    # A timeline's rejection is of one event (`records` 1): its count is its rows'.
    pending_rejected = file_under_day(sessions[PENDING_REJECTED], "FilePendingUnderDay", as_of_side)
    pending_counts = (
        [sessions[PENDING_COUNTS], pending_rejected[FILED_COUNTS]]
        | "AllPendingCounts" >> beam.Flatten()
        | "SumPendingCounts" >> beam.CombinePerKey(sum)
    )
    return {
        **tables,
        "counts": tables["counts"] | "SumCounts" >> beam.CombinePerKey(sum),
        "rejected_pending": pending_rejected.rows,
        "pending_counts": pending_counts,
        "state": sessions[STATE],
        "as_of": sessions["as_of"],
        "clock": sessions["clock"],
    }


def goodput_tables(decoded: dict, sessions: dict, as_of_side=None) -> dict:
    """The decoded streams' rejections and read counts, and a sessionizer's outputs (batch's
    `SessionizeKeys`, streaming's `StreamSessionize`) → {job_window, jobs, capacity_level,
    rejected, late, counts}: what both pipelines write. Counts are ((stream, outcome), n)
    deltas; a stream appends them, a batch run sums them. `as_of_side` (the run's as-of time
    as a side input, batch only) dates the rejected rows whose event time is unreadable."""
    rejected = file_under_day(
        [decoded[stream][REJECTED] for stream in decoded] + [sessions[REJECTED]] | "AllRejected" >> beam.Flatten(),
        "FileUnderDay",
        as_of_side,
    )
    counts = [decoded[stream][READ_COUNTS] for stream in decoded] + [
        sessions[COUNTS],
        rejected[FILED_COUNTS],
        sessions[LATE] | "CountLate" >> beam.Map(lambda row: ((row["stream"], "late"), 1)),
    ] | "AllCounts" >> beam.Flatten()
    return {
        "job_window": sessions[WINDOW_VECTORS] | "ComputeGoodput" >> ComputeGoodput(),
        "jobs": sessions[JOBS],
        "capacity_level": sessions[CAPACITY],
        "rejected": rejected.rows,
        "late": sessions[LATE],
        "counts": counts,
    }


def peak_flops(settings: Settings) -> dict[str, float]:
    return peak_table(settings.accelerators)


def read_sources(
    p: beam.Pipeline,
    files: dict[str, list[str]],
    state_files: list[str],
    settings: Settings,
    during: TimeSlice | None = None,
    slices: list[str] | None = None,
) -> dict:
    """The run's new Avro files of every stream, decoded and validated (only the events `during` holds);
    or, given `slices`, a backfill chunk's share of them, decoded before (transforms/slices.py); with
    the saved state of `state_files` among the events."""
    if slices is not None:
        return {"files": p | "ReadDecodedSlices" >> ReadDecodedSlices(slices, state_files)}
    return {"files": p | "ReadTelemetry" >> ReadAvroFiles(files, settings.accelerators, during, state_files)}


@dataclass(frozen=True)
class StagedTally:
    """What a run's pipeline reports besides its tables (`TALLY_FILE`)."""

    as_of_us: int | None  # the run's as-of time: given, or how far the scheduler's clock reached
    kept_times: list  # the scheduler's latest and earliest [time, key], which the store keeps (asof.py)
    counts: dict[tuple[str, str], int]  # (stream, outcome) → events
    pending: dict[tuple[str, str], int]  # (stream, outcome) → events that wait for a later run


def _write_tally(clock: dict, counts, pending, staging: str) -> str:
    with beam.io.filesystems.FileSystems.create(f"{staging}/{TALLY_FILE}") as out:
        out.write(
            json.dumps(
                {
                    "as_of_us": clock["as_of_us"],
                    "kept_times": clock["kept_times"],
                    "counts": sorted([list(k), v] for k, v in counts),
                    "pending": sorted([list(k), v] for k, v in pending),
                }
            ).encode()
        )
    return staging


def read_tally(staging: str) -> StagedTally:
    """The tally the run's pipeline staged under `staging`."""
    with beam.io.filesystems.FileSystems.open(f"{staging}/{TALLY_FILE}") as handle:
        tally = json.loads(handle.read())
    return StagedTally(
        tally["as_of_us"], tally["kept_times"], counts_from_json(tally["counts"]), counts_from_json(tally["pending"])
    )


def stage_outputs(outputs: dict, staging: str) -> dict:
    """Stage every table, the saved state and the tally under `staging` for the store to commit;
    returns each write's output (by table name, "state_keys" and "tally"), complete once that write is done."""
    computed = {name: table for name, table in TABLES.items() if name not in STATED}  # what the pipeline computes
    staged = {name: outputs[name] for name in computed} | "StageTables" >> StageTables(computed, staging)
    staged["state_keys"] = outputs["state"] | "StageState" >> StageRows(STATE_KEYS_SCHEMA, f"{staging}/state_keys")
    # The clock output always holds one element, so it carries the one write.
    staged["tally"] = outputs["clock"] | "StageTally" >> beam.Map(
        _write_tally,
        counts=beam.pvalue.AsList(outputs["counts"]),
        pending=beam.pvalue.AsList(outputs["pending_counts"]),
        staging=staging,
    )
    return staged


def build_batch(
    p: beam.Pipeline,
    files: dict[str, list[str]],
    state_files: list[str],
    staging: str,
    settings: Settings,
    run_settings: RunSettings,
    continuation: Continuation,
    given_as_of_us: int | None = None,
    during: TimeSlice | None = None,
    slices: list[str] | None = None,
) -> dict:
    """The whole batch job on `p`: read the files (only the events `during` holds, when given; a
    chunk's `slices` of them, when given) and the saved state, compute, stage; returns the outputs."""
    outputs = build_goodput(
        p,
        read_sources(p, files, state_files, settings, during, slices),
        settings,
        given_as_of_us,
        run_settings=run_settings,
        continuation=continuation,
    )
    outputs["staged"] = stage_outputs(outputs, staging)
    return outputs


def run(
    files: dict[str, list[str]],
    state_files: list[str],
    staging: str,
    settings: Settings,
    run_settings: RunSettings,
    continuation: Continuation,
    given_as_of_us: int | None = None,
    beam_args: list[str] | None = None,
    during: TimeSlice | None = None,
    slices: list[str] | None = None,
) -> None:
    """Build and run the batch pipeline: everything it computes is staged under `staging`.
    With `during`, it computes only the events of that chunk of event time (a backfill's); with
    `slices`, only those, which `slice_files` wrote for the chunk."""
    p, options = _pipeline(beam_args)
    build_batch(p, files, state_files, staging, settings, run_settings, continuation, given_as_of_us, during, slices)
    _run_built(p, options)


def slice_files(
    files: list[tuple[str, str, int]],
    settings: Settings,
    chunks: list[TimeSlice],
    folder: str,
    beam_args: list[str] | None = None,
) -> None:
    """Run the pipeline that decodes each of the (stream, path, size) `files` once and writes its share
    of each of a backfill's `chunks` under `folder` (transforms/slices.py)."""
    p, options = _pipeline(beam_args)
    _ = p | "SliceFiles" >> SliceFiles(file_groups(files), settings.accelerators, chunks, folder)
    _run_built(p, options)


def _pipeline(beam_args: list[str] | None) -> tuple[beam.Pipeline, ViewCachingOptions]:
    """A pipeline with the run's options: `beam_args`, the in-process runner if none is given."""
    args = list(beam_args or [])
    if not any(arg.startswith("--runner") for arg in args):
        args.append(f"--runner={DEFAULT_RUNNER}")
    if "--no_pipeline_type_check" not in args:
        # Beam infers each step's output type from its bytecode as the graph is built: a
        # third of building it (60 of 185 ms), paid by every run, for coders that these
        # steps' plain tuples, strings and bytes do not need.
        args.append("--no_pipeline_type_check")
    options = ViewCachingOptions(args)
    standard = options.view_as(StandardOptions)
    standard.runner = runner_class(standard.runner)  # a short name Beam does not know (`--runner dask`)
    return beam.Pipeline(options=options), options


def _run_built(p: beam.Pipeline, options: ViewCachingOptions) -> None:
    """Run the built pipeline `p` and wait for it to finish."""
    result = p.run()
    announce_job(result, options)  # before waiting: a Dataflow job runs for minutes
    result.wait_until_finish()
