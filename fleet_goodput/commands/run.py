"""`mpg run`: the batch pipeline over a folder of Avro telemetry."""

from __future__ import annotations

import argparse
import sys

from fleet_goodput.batch import InputError, ReconciliationError, is_dry_run, run_batch, translate_batch
from fleet_goodput.config import ConfigError, beam_flags, load_settings
from fleet_goodput.headline import render
from fleet_goodput.store import StoreError
from fleet_goodput.stream_settings import load_stream_settings
from fleet_goodput.timeutil import parse_time_us
from fleet_goodput.views import connect

DESCRIPTION = """\
Compute ML Productivity Goodput from Avro telemetry with Apache Beam.

Reads INPUT/scheduler/*.avro, INPUT/runtime/*.avro and INPUT/profiler/*.avro
(schemas in schemas/) and commits one run to the output store: Delta Lake
tables under OUTPUT/tables/, the state of every job still running, the run's
manifest (also copied to OUTPUT/manifest.json), and the DuckDB views in
OUTPUT/goodput.duckdb (query them with `mpg sql`; list runs with `mpg runs`).

An OUTPUT that holds earlier runs is continued: only input files whose
content no earlier run applied are read, running jobs carry on from their
saved state, and windows that new events change get new versions. Events
before the last run's as-of time minus the allowed lateness go to the `late`
table. --replace starts OUTPUT afresh. A run that fails or is killed leaves
the previous run as it was.

Every event ends up accepted, dropped as a duplicate event_id, late, or in the
`rejected` table with its reason; a run whose counts do not add up is not
committed.
Any other --flag is passed to Beam (e.g. --runner=DataflowRunner --project=…),
after those of the config's `beam:` section, so it overrides them; locally the
in-process FnApiRunner is used. With --dry_run=True and DataflowRunner the job
is only translated and checked, and its options and steps are printed.
An output on gs:// gets tables/ and manifest.json but no DuckDB file.
"""

EPILOG = """\
examples:
  mpg run --input fleet/ --output out/
  mpg run --input fleet/ --output out/ --as-of 2026-01-01T12:00:00Z
  mpg run --input gs://bucket/fleet --output gs://bucket/out --config configs/dataflow.yaml
  mpg run --input gs://bucket/fleet --output gs://bucket/out --config configs/dataflow.yaml \\
      --project=my-project --temp_location=gs://bucket/tmp --dry_run=True
"""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help="settings YAML overriding configs/default.yaml: window_s, accelerators, size_classes, "
                             "and the sections beam: (pipeline options) and streaming: (event-time settings, sources)")


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="compute goodput tables and views from Avro telemetry",
                                   description=DESCRIPTION, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, metavar="DIR", help="folder with scheduler/, runtime/, profiler/ Avro files")
    parser.add_argument("--output", required=True, metavar="DIR", help="folder for tables/, manifest.json, goodput.duckdb")
    parser.add_argument("--as-of", metavar="TIME",
                        help="ISO-8601 time that ends still-running jobs and capacity; later events are rejected "
                             "(default: the latest accepted event time)")
    parser.add_argument("--replace", action="store_true", help="remove OUTPUT's earlier runs and start it afresh")
    parser.add_argument("--chunk_hours", type=int, metavar="HOURS",
                        help="compute a long input in chunks of this much event time (24: a day), one after the "
                             "other, so memory follows one chunk; still one committed run")
    add_run_arguments(parser)
    parser.set_defaults(func=main, accepts_beam_args=True)


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        as_of_us = parse_time_us(args.as_of) if args.as_of else None
        beam_args = beam_flags(args.config) + args.beam_args
        if is_dry_run(beam_args):
            print(describe_job(translate_batch(args.input, args.output, settings, as_of_us, beam_args)))
            return 0
        stream_settings = load_stream_settings(args.config)
        print(f"Running the goodput pipeline on {args.input} ...", flush=True)
        outcome = run_batch(args.input, args.output, settings, as_of_us, beam_args, stream_settings=stream_settings,
                            replace=args.replace, chunk_hours=args.chunk_hours)
    except (ConfigError, InputError, StoreError, ValueError) as exc:
        print(f"mpg run: {exc}", file=sys.stderr)
        return 2
    except ReconciliationError as exc:
        print(f"mpg run: FAILED: {exc}", file=sys.stderr)
        return 1
    if outcome.skipped:
        print(f"Skipped {len(outcome.skipped)} input file(s) an earlier run already applied (same content).")
    if not outcome.committed:
        latest = f"run {outcome.run.run_id} stays the latest" if outcome.run else "the output holds no run"
        print(f"Nothing new in {args.input}: {latest}.")
        return 0
    print(summary(outcome))
    accepted = sum(counts["accepted"] for counts in outcome.manifest.get("this_run", {}).values())
    if outcome.manifest.get("as_of_us") is None or accepted == 0:
        print(f"mpg run: no event of this run was accepted, so it adds no figure; see why with\n"
              f"  mpg sql --output {args.output} \"select reason, sum(records) from rejected group by reason\"",
              file=sys.stderr)
        return 1
    if outcome.database is None:
        print(REMOTE_NOTE.format(output=args.output.rstrip("/")))
        return 0
    with connect(args.output) as connection:
        print()
        print(render(connection))
    return 0


def summary(outcome) -> str:
    manifest = outcome.manifest
    outcomes = ["read", "accepted", "duplicate", "rejected", "late"]
    run = f"run {manifest['run_id']}" if manifest.get("run_id") else "run"
    lines = [f"Committed {run} in {outcome.seconds:.1f} s; as-of {manifest['as_of']}; "
             f"{manifest.get('files_applied', 0)} new file(s). Counts cover every run of the output:",
             f"  {'stream':<10}" + "".join(f" {name:>10}" for name in outcomes)]
    for name, counts in manifest["streams"].items():
        lines.append(f"  {name:<10}" + "".join(f" {counts[outcome]:>10,}" for outcome in outcomes))
    views = outcome.database or "none (remote output)"
    lines.append(f"Counts reconcile. Tables: {manifest['output']}/tables/ (Delta Lake)  Views: {views}")
    return "\n".join(lines)


REMOTE_NOTE = """\
No goodput.duckdb for a remote output: the DuckDB views are built over local Parquet. To query it,
  - copy the tables down and build the views there (docs/dataflow.md, "Querying a gs:// output"):
      gcloud storage cp -r {output}/tables DIR/
  - or read them in place with DuckDB's httpfs extension and a GCS secret:
      select * from read_parquet('{output}/tables/job_window/*/*.parquet', hive_partitioning = true)"""


# The options that decide where and on what a Dataflow job runs, in print order.
_JOB_OPTIONS = ("runner", "project", "region", "temp_location", "staging_location", "machine_type", "num_workers",
                "max_num_workers", "autoscaling_algorithm", "sdk_container_image", "setup_file", "experiments")


def describe_job(job) -> str:
    """The effective options and top-level steps of a job translated with --dry_run."""
    options = job.options.get_all_options()
    steps = sorted(t.unique_name for t in job.proto_pipeline.components.transforms.values()
                   if "/" not in t.unique_name and not t.unique_name.startswith("ref_"))
    lines = ["Dry run: the job was translated for Dataflow and not submitted.", "options:"]
    lines += [f"  {name}: {options[name]}" for name in _JOB_OPTIONS if options.get(name) is not None]
    lines.append(f"steps ({len(job.proto_pipeline.components.transforms)} transforms in all):")
    lines += [f"  {step}" for step in steps]
    return "\n".join(lines)
