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

from fleet_goodput.avro_io import split_by_time
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US

DAY_US = 86_400 * 1_000_000


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
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.workdir or scratch)
        hours = args.days * 24
        print(f"simulating {args.days} days, {args.jobs_per_hour:g} jobs an hour ...", flush=True)
        summary = simulate(root / "fleet", seed=args.seed, hours=hours, jobs=round(args.jobs_per_hour * hours))
        print(f"  {summary}", flush=True)
        parts = split_by_time(root / "fleet", [START_US + d * DAY_US for d in range(1, args.days)], root / "days")

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
        print(f"\nday {args.days} / day 1 time: {last / first:.2f}x   "
              f"sum of daily runs / from scratch: {sum(r[1] for r in rows[:-1]) / rows[-1][1]:.2f}x")


if __name__ == "__main__":
    main()
