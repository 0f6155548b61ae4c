"""`mpg stream`: the goodput pipeline on telemetry that keeps arriving."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

import schemas
from fleet_goodput.avro_io import telemetry_files
from fleet_goodput.batch import ReconciliationError, is_dry_run
from fleet_goodput.commands.run import add_run_arguments, describe_job, summary
from fleet_goodput.config import ConfigError, beam_flags, load_settings
from fleet_goodput.headline import render
from fleet_goodput.store import StoreError
from fleet_goodput.stream_run import run_stream, translate_stream
from fleet_goodput.stream_settings import load_stream_settings
from fleet_goodput.views import connect

DESCRIPTION = """\
Run the goodput pipeline on a stream: locally, a folder that keeps receiving
Avro files (INPUT/<stream>/*.avro); on Dataflow, Pub/Sub subscriptions selected
by the `streaming:` section of --config.

Locally, each batch of new files is applied as one run committed to the
output store, exactly as `mpg run` continues an output: results are per
event-time window, with in-flight step time as `pending`, and a window gets a
new version whenever new events, late events (within --allowed-lateness) or
later resolutions (a checkpoint: pending → productive; a disruption: → lost)
change it. The views show the latest version; `mpg sql` reads the latest
committed run while the stream goes on. Events later than the allowed
lateness go to the `late` table and are counted in the manifest.

It stops on Ctrl-C / SIGTERM or after --stop-after-idle seconds without a new
file. Killed any other way (even SIGKILL), it loses nothing committed: start
it again on the same folders and it resumes from its last run, ending equal to
`mpg run` over the same files.
"""

EPILOG = """\
examples:
  mpg stream --input live/ --output live-out/ --stop-after-idle 60
  mpg replay --from fleet/ --to live/ --speed 600      (in another terminal)
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("stream", help="run the pipeline on a growing folder (or Pub/Sub) with event-time updates",
                                   description=DESCRIPTION, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, metavar="DIR", help="folder to watch (created if missing)")
    parser.add_argument("--output", required=True, metavar="DIR", help="folder for tables/, manifest.json, goodput.duckdb")
    parser.add_argument("--stop-after-idle", type=float, metavar="SECONDS",
                        help="stop when no new file has arrived for this long (default: run until interrupted)")
    parser.add_argument("--allowed-lateness", type=int, metavar="SECONDS",
                        help="how late an event may be and still update results (default 3600, or streaming.allowed_lateness_s)")
    parser.add_argument("--replace", action="store_true", help="clear an output folder that holds earlier results")
    add_run_arguments(parser)
    parser.set_defaults(func=main, accepts_beam_args=True)


def _progress(progress, outcome) -> None:
    manifest = outcome.manifest
    print(f"  run {manifest['run_id']}: {manifest['files_applied']} new file(s) in {outcome.seconds:.1f} s; "
          f"as-of {manifest['as_of']}", file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        stream_settings = load_stream_settings(args.config, allowed_lateness_s=args.allowed_lateness)
    except (ConfigError, ValueError) as exc:
        print(f"mpg stream: {exc}", file=sys.stderr)
        return 2
    beam_args = beam_flags(args.config) + args.beam_args
    if stream_settings.source == "pubsub":
        if not is_dry_run(beam_args):
            print("mpg stream: a Pub/Sub source runs on Dataflow: submit it with the Flex Template (docs/dataflow.md), "
                  "or check it here with --dry_run=True", file=sys.stderr)
            return 2
        print(describe_job(translate_stream(args.output, settings, stream_settings, beam_args)))
        return 0
    for stream in schemas.STREAMS:
        Path(args.input, stream).mkdir(parents=True, exist_ok=True)
    waiting = len(telemetry_files(args.input))
    if waiting:
        print(f"{waiting} files already in {args.input}; those no earlier run applied are read first.")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    idle = f"; stops after {args.stop_after_idle:g} s without new files" if args.stop_after_idle else "; Ctrl-C stops"
    print(f"Watching {args.input} (window {settings.window_s} s, allowed lateness "
          f"{stream_settings.allowed_lateness_s} s{idle}) ...", flush=True)
    try:
        outcome = run_stream(args.input, args.output, settings, stream_settings, args.stop_after_idle,
                             beam_args, replace=args.replace, progress=_progress, stop=stop)
    except StoreError as exc:
        print(f"mpg stream: {exc}", file=sys.stderr)
        return 2
    except ReconciliationError as exc:
        print(f"mpg stream: FAILED: {exc}", file=sys.stderr)
        return 1
    if outcome.run is None:
        print(f"mpg stream: no telemetry arrived in {args.input}; nothing was computed", file=sys.stderr)
        return 1
    print(summary(outcome))
    with connect(args.output) as connection:
        print()
        print(render(connection))
    return 0
