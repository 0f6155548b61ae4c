"""`mpg collect slurm --out DIR`: poll a Slurm cluster's accounting into Avro files, incrementally."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from fleet_goodput import exits
from fleet_goodput.console import VERBOSITY_HELP, say
from fleet_goodput.core.config import ConfigError, load_settings
from fleet_goodput.importers.slurm import ACCELERATOR_MAP_HELP, DEFAULT_TIMEOUT_S

DESCRIPTION = """\
Poll the accounting of the Slurm cluster this machine's Slurm client is
configured for (SLURM_CONF, or the default, as sacct reads it) and write what
is new since the last poll to DIR/scheduler/slurm-NNNNNNNN.avro, ready for
`mpg run --input DIR` (or `mpg stream`). Run it from cron or a systemd timer.

Each poll runs `sacct --duplicates --allocations` from the cursor (every
attempt of a requeued or preempted job; and, since `sacct -S` lists only jobs
eligible in its window, `sacct --state=...` and `sacct -j` for the jobs
`squeue` shows pending, so held jobs and those waiting on a dependency are
seen too), `sacctmgr show event` (nodes down or drained) and
`scontrol show node -o` (capacity), and maps them as
`mpg import slurm` does (docs/slurm.md). A job still running is written as far
as it has got; its end comes with a later poll. The cursor and the last poll's
text live in DIR/.slurm-collect/; rows that cannot be mapped are listed with
their reason in DIR/slurm_rejected/.

Each Slurm command (sacct, sacctmgr, scontrol, squeue) may take --timeout
seconds (default {timeout} s): one that does not answer by then (slurmdbd or
slurmctld wedged) is killed and the poll ends with one line saying which,
exit 1, having written nothing; the next poll starts from the same cursor.

It may be killed at any moment and run again: the same attempt always gets the
same event_id and the cursor remembers what was written, so nothing is counted
twice and nothing is missed.
""".format(timeout=DEFAULT_TIMEOUT_S)

EPILOG = (
    """\
examples:
  mpg collect slurm --out /data/telemetry --since 2026-01-01T00:00:00Z   # the first poll reaches back to --since
  */10 * * * * mpg collect slurm --out /data/telemetry -q               # then every ten minutes, from cron
  mpg run --input /data/telemetry --output /data/goodput

"""
    + VERBOSITY_HELP
    + "\n\n"
    + exits.describe(
        failed="a Slurm command failed (not installed, no configuration, the controller or slurmdbd down) or did not "
        "answer within --timeout: nothing was written",
        busy="another `mpg collect` is polling into DIR",
    )
    + """\
  (2 also when DIR/.slurm-collect/cursor.json is not a cursor (emptied, edited, not
  UTF-8): restore it, or move it aside to collect again from --since; nothing was
  written)
"""
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "collect",
        help="poll a Slurm cluster's accounting into Avro telemetry, incrementally (cron, timers)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", choices=["slurm"], help="the scheduler to collect from")
    parser.add_argument("--out", required=True, metavar="DIR", help="the telemetry folder (created; polls add to it)")
    parser.add_argument(
        "--since",
        metavar="TIME",
        help="first poll only: ISO-8601 time to reach back to (default: 24 hours ago); later polls "
        "continue from the cursor",
    )
    parser.add_argument("--accelerator-map", metavar="FILE", help=ACCELERATOR_MAP_HELP)
    parser.add_argument(
        "--config", metavar="FILE", help="settings YAML whose accelerator catalogue to check keys against"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long each Slurm command (sacct, sacctmgr, scontrol, squeue) may take before the "
        f"poll gives up, writing nothing (default {DEFAULT_TIMEOUT_S} s)",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import time

    from fleet_goodput.core.timeutil import format_time_us, parse_time_us
    from fleet_goodput.importers.common import Options, SourceError
    from fleet_goodput.importers.reading import MICROS
    from fleet_goodput.importers.slurm import AcceleratorMap
    from fleet_goodput.importers.slurm_collect import CollectBusy, CollectError, CursorError, collect

    try:
        settings = load_settings(args.config)
        options = Options(
            accelerators=frozenset(settings.accelerators), accelerator_map=AcceleratorMap.load(args.accelerator_map)
        )
        since_us = parse_time_us(args.since) if args.since else (int(time.time()) - 86_400) * MICROS
        if not 0 < args.timeout <= 86_400:
            raise ValueError(f"--timeout must be more than 0 and at most 86400 seconds, not {args.timeout:g}")
        result = collect(Path(args.out), options, since_us, timeout_s=args.timeout)
    except (CollectError, SourceError) as exc:  # a command failed, or printed what no sacct prints
        print(f"mpg collect: {exc}; nothing was written to {args.out}", file=sys.stderr)
        return exits.FAILED
    except CursorError as exc:  # an input only the operator can mend, as a bad settings file: not a store (3)
        print(f"mpg collect: {exc}; nothing was written", file=sys.stderr)
        return exits.USAGE
    except CollectBusy as exc:
        print(f"mpg collect: {exc}; this run wrote nothing", file=sys.stderr)
        return exits.BUSY
    except (ConfigError, ValueError) as exc:
        print(f"mpg collect: {exc}", file=sys.stderr)
        return exits.USAGE
    if result["file"]:
        print(
            f"Collected {result['events']:,} new scheduler events of {result['jobs']:,} jobs into "
            f"{Path(args.out) / result['file']}."
        )
    else:
        print("Nothing new since the last poll, and no cluster seen yet to say it of.")
    for cluster, (from_us, to_us) in (result["observed"] or {}).items():
        say(
            f"Observed {cluster} from {format_time_us(from_us)} to {format_time_us(to_us)} (the file says so; "
            "the as-of time follows it)."
        )
    if result["rejected"]:
        say(f"Rejected {result['rejected']:,} new rows (listed in {Path(args.out) / 'slurm_rejected'}).")
    say(f"Next: mpg run --input {shlex.quote(str(args.out))} --output OUT")
    return exits.OK
