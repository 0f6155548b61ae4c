"""`mpg runs`: the committed runs of an output, oldest first."""

from __future__ import annotations

import argparse
import sys

from fleet_goodput import exits
from fleet_goodput.safe_text import json_text, printable
from fleet_goodput.store import Store, StoreDamaged, StoreError
from fleet_goodput.timeutil import format_time_us

EPILOG = """\
Each run is one consistent snapshot of every table. Read an earlier one with
  mpg sql --output OUT --run ID "select * from fleet_daily"
Versions older than the retention (7 days by default) are vacuumed and can no
longer be read; the latest run always can.

""" + exits.describe(failed="the output holds no committed run",
                                                 damaged=exits.DAMAGED_MEANING)


def register(subparsers) -> None:
    parser = subparsers.add_parser("runs", help="list the runs committed to an output",
                                   description="List the runs committed to an output store: id, when, mode, input, "
                                               "as-of time, files applied and skipped, and event counts.",
                                   epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, metavar="DIR", help="an output folder of `mpg run` or `mpg stream`")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="how to print (default: table)")
    parser.set_defaults(func=main)


def rows(output: str) -> list[dict]:
    runs = []
    for record in Store(output).runs():
        this_run = record.manifest.get("this_run", {})
        runs.append({
            "run": record.run_id, "committed_at": format_time_us(record.committed_at_us), "mode": record.mode,
            "input": record.input, "as_of": format_time_us(record.as_of_us),
            "files": record.files_applied, "skipped": record.files_skipped,
            "read": sum(c.get("read", 0) for c in this_run.values()),
            "rejected": sum(c.get("rejected", 0) for c in this_run.values()),
            "late": sum(c.get("late", 0) for c in this_run.values()),
        })
    return runs


def main(args: argparse.Namespace) -> int:
    try:
        runs = rows(args.output)
    except StoreError as exc:
        print(f"mpg runs: {exc}", file=sys.stderr)
        return exits.DAMAGED if isinstance(exc, StoreDamaged) else exits.USAGE
    if not runs:
        print(f"mpg runs: {args.output} holds no committed run", file=sys.stderr)
        return exits.FAILED
    if args.format == "json":
        print(json_text(runs, indent=2))
        return exits.OK
    columns = list(runs[0])
    # An input path can hold control characters: shown as \xNN before the columns are measured.
    cells = [[printable(str(run[c])) if run[c] is not None else "-" for c in columns] for run in runs]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    return exits.OK
