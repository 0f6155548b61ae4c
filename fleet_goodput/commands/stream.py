"""`mpg stream`: the goodput pipeline on telemetry that keeps arriving."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import schemas
from fleet_goodput.batch import ReconciliationError, is_dry_run
from fleet_goodput.commands.run import add_run_arguments, describe_job, summary
from fleet_goodput.config import ConfigError, beam_flags, load_settings
from fleet_goodput.headline import render
from fleet_goodput.avro_io import telemetry_files
from fleet_goodput.stream_run import OutputInUse, prepare_output, run_stream, translate_stream
from fleet_goodput.stream_settings import load_stream_settings
from fleet_goodput.timeutil import format_time_us
from fleet_goodput.views import connect
from transforms.watch import request_stop

DESCRIPTION = """\
Run the goodput pipeline on a stream: locally, a folder that keeps receiving
Avro files (INPUT/<stream>/*.avro; each new file is read once); on Dataflow,
Pub/Sub subscriptions selected by the `streaming:` section of --config.

Results are per event-time window: a window is emitted when the watermark
passes its end, with in-flight step time as `pending`, and emitted again as a
new version whenever late events (within --allowed-lateness) or later
resolutions (a checkpoint: pending → productive; a disruption: → lost) change
it. The views show the latest version. Events later than the allowed lateness
go to the `late` table and are counted in the manifest.

It stops cleanly on Ctrl-C / SIGTERM or after --stop-after-idle seconds
without a new file: every key is closed at the latest event time read (as a
batch run's as-of would), results are flushed, and the manifest and views are
written.
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
    parser.add_argument("--watermark-lag", type=int, metavar="SECONDS",
                        help="how far the watermark trails the latest event time read (default 300)")
    parser.add_argument("--replace", action="store_true", help="clear an output folder that holds earlier results")
    add_run_arguments(parser)
    parser.set_defaults(func=main, accepts_beam_args=True)


def _progress(files: int, events: int, watermark_us: int) -> None:
    print(f"  read {files:,} files, {events:,} events; watermark {format_time_us(watermark_us)}", file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        stream_settings = load_stream_settings(args.config, allowed_lateness_s=args.allowed_lateness,
                                               watermark_lag_s=args.watermark_lag)
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
    try:
        prepare_output(args.output, args.replace)
    except OutputInUse as exc:
        print(f"mpg stream: {exc}", file=sys.stderr)
        return 2
    for stream in schemas.STREAMS:
        Path(args.input, stream).mkdir(parents=True, exist_ok=True)
    waiting = len(telemetry_files(args.input))
    if waiting:
        print(f"{waiting} files already in {args.input} are read first, in the order they were written.")
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: request_stop())
    idle = f"; stops after {args.stop_after_idle:g} s without new files" if args.stop_after_idle else "; Ctrl-C stops"
    print(f"Watching {args.input} (window {settings.window_s} s, allowed lateness "
          f"{stream_settings.allowed_lateness_s} s{idle}) ...", flush=True)
    try:
        outcome = run_stream(args.input, args.output, settings, stream_settings, args.stop_after_idle,
                             beam_args, replace=args.replace, progress=_progress)
    except OutputInUse as exc:
        print(f"mpg stream: {exc}", file=sys.stderr)
        return 2
    except ReconciliationError as exc:
        print(f"mpg stream: FAILED: {exc}", file=sys.stderr)
        return 1
    print(summary(outcome))
    with connect(args.output) as connection:
        print()
        print(render(connection))
    return 0
