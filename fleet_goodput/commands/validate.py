"""`mpg validate`: run the data-quality suites on an output folder for a period."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fleet_goodput import console, exits
from fleet_goodput.commands.run import refuse_damaged_or_raise
from fleet_goodput.console import VERBOSITY_HELP, progress
from fleet_goodput.core.config import ConfigError
from fleet_goodput.quality.period import PeriodBusy, PeriodError, add_period_arguments, period_from_args, period_lock

DESCRIPTION = """\
Check an output folder of `mpg run` with Great Expectations before anyone reads it.

Suites (fleet_goodput/quality/suites.py): one per table (job_window, jobs,
capacity_window, rejected), one for capacity coverage, one for the manifest
and one for the views. They check conservation of chip-seconds on every row,
SG/RG/PG/MPG in [0, 1] with SG x RG x PG = MPG (to 1e-9 relative: float
rounding), capacity wherever jobs held chips, unique keys, non-null
attributes, counts that reconcile with the manifest, a partition for every day
of the period and freshness against the as-of time. Each check has a severity:
a critical failure makes the command exit 1; a warning is printed.

Writes OUTPUT/quality/<period>/: index.html (every check, why it exists, what
was observed), GX Data Docs readable offline, summary.json.
"""

EPILOG = (
    """\
examples:
  mpg validate --output out/
  mpg validate --output out/ --date 2026-01-01
  mpg validate --output out/ --from 2026-01-01 --to 2026-01-07 --require-complete

-q prints the verdict and the critical failures only; -v also every check that passed.
"""
    + VERBOSITY_HELP
    + "\n\n"
    + exits.describe(
        failed="a critical check failed (0: passed, maybe with warnings)",
        busy="another validation or report of the same period holds its lock",
        damaged=exits.DAMAGED_MEANING,
    )
)


def add_quality_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, metavar="DIR", help="an output folder of `mpg run`")
    add_period_arguments(parser)
    parser.add_argument(
        "--require-complete",
        action="store_true",
        help="fail (not just warn) when the data's as-of time is before the end of the period; "
        "for scheduled runs, so late upstream data alerts",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="not needed: the output keeps the settings it was computed with; a settings file "
        "given is checked against them, and one that differs is refused. For `mpg report`, "
        "its `report: dashboards:` ({title: URL}) names the Grafana dashboards on the page",
    )


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check an output folder's data quality (Great Expectations)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_quality_arguments(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from fleet_goodput.quality.checked_run import open_checked_run
    from fleet_goodput.store.errors import StoreDamaged, StoreError

    try:
        run = open_checked_run(args.output, config=args.config)  # one Store, checked whole once: what every suite reads
        period = period_from_args(args, run)
        with period_lock(args.output, period):
            progress(f"Validating {Path(args.output)} for {period.name} ...")
            from fleet_goodput.quality.run import validate_output  # imports GX, which takes a few seconds

            result = validate_output(run, period, args.require_complete)
    except StoreDamaged as exc:
        print(f"mpg validate: {exc}", file=sys.stderr)
        return exits.DAMAGED
    except (ConfigError, PeriodError, FileNotFoundError, StoreError) as exc:
        print(f"mpg validate: {exc}", file=sys.stderr)
        return exits.USAGE
    except PeriodBusy as exc:
        print(f"mpg validate: {exc}", file=sys.stderr)
        return exits.BUSY
    except Exception as exc:  # last: a read error of the store's data is damage; anything else is ours to fix
        return refuse_damaged_or_raise("validate", args.output, exc)
    print_quality(result)
    return exits.OK if result.passed else exits.FAILED


def print_quality(result) -> None:
    """The verdict with the critical failures (-q), every check that did not pass (default), or every check (-v)."""
    if console.verbosity() == console.QUIET:
        print(result.verdict)
        for check in result.failures:
            print(f"  FAIL [{check.suite}] {check.title}: {check.observed}")
        return
    print(result.describe(), flush=True)
    for check in result.checks:
        if check.success:
            console.detail(f"  pass [{check.suite}] {check.title}: {check.observed}")
