"""`mpg runs`: the latest committed runs of an output (or every one, or those since a time), oldest first."""

from __future__ import annotations

import argparse
import sys

from fleet_goodput import exits
from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.safe_text import json_text, printable

DEFAULT_LAST = 20

EPILOG = """\
Each run is one consistent snapshot of every table. Read an earlier one with
  mpg sql --output OUT --run ID "select * from fleet_daily"
and go back to it with `mpg rollback --output OUT --to ID` (a run of mode
`rollback` says which run it went back to). Runs older than the retention (7
days by default), or more than 1,000 runs back, are vacuumed and can no longer
be read; the latest run always can.

""" + exits.describe(failed="the output holds no committed run", damaged=exits.DAMAGED_MEANING)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "runs",
        help="list the runs committed to an output",
        description="List the runs committed to an output store: id, when, mode, input, "
        "as-of time, files applied and skipped, and event counts.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="an output folder of `mpg run` or `mpg stream`")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="how to print (default: table)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--last", type=int, default=DEFAULT_LAST, metavar="N", help=f"the latest N runs (default: {DEFAULT_LAST})"
    )
    which.add_argument("--all", action="store_true", help="every run")
    which.add_argument(
        "--since",
        metavar="TIME",
        help="the runs committed at or after TIME (ISO-8601: 2026-01-02, 2026-01-02T06:00:00Z)",
    )
    parser.set_defaults(func=main)


def rows(output: str, last: int | None = None, since_us: int | None = None) -> list[dict]:
    from fleet_goodput.store.delta_store import Store

    runs = []
    for record in Store(output).runs(last=last, committed_since_us=since_us):
        this_run = record.manifest.get("this_run", {})
        runs.append(
            {
                "run": record.run_id,
                "committed_at": format_time_us(record.committed_at_us),
                "mode": f"rollback to {record.manifest['rolled_back_to']}"
                if record.mode == "rollback"
                else record.mode,
                "input": record.input,
                "as_of": format_time_us(record.as_of_us),
                "files": record.files_applied,
                "skipped": record.files_skipped,
                "read": sum(c.get("read", 0) for c in this_run.values()),
                "rejected": sum(c.get("rejected", 0) for c in this_run.values()),
                "late": sum(c.get("late", 0) for c in this_run.values()),
            }
        )
    return runs


def main(args: argparse.Namespace) -> int:
    from fleet_goodput.core.timeutil import parse_time_us
    from fleet_goodput.store.errors import StoreDamaged, StoreError

    try:
        since_us = parse_time_us(args.since) if args.since else None
    except ValueError as exc:
        print(f"mpg runs: --since {args.since!r}: {exc}", file=sys.stderr)
        return exits.USAGE
    if args.last < 1:
        print("mpg runs: --last takes a number of runs, at least 1", file=sys.stderr)
        return exits.USAGE
    try:
        runs = rows(args.output, last=None if args.all or since_us is not None else args.last, since_us=since_us)
    except StoreError as exc:
        print(f"mpg runs: {exc}", file=sys.stderr)
        return exits.DAMAGED if isinstance(exc, StoreDamaged) else exits.USAGE
    if not runs:
        since = f" since {args.since}" if since_us is not None else ""
        print(f"mpg runs: {args.output} holds no committed run{since}", file=sys.stderr)
        return exits.FAILED
    if args.format == "json":
        print(json_text(runs, indent=2))
        return exits.OK
    if not args.all and since_us is None and runs[0]["run"] > 1:
        print(f"(the latest {len(runs)} runs; earlier ones with --all or --since TIME)", file=sys.stderr)
    columns = list(runs[0])
    # An input path can hold control characters: shown as \xNN before the columns are measured.
    cells = [[printable(str(run[c])) if run[c] is not None else "-" for c in columns] for run in runs]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    return exits.OK
