"""`mpg run`: the batch pipeline over a folder of Avro telemetry."""

from __future__ import annotations

import argparse
import sys

from fleet_goodput.batch import InputError, ReconciliationError, run_batch
from fleet_goodput.config import ConfigError, beam_flags, load_settings
from fleet_goodput.headline import render
from fleet_goodput.timeutil import parse_time_us
from fleet_goodput.views import connect

DESCRIPTION = """\
Compute ML Productivity Goodput from Avro telemetry with Apache Beam.

Reads INPUT/scheduler/*.avro, INPUT/runtime/*.avro and INPUT/profiler/*.avro
(schemas in schemas/), writes Hive-partitioned Parquet tables under
OUTPUT/tables/, OUTPUT/manifest.json with per-stream counts, and the DuckDB
views in OUTPUT/goodput.duckdb (query them with `mpg sql`).

Every event ends up accepted, dropped as a duplicate event_id, or in the
`rejected` table with its reason; the run fails if the counts do not add up.
Any other --flag is passed to Beam (e.g. --runner=DataflowRunner --project=…);
locally the in-process FnApiRunner is used.
"""

EPILOG = """\
examples:
  mpg run --input fleet/ --output out/
  mpg run --input fleet/ --output out/ --as-of 2026-01-01T12:00:00Z
  mpg run --input gs://bucket/fleet --output gs://bucket/out --config configs/dataflow.yaml
"""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help="settings YAML overriding configs/default.yaml (window_s, accelerators, size_classes, beam)")


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="compute goodput tables and views from Avro telemetry",
                                   description=DESCRIPTION, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, metavar="DIR", help="folder with scheduler/, runtime/, profiler/ Avro files")
    parser.add_argument("--output", required=True, metavar="DIR", help="folder for tables/, manifest.json, goodput.duckdb")
    parser.add_argument("--as-of", metavar="TIME",
                        help="ISO-8601 time that ends still-running jobs and capacity (default: the latest event time)")
    add_run_arguments(parser)
    parser.set_defaults(func=main, accepts_beam_args=True)


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        as_of_us = parse_time_us(args.as_of) if args.as_of else None
        print(f"Running the goodput pipeline on {args.input} ...", flush=True)
        outcome = run_batch(args.input, args.output, settings, as_of_us, beam_flags(args.config) + args.beam_args)
    except (ConfigError, InputError, ValueError) as exc:
        print(f"mpg run: {exc}", file=sys.stderr)
        return 2
    except ReconciliationError as exc:
        print(f"mpg run: FAILED: {exc}", file=sys.stderr)
        return 1
    print(summary(outcome))
    with connect(args.output) as connection:
        print()
        print(render(connection))
    return 0


def summary(outcome) -> str:
    manifest = outcome.manifest
    lines = [f"Done in {outcome.seconds:.1f} s; as-of {manifest['as_of']}.",
             f"  {'stream':<10} {'read':>10} {'accepted':>10} {'duplicate':>10} {'rejected':>10}"]
    for name, counts in manifest["streams"].items():
        lines.append(f"  {name:<10} {counts['read']:>10,} {counts['accepted']:>10,} {counts['duplicate']:>10,} {counts['rejected']:>10,}")
    lines.append(f"Counts reconcile. Tables: {manifest['output']}/tables/  Views: {outcome.database}")
    return "\n".join(lines)
