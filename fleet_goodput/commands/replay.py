"""`mpg replay`: feed a recorded fleet into a watched folder at N× real time."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from fleet_goodput import exits
from fleet_goodput.console import VERBOSITY_HELP, progress

DESCRIPTION = """\
Feed recorded telemetry (DIR/<stream>/*.avro, e.g. from `mpg simulate`) into
the folder that `mpg stream --input` watches, as the fleet would have sent it:
cut into event-time slices, one file per stream and slice, written in order at
--speed times real time."""

EPILOG = (
    """\
watch a simulated fleet fill the tables, in two terminals:
  mpg simulate --out fleet --hours 6
  mpg stream --input live --output live-out --stop_after_idle_s 20
  mpg replay --from fleet --to live --speed 600      # 10 event-minutes per second
then, while it runs (each window appears when the watermark passes its end):
  mpg sql --output live-out "select day, cluster, sg, rg, pg, mpg from fleet_daily"

"""
    + VERBOSITY_HELP
    + "\n\n"
    + exits.describe()
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay recorded telemetry into a watched folder at N x real time",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--from", dest="source", required=True, metavar="DIR", help="telemetry to replay (DIR/<stream>/*.avro)"
    )
    parser.add_argument(
        "--to", dest="target", required=True, metavar="DIR", help="the folder `mpg stream --input` watches"
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=60.0,
        help="event-time seconds per wall-clock second (default 60; 0 = as fast as possible)",
    )
    parser.add_argument("--slice-s", type=int, default=300, help="event-time seconds per written file (default 300)")
    parser.add_argument("--replace", action="store_true", help="clear telemetry already in --to before replaying")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from fleet_goodput.runs.replay import replay
    from fleet_goodput.telemetry.avro_io import clear_telemetry, telemetry_files

    if not Path(args.source).is_dir():
        print(f"mpg replay: {args.source} does not exist", file=sys.stderr)
        return exits.USAGE
    if not telemetry_files(args.source):
        print(
            f"mpg replay: no telemetry in {args.source}: expected {args.source}/<stream>/*.avro "
            f"(try `mpg simulate --out {shlex.quote(args.source)}`)",
            file=sys.stderr,
        )
        return exits.USAGE
    if args.speed < 0 or args.slice_s <= 0:
        print("mpg replay: --speed must be >= 0 and --slice-s > 0", file=sys.stderr)
        return exits.USAGE
    if telemetry_files(args.target):
        if not args.replace:
            print(
                f"mpg replay: {args.target} already holds telemetry, which a stream would mix with the replay; "
                "pass --replace to clear it",
                file=sys.stderr,
            )
            return exits.USAGE
        clear_telemetry(args.target)
    written = replay(args.source, args.target, args.speed, args.slice_s, report=progress)
    print(f"replayed {written:,} events into {args.target}")
    return exits.OK
