"""`mpg report`: validate a period, then publish its goodput report (or nothing)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fleet_goodput import exits
from fleet_goodput.commands.run import refuse_damaged_or_raise
from fleet_goodput.commands.validate import add_quality_arguments, print_quality
from fleet_goodput.console import VERBOSITY_HELP, progress
from fleet_goodput.core.config import ConfigError, report_dashboards
from fleet_goodput.quality.period import PeriodBusy, PeriodError, period_from_args

DESCRIPTION = """\
Validate an output folder for a period (the checks of `mpg validate`), then
write OUTPUT/reports/<period>/index.html: a self-contained page that opens
offline, with fleet MPG and SG/RG/PG, their change against the previous
period of the same length and their trend (per hour for one day, per day
otherwise); the same by cluster, accelerator, workload, size class and
team; where the jobs' chip-hours went and the capacity no job held; the
jobs that lost the most, each with a page of its own (jobs/); checkpoint-
interval advice per training class; PG coverage; and the data-quality
summary. Each figure is also written as CSV beside the page.

If a critical check fails, nothing is published (a previous report of the
period stays as it was) and the failed checks are printed. A rerun for the
same period replaces its report; two runs of one period cannot interleave.
"""

EPILOG = (
    """\
examples:
  mpg report --output out/
  mpg report --output out/ --date 2026-01-01
  mpg report --output out/ --from 2026-01-01 --to 2026-01-07
  deploy/ has a cron line and systemd units that run the daily routine:
    mpg run --input IN --output OUT && mpg report --output OUT --date <yesterday> --require-complete

-q prints the verdict, the critical failures and the report's path only.
"""
    + VERBOSITY_HELP
    + "\n\n"
    + exits.describe(
        failed="a critical check failed: nothing was published (0: published)",
        busy="another validation or report of the same period holds its lock; deploy/ retries it",
        damaged=exits.DAMAGED_MEANING,
    )
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="validate, then publish an offline HTML goodput report for a period",
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
        # One Store, checked whole once: validated and published.
        run = open_checked_run(args.output, config=args.config)
        period = period_from_args(args, run)
        progress(f"Validating {Path(args.output)} for {period.name}, then publishing its report ...")
        from fleet_goodput.report.publish import validate_and_publish  # imports GX, which takes a few seconds

        quality, path = validate_and_publish(run, period, args.require_complete, report_dashboards(args.config))
    except StoreDamaged as exc:
        print(f"mpg report: {exc}", file=sys.stderr)
        return exits.DAMAGED
    except (ConfigError, PeriodError, FileNotFoundError, StoreError) as exc:
        print(f"mpg report: {exc}", file=sys.stderr)
        return exits.USAGE
    except PeriodBusy as exc:
        print(f"mpg report: {exc}", file=sys.stderr)
        return exits.BUSY
    except Exception as exc:  # last: a read error of the store's data is damage; anything else is ours to fix
        return refuse_damaged_or_raise("report", args.output, exc)
    print_quality(quality)
    if path is None:
        print(
            f"mpg report: NOT published: {len(quality.failures)} critical data-quality check(s) failed:",
            file=sys.stderr,
        )
        for check in quality.failures:
            print(f"  [{check.suite}] {check.title}: {check.observed}", file=sys.stderr)
        from fleet_goodput.quality.suites import COMPLETE_TITLE  # GX is loaded already: it validated

        # The completeness check failed: say how far each source reached.
        if any(check.title.startswith(COMPLETE_TITLE) for check in quality.failures) and run.record is not None:
            from fleet_goodput.report.headline import clock_lines

            print(f"  The data reaches {run.record.manifest.get('as_of')}:", file=sys.stderr)
            for line in clock_lines(run.record.manifest):
                print(f"  {line}", file=sys.stderr)
        return exits.FAILED
    print(f"Report: {path}")
    return exits.OK
