"""Benchmark: a week of daily runs into one output, against one run over the week.

Simulates DAYS consecutive days of a fleet (jobs that span days included),
cuts the telemetry at midnights as it would arrive, and runs `mpg run` once a
day into one output store, each run continuing the last. Then runs `mpg run`
from scratch over all the days. Every run is a child process, so wall time and
peak memory (max RSS) are measured alike.

    .venv/bin/python benchmarks/bench_daily.py                      # 7 days, 20 jobs an hour
    .venv/bin/python benchmarks/bench_daily.py --days 3 --jobs-per-hour 5   # a quick look

Prints each day's seconds and peak MiB, the from-scratch run's, and the ratio
of the last day's time to the first's (a continuing run should cost what its
own day holds, not what the history holds). Not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAY_US = 86_400 * 1_000_000


def prepare(root: Path, days: int, jobs_per_hour: float, seed: int) -> None:
    """Simulate the fleet and cut it into days (run in a child process: see main)."""
    from fleet_goodput.simulator import simulate
    from fleet_goodput.simulator.run import START_US
    from fleet_goodput.telemetry.avro_io import split_by_time

    hours = days * 24
    summary = simulate(root / "fleet", seed=seed, hours=hours, jobs=round(jobs_per_hour * hours))
    print(f"  {summary}", flush=True)
    split_by_time(root / "fleet", [START_US + d * DAY_US for d in range(1, days)], root / "days")


def measure(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS in MiB of one child process."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(command)}")
    return seconds, usage.ru_maxrss / 1024


def mpg_run(input_dir: Path, output_dir: Path) -> list[str]:
    return [sys.executable, "-m", "fleet_goodput.cli", "run", "--input", str(input_dir), "--output", str(output_dir)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--jobs-per-hour", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workdir", help="keep the files here (default: a temporary folder)")
    parser.add_argument("--prepare-only", metavar="ROOT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare_only:
        prepare(Path(args.prepare_only), args.days, args.jobs_per_hour, args.seed)
        return

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.workdir or scratch)
        print(f"simulating {args.days} days, {args.jobs_per_hour:g} jobs an hour ...", flush=True)
        # In a child: a child's peak memory as wait4 reports it starts from its
        # parent's, so this process must stay small for the runs' figures.
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--prepare-only",
                str(root),
                "--days",
                str(args.days),
                "--jobs-per-hour",
                str(args.jobs_per_hour),
                "--seed",
                str(args.seed),
            ],
            check=True,
        )
        parts = sorted(path for path in (root / "days").iterdir() if path.is_dir())

        rows = []
        for day, part in enumerate(parts, start=1):
            events = sum(1 for _ in part.glob("*/*.avro"))
            seconds, rss = measure(mpg_run(part, root / "daily"))
            rows.append((f"day {day}", seconds, rss))
            print(f"  day {day}: {seconds:6.1f} s  {rss:7.0f} MiB  ({events} files)", flush=True)
        seconds, rss = measure(mpg_run(root / "fleet", root / "scratch"))
        rows.append((f"all {args.days} days from scratch", seconds, rss))

        print()
        print(f"{'run':<24} {'seconds':>8} {'peak MiB':>9}")
        for name, seconds, rss in rows:
            print(f"{name:<24} {seconds:8.1f} {rss:9.0f}")
        first, last = rows[0][1], rows[args.days - 1][1]
        print(
            f"\nday {args.days} / day 1 time: {last / first:.2f}x   "
            f"sum of daily runs / from scratch: {sum(r[1] for r in rows[:-1]) / rows[-1][1]:.2f}x"
        )


if __name__ == "__main__":
    main()
