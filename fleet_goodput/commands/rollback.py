"""`mpg rollback`: put an output store back as an earlier run left it, as one new run."""

from __future__ import annotations

import argparse

from fleet_goodput import exits
from fleet_goodput.core.options import run_number

DESCRIPTION = """\
Undo the runs after run RUN: restore every table of the output store, the
saved state of the jobs still open, the record of the input files applied and
the settings to what run RUN left, and commit that as one new run (mode
`rollback`). The input files the undone runs applied are new again: the next
`mpg run` reads them (or the right ones: a run over the wrong input folder, or
with a mistaken --as_of, is undone and run again). Nothing is erased: the
undone runs stay in `mpg runs`, readable with `mpg sql --run ID`, and
`mpg rollback --to` one of them undoes the rollback, while the store keeps
them (the retention, runs.retention_hours, a week by default, and at most
the latest 1,000 runs). Takes the output's lock: it waits for no run.
"""

EPILOG = """\
examples:
  mpg runs --output out/                  # find the last good run
  mpg rollback --output out/ --to 41      # undo the runs after 41
  mpg run --input fleet/ --output out/    # apply the right input again

""" + exits.describe(busy="a run or stream holds the output", damaged=exits.DAMAGED_MEANING)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "rollback",
        help="undo the runs after an earlier run, as one new run",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="an output folder of `mpg run` or `mpg stream`")
    parser.add_argument(
        "--to",
        required=True,
        type=run_number,
        metavar="RUN",
        dest="to_run",
        help="the run to go back to (`mpg runs` lists them)",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from fleet_goodput.commands.run import refused
    from fleet_goodput.core.config import load_settings
    from fleet_goodput.core.timeutil import format_time_us
    from fleet_goodput.store.errors import StoreError
    from fleet_goodput.store.manifest import write_manifest_copy
    from fleet_goodput.store.rollback import roll_back
    from fleet_goodput.store.views import build_database

    try:
        done = roll_back(args.output, args.to_run)
    except StoreError as exc:
        return refused("rollback", exc)
    # As a run publishes (fleet_goodput/runs/commit.py): the views, then manifest.json, which says they are built.
    build_database(args.output, load_settings())
    write_manifest_copy(args.output, done.record.manifest)
    undone = ", ".join(map(str, done.undone))
    files = done.files_new_again
    applied = (
        f"; the {files} input file(s) they applied are new again: the next run reads them"
        if files > 0
        else f"; {-files} input file(s) count as applied again"
        if files < 0
        else ""
    )
    print(
        f"Committed run {done.record.run_id} to {done.record.manifest['output']}: rolled back to run "
        f"{done.target.run_id} (as of {format_time_us(done.target.as_of_us)}), undoing run(s) {undone}{applied}"
    )
    return exits.OK
