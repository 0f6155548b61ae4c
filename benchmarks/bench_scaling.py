"""Benchmark: how `mpg run --chunk_hours 24` scales with the input, 1M to 10M events.

Simulates the default fleet for long enough to hold about 1, 5 and 10 million
events, and runs `mpg run` in daily chunks on each into a fresh output, as a
child process, measuring wall time, CPU time and peak memory (the highest RSS
summed over the run's processes: `bench_run.measure`). With chunks, time
should grow linearly with the events and peak memory should follow one day of
telemetry plus the open jobs, not the whole input. Each chunk is one Beam
pipeline that reads every file for its chunk's events; `--workers N` runs
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
day's events belong to more open jobs (measured at 10M, one process: 15.4
µs an event on day 1, 17-19 from day 4 on).

    .venv/bin/python benchmarks/bench_scaling.py                 # 1M, 5M, 10M
    .venv/bin/python benchmarks/bench_scaling.py --millions 1 2  # a quick look

Not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_run import count_records, measure  # benchmarks/ is on the path when a script in it runs

# The default fleet with --steady, measured on seed 11: 5,179,905 events in 161 h
# (its first 32 h alone held 34,800 an hour).
EVENTS_PER_HOUR = 32_000


def count_events(fleet: Path) -> int:
    return sum(count_records(fleet, stream) for stream in ("scheduler", "runtime", "profiler"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--millions", type=float, nargs="+", default=[1, 5, 10])
    parser.add_argument("--chunk_hours", type=int, default=24)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workers", type=int, help="Beam's worker processes for `mpg run` (default: Beam's, one)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for millions in args.millions:
            root = Path(scratch, f"{millions:g}M")
            hours = round(millions * 1e6 / EVENTS_PER_HOUR)
            # Simulated in a child of its own: a child's peak memory as wait4 reports
            # it starts from its parent's, so this process must stay small.
            subprocess.run([sys.executable, "-m", "fleet_goodput.cli", "simulate", "--out", str(root / "fleet"),
                            "--seed", str(args.seed), "--hours", str(hours), "--steady", "-q"], check=True)
            events = count_events(root / "fleet")
            command = [sys.executable, "-m", "fleet_goodput.cli", "run", "--input", str(root / "fleet"),
                       "--output", str(root / "out"), f"--chunk_hours={args.chunk_hours}"]
            seconds, rss, cpu = measure(command + ([f"--workers={args.workers}"] if args.workers else []))
            rows.append((events, hours, seconds, rss))
            print(f"  {events:>11,} events ({hours} h, {events / hours:,.0f} an hour): {seconds:7.1f} s  "
                  f"({cpu:.1f} s CPU)  {events / seconds:9,.0f} events/s  {rss:7.0f} MiB peak", flush=True)
            subprocess.run(["rm", "-rf", str(root)], check=True)
    base_events, _, base_seconds, _ = rows[0]
    print(f"\n{'events':>12} {'hours':>6} {'events/h':>9} {'seconds':>8} {'x time':>7} {'x events':>9} {'peak MiB':>9}")
    for events, hours, seconds, rss in rows:
        print(f"{events:>12,} {hours:>6} {events / hours:>9,.0f} {seconds:8.1f} {seconds / base_seconds:7.2f} "
              f"{events / base_events:9.2f} {rss:9.0f}")


if __name__ == "__main__":
    main()
