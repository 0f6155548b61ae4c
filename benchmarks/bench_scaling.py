"""Benchmark: how `mpg run --chunk_hours 24` scales with the input, 1M to 10M events.

Simulates the default fleet for long enough to hold about 1, 5 and 10 million
events, and runs `mpg run` in daily chunks on each into a fresh output, as a
child process, measuring wall time, CPU seconds and peak memory (the highest
RSS summed over the run's processes: `bench_run.measure`). With chunks, time
should grow linearly with the events and peak memory should follow one day of
telemetry plus the open jobs, not the whole input. A backfill decodes each
new file once into its share of every chunk (transforms/slices.py), then
computes the chunks one Beam pipeline after the other; `--workers N` runs
each in N of Beam's worker processes.

The inputs are simulated with `--steady`, so that 10 times the events is 10
times the hours of the same fleet under the same load. By default a quarter
of a simulation's jobs arrive in its first ten minutes, so the longer the
input, the busier its first days: 24,400 events an hour over 32 h, 32,400
over 323 h (46,600 in its first day), and a larger input was also a denser
one. The table prints the events per simulated hour of each input: with
`--steady` they differ by chance only, as each length draws its own jobs (by
up to a tenth at these sizes: seed 11 has 34,800 an hour over 32 h, 32,200
over 161 h). Even steady, a fleet's first days are cheaper per event than
its later ones: long jobs pile up until as many end as start, so a later
day's events belong to more open jobs.

Simulating is not measured, and `--inputs DIR` keeps the inputs there
(DIR/1M, DIR/5M, …), simulated only where missing, for the next command.
`--baseline SRC` runs another checkout's `mpg run` (e.g. `git archive main |
tar -x -C SRC`) on the same inputs in the same command, before this one's;
`--runs plain` runs `mpg run` without `--chunk_hours` (its own default) instead,
`--runs chunked plain` both.
On a shared host compare CPU seconds, not wall time: the load average is
printed before and after each run.

    .venv/bin/python benchmarks/bench_scaling.py                 # 1M, 5M, 10M
    .venv/bin/python benchmarks/bench_scaling.py --millions 1 2  # a quick look
    .venv/bin/python benchmarks/bench_scaling.py --inputs /tmp/scaling-inputs --baseline /tmp/base --runs chunked plain

Not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_run import baseline_path, count_records, measure  # benchmarks/ is on the path when a script in it runs

# The default fleet with --steady, measured on seed 11: 5,179,905 events in 161 h
# (its first 32 h alone held 34,800 an hour).
EVENTS_PER_HOUR = 32_000


def count_events(fleet: Path) -> int:
    return sum(count_records(fleet, stream) for stream in ("scheduler", "runtime", "profiler"))


def simulated(inputs: Path, millions: float, seed: int) -> tuple[Path, int]:
    """The input of about `millions` million events under `inputs`, simulated if missing; its hours."""
    hours = round(millions * 1e6 / EVENTS_PER_HOUR)
    fleet = inputs / f"{millions:g}M"
    if not any(fleet.glob("*/*.avro")):
        # Simulated in a child of its own: a child's peak memory as wait4 reports
        # it starts from its parent's, so this process must stay small.
        subprocess.run(
            [
                sys.executable,
                "-m",
                "fleet_goodput.cli",
                "simulate",
                "--out",
                str(fleet),
                "--seed",
                str(seed),
                "--hours",
                str(hours),
                "--steady",
                "-q",
            ],
            check=True,
        )
    return fleet, hours


def load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--millions", type=float, nargs="+", default=[1, 5, 10])
    parser.add_argument("--chunk_hours", type=int, default=24)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workers", type=int, help="Beam's worker processes for `mpg run` (default: Beam's, one)")
    parser.add_argument("--inputs", help="a folder to keep the simulated inputs in, and reuse (default: temporary)")
    parser.add_argument("--baseline", metavar="SRC", help="a checkout of other code whose `mpg run` runs too")
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=("chunked", "plain"),
        default=["chunked"],
        help="with --chunk_hours (chunked), without (plain), or both",
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        inputs = Path(args.inputs or scratch)
        codes = [("this", None)]
        if args.baseline:
            codes.insert(
                0,
                (
                    "baseline",
                    {**os.environ, "PYTHONPATH": str(baseline_path(Path(args.baseline).resolve(), Path(scratch)))},
                ),
            )
        variants = {
            "chunked": (f"--chunk_hours={args.chunk_hours}", [f"--chunk_hours={args.chunk_hours}"]),
            "plain": ("no --chunk_hours", []),
        }
        variants = [variants[run] for run in args.runs]
        for millions in args.millions:
            fleet, hours = simulated(inputs, millions, args.seed)
            events = count_events(fleet)
            for code, env in codes:
                for variant, flags in variants:
                    output = Path(scratch, "out")
                    # The console script, not `-m` from the baseline's folder, where sys.path would
                    # mix its package with this checkout's (bench_run.baseline_path).
                    command = [
                        str(Path(sys.executable).with_name("mpg")),
                        "run",
                        "--input",
                        str(fleet),
                        "--output",
                        str(output),
                        *flags,
                        "-q",
                    ]
                    before = load()
                    seconds, rss, cpu = measure(
                        command + ([f"--workers={args.workers}"] if args.workers else []),
                        cwd=args.baseline if env else None,
                        env=env,
                    )
                    shutil.rmtree(output)
                    rows.append((code, variant, events, hours, seconds, cpu, rss))
                    print(
                        f"  {code} {variant}: {events:>11,} events ({hours} h, {events / hours:,.0f} an hour): "
                        f"{seconds:7.1f} s  {cpu:7.1f} s CPU  {cpu * 1e6 / events:5.1f} µs/event (CPU)  "
                        f"{rss:7.0f} MiB peak  (load {before} before, {load()} after)",
                        flush=True,
                    )
    print(
        f"\n{'code':<9} {'run':<18} {'events':>12} {'hours':>6} {'events/h':>9} {'wall s':>8} {'CPU s':>8} "
        f"{'µs/event':>9} {'x CPU':>6} {'x events':>9} {'peak MiB':>9}"
    )
    first = {}
    for code, variant, events, hours, seconds, cpu, rss in rows:
        base_events, base_cpu = first.setdefault((code, variant), (events, cpu))
        print(
            f"{code:<9} {variant:<18} {events:>12,} {hours:>6} {events / hours:>9,.0f} {seconds:8.1f} {cpu:8.1f} "
            f"{cpu * 1e6 / events:9.1f} {cpu / base_cpu:6.2f} {events / base_events:9.2f} {rss:9.0f}"
        )


if __name__ == "__main__":
    main()
