"""`mpg check`: verify an output store, and repair what can be repaired safely."""

from __future__ import annotations

import argparse
import sys

from fleet_goodput import exits

DESCRIPTION = """\
Verify an output store of `mpg run`, `mpg stream` or a streaming pipeline, a
local folder or on gs:// (the same checks, through pyarrow's file systems): its runs table reads
whole; every table version the latest run names exists, and each of its data
files is present, of the size its Delta log records, and readable as Parquet;
so is its saved state (state/keys, state/files). Prints what it found.

A damaged store is refused by every command that opens it (exit 3) until it
is repaired. With --repair, what can be repaired without losing anything the
store still holds whole is repaired (fleet_goodput/store/store_check.py):
  - a torn last commit of runs/_delta_log is moved aside to OUTPUT/_damaged/:
    the run before it is the latest again; so is a torn commit of a table's
    log after the version the latest run names (a run killed in its commit);
  - a latest run that names something missing or damaged is rolled back to
    the latest earlier run that is whole (Delta restore of the runs table and
    of every table to that run's versions; the later runs stay in the history).
The next `mpg run` then applies again the input files the lost runs had
applied. What cannot be repaired (no earlier whole run, runs/ or a saved
state deleted) is named, with the way back: start the output afresh with
`mpg run --replace` over every input.

With --upgrade, a store whose saved state an earlier release wrote (state
format 3; `mpg run` says when) is brought to this release's format in place,
as one committed run (mode `upgrade`), without its telemetry: capacity moves
from per-window sums to stretches of one level, each window's chip-time kept
exactly; what format 3 never kept (jobs' interruptions and end reasons before
the upgrade) reads as null. A store of an older format is refused with the
commit of fleet-goodput that continues it (fleet_goodput/runs/upgrade.py).
"""

EPILOG = """\
examples:
  mpg check --output out/
  mpg check --output out/ --repair
  mpg check --output gs://my-bucket/goodput
  mpg check --output out/ --upgrade     # a store an earlier release wrote

""" + exits.describe(
    damaged="the store is damaged (after --repair: damaged still, nothing safe could repair it)",
    busy="a run or stream holds the output (--repair and --upgrade only)",
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "check",
        help="verify an output store; --repair fixes what it safely can",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--output",
        required=True,
        metavar="DIR",
        help="an output folder of `mpg run` or `mpg stream` (or gs://bucket/folder)",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--repair",
        action="store_true",
        help="repair what can be repaired without losing anything (see above); takes the output's lock",
    )
    action.add_argument(
        "--upgrade",
        action="store_true",
        help="bring a store an earlier release wrote to this release's format, as one run (see "
        "above); takes the output's lock",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.errors import StoreBusy, StoreError
    from fleet_goodput.store.store_check import inspect

    store = Store(args.output)
    if not store.store_files.is_dir():
        print(
            f"mpg check: {args.output} is not a folder: give --output an output of `mpg run` or `mpg stream` "
            "(a folder, or gs://bucket/folder)",
            file=sys.stderr,
        )
        return exits.USAGE
    try:
        store.refuse_foreign()
        if args.upgrade:
            return _upgrade(args.output)
        if args.repair:
            with store.lock():
                return _check_and_repair(store)
        return _report(store, inspect(store))
    except StoreBusy as exc:
        print(f"mpg check: {exc}", file=sys.stderr)
        return exits.BUSY
    except StoreError as exc:  # not a store of ours, or one a newer fleet-goodput wrote
        print(f"mpg check: {exc}", file=sys.stderr)
        return exits.USAGE


def _upgrade(output: str) -> int:
    from fleet_goodput.commands.run import refused
    from fleet_goodput.core.config import load_settings
    from fleet_goodput.core.session import STATE_FORMAT
    from fleet_goodput.runs.upgrade import upgrade_store
    from fleet_goodput.store.errors import StoreError
    from fleet_goodput.store.manifest import write_manifest_copy
    from fleet_goodput.store.views import build_database

    try:
        done = upgrade_store(output)
    except StoreError as exc:  # busy (75), damaged (3), or a format this release cannot upgrade (2)
        return refused("check", exc)
    if done.record is None:
        print(f"{output}: its saved state is in this release's format ({STATE_FORMAT}) already: nothing to upgrade")
        return exits.OK
    # As a run publishes (fleet_goodput/runs/batch.py): the views, then manifest.json, which says they are built.
    build_database(output, load_settings())
    write_manifest_copy(output, done.record.manifest)
    print(
        f"Committed run {done.record.run_id} to {done.record.manifest['output']}: upgraded from state format "
        f"{done.from_format} to {STATE_FORMAT} ({done.keys} saved state(s), {done.stretches} capacity stretch(es))"
    )
    return exits.OK


def _report(store, report) -> int:
    if report.intact:
        if not report.runs:
            print(f"{store.root} holds no committed run: nothing to check")
        else:
            print(
                f"{store.root}: whole ({report.runs} run(s); the latest run's tables, data files and saved state "
                "are all there and readable)"
            )
        return exits.OK
    print(f"{store.root} is damaged:")
    for finding in report.findings:
        print(f"  {finding.problem}")
    if report.repair:
        print(f"`mpg check --output {store.root} --repair` would {report.repair}.")
    else:
        print(_NO_REPAIR.format(why=report.why_not, root=store.root))
    return exits.DAMAGED


def _check_and_repair(store) -> int:
    """Inspect, repair what can be (the lock is held), and inspect again."""
    from fleet_goodput.store.store_check import cause, inspect, repair

    report = inspect(store)
    if report.intact or report.repair is None:
        return _report(store, report)
    for finding in report.findings:
        print(f"found: {finding.problem}")
    print(f"repairing: {report.repair}")
    try:
        repair(store, report)
    except Exception as error:  # delta-rs meeting more damage than inspect saw
        print(
            f"mpg check: --repair stopped: {cause(error)}; `mpg check --output {store.root}` says where the store "
            "stands now",
            file=sys.stderr,
        )
        return exits.DAMAGED
    return _report(store, inspect(store))


_NO_REPAIR = (
    "--repair cannot repair this without losing data: {why}. Start the output afresh and run every input "
    "again:\n  mpg run --replace --input DIR --output {root}\n"
    "(copy the folder first if you want to keep what is left of it)."
)
