"""`mpg simulate`: write a simulated fleet's telemetry and its ground truth.

    mpg simulate --out out/sim --seed 7 --hours 6 --jobs 40

See fleet_goodput/simulator for what is simulated and how the truth is kept
independent of the events.
"""

from __future__ import annotations

import argparse
import sys

from fleet_goodput import exits
from fleet_goodput.console import VERBOSITY_HELP, progress, say
from fleet_goodput.core.config import load_settings
from fleet_goodput.simulator import fleet

DESCRIPTION = """\
Simulate an accelerator fleet (3-5 clusters of TPUs and GPUs, gang-scheduled
training, serving and batch-inference jobs with queueing, partial allocation,
preemption, failures and checkpoints) and write what a real fleet would emit:

  DIR/scheduler/part-*.avro, DIR/runtime/part-*.avro, DIR/profiler/part-*.avro
      telemetry per docs/metric.md section 2, shuffled across files (not in time order);
  DIR/truth/job_window.parquet, jobs.parquet, capacity_window.parquet, truth.json
      the chip-seconds the pipeline should compute, derived from the simulated
      timeline rather than from the events, for testing the pipeline against.

The same seed always writes the same bytes. The run stops at the horizon
(start + HOURS); jobs still running there are cut and reported RUNNING, and a
CAPACITY event sits exactly on the horizon so it is the input's latest event.
"""

EPILOG = (
    """\
examples:
  mpg simulate --out out/day                       a default day (~1300 jobs, ~0.5M events)
  mpg simulate --out out/small --hours 4 --jobs 40  a small fleet for tests, about a second
  mpg simulate --out out/week --hours 168 --steady  seven days, each as busy as the first (~5M events)

"""
    + VERBOSITY_HELP
    + "\n\n"
    + exits.describe()
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="write a simulated fleet's Avro telemetry and its ground truth",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="folder to write scheduler/, runtime/, profiler/ and truth/ into"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="random seed; the same seed gives the same files (default 0)"
    )
    parser.add_argument(
        "--hours",
        type=_positive_float,
        default=24.0,
        help="length of the simulated period, from 2026-01-01T00:00Z (default 24)",
    )
    parser.add_argument(
        "--jobs",
        type=_non_negative_int,
        default=None,
        help="number of jobs to submit over the period (default: about 54 an hour)",
    )
    parser.add_argument(
        "--node-failures",
        action="store_true",
        help="hosts of 8 chips fail (about once a month each) and are repaired after 0.5-4 h: "
        "capacity lost and regained, and the jobs on them preempted, each event saying why "
        "(NODE_FAIL: xid 79 ..., REPAIRED: ...). Off by default, so a seed draws what it always drew",
    )
    parser.add_argument(
        "--steady",
        action="store_true",
        help="keep the fleet as busy at any --hours, so that inputs of different lengths compare "
        "like with like (benchmarks/bench_scaling.py). By default a quarter of all the jobs "
        "arrive in the first ten minutes: a longer period starts with a bigger backlog and has "
        "more events an hour. With --steady the jobs arrive evenly and the fleet starts with "
        f"{fleet.STEADY_BACKLOG_HOURS:g} hours' worth of them on top: twice the hours, about "
        "twice the events. --jobs then counts the even arrivals only",
    )
    parser.add_argument(
        "--config",
        metavar="YAML",
        default=None,
        help="settings file overriding the defaults (window_s, accelerator catalogue)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the telemetry and truth already in --out")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fleet_goodput.simulator import simulate
    from fleet_goodput.telemetry.avro_io import clear_telemetry, telemetry_files

    if telemetry_files(args.out):
        if not args.overwrite:
            print(f"mpg simulate: {args.out} already holds telemetry; pass --overwrite to replace it", file=sys.stderr)
            return exits.USAGE
        clear_telemetry(args.out, also=("truth",))
    settings = load_settings(args.config)
    progress(f"Simulating {args.hours:g} h of a fleet (seed {args.seed}) into {args.out} ...")
    summary = simulate(
        args.out,
        seed=args.seed,
        hours=args.hours,
        jobs=args.jobs,
        steady=args.steady,
        window_s=settings.window_s,
        settings=settings,
        node_failures=args.node_failures,
    )
    first, *rest = summary.describe().splitlines()
    print(first)
    say("\n".join(rest))
    return exits.OK


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value
