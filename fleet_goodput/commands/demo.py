"""`mpg demo`: simulate a fleet-day, run the pipeline, print the headline."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from pathlib import Path

from fleet_goodput import exits
from fleet_goodput.commands.run import result_line, say_headline, summary
from fleet_goodput.console import VERBOSITY_HELP, progress, say

DESCRIPTION = """\
Simulate a heterogeneous accelerator fleet for a day (several clusters and
generations, queueing, preemptions, failures, checkpoints, profiler samples),
run the goodput pipeline on it with the local Beam runner, build the DuckDB
views, and print fleet MPG with SG/RG/PG by accelerator and workload and the
top badput categories. Then validate the results with Great Expectations and
publish the HTML report for the simulated period. Needs no cloud account and
no server.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="simulate a fleet-day and show its goodput (start here)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=VERBOSITY_HELP
        + "\n\n"
        + exits.describe(
            failed="a critical data-quality check failed: no report was published",
            busy="another run holds DIR/results or the period",
        ),
    )
    parser.add_argument(
        "--dir",
        default="demo-output",
        metavar="DIR",
        help="where to put the simulated telemetry (DIR/telemetry) and results (DIR/results); default: demo-output",
    )
    parser.add_argument("--seed", type=int, default=7, help="simulation seed (default: 7)")
    parser.add_argument("--hours", type=float, default=24.0, help="simulated hours (default: 24)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from fleet_goodput.core.config import load_settings
    from fleet_goodput.quality.period import PeriodBusy
    from fleet_goodput.simulator import simulate
    from fleet_goodput.store.errors import StoreBusy, StoreError

    root = Path(args.dir)
    telemetry, results = root / "telemetry", root / "results"
    shutil.rmtree(telemetry, ignore_errors=True)  # a fresh fleet each time, into a fresh store
    progress(f"[1/3] Simulating {args.hours:g} h of a fleet (seed {args.seed}) into {telemetry} ...")
    simulation = simulate(telemetry, seed=args.seed, hours=args.hours)
    say(f"Simulated {simulation}")
    progress(f"[2/3] Running the goodput pipeline (Apache Beam, local runner) into {results} ...")
    from fleet_goodput.runs.batch import run_batch  # imports Beam, which takes a few seconds

    try:
        outcome = run_batch(str(telemetry), str(results), load_settings(), replace=True, progress=progress)
    except StoreBusy as exc:
        print(f"mpg demo: {exc}", file=sys.stderr)
        return exits.BUSY
    except StoreError as exc:  # DIR/results holds someone's files: a run never deletes them
        print(f"mpg demo: {exc}", file=sys.stderr)
        return exits.USAGE
    say(result_line(outcome))
    say(summary(outcome))
    say_headline(outcome.store, outcome.run.run_id)
    say(f"\nOutputs: tables {results}/tables/, views {outcome.database}, manifest {results}/manifest.json")
    say(
        f"Try:     mpg sql --output {shlex.quote(str(results))} "
        '"select * from job_goodput order by lost_chip_s desc limit 5"'
    )
    progress("[3/3] Validating the results (Great Expectations) and publishing the report ...")
    from fleet_goodput.quality.checked_run import open_checked_run
    from fleet_goodput.quality.period import whole_output_period  # the report imports GX: only load it here
    from fleet_goodput.report.publish import validate_and_publish

    run = open_checked_run(results)
    try:
        quality, report = validate_and_publish(run, whole_output_period(run))
    except PeriodBusy as exc:
        print(f"mpg demo: {exc}", file=sys.stderr)
        return exits.BUSY
    if not report:
        print(quality.describe(), file=sys.stderr)
        return exits.FAILED
    print(f"Report:  {report} (data quality checked: {quality.docs_index})")
    return exits.OK
