"""Benchmark: `mpg run` on about a million simulated events, against a floor.

The floor is what any tool must pay to touch the same data: decoding every
Avro record with fastavro and summing per job in DuckDB. Both run as child
processes of this command, one after the other, so their wall time and peak
memory (max RSS) are measured the same way on the same files.

    .venv/bin/python benchmarks/bench_run.py            # ~1M events (44 simulated hours)
    .venv/bin/python benchmarks/bench_run.py --hours 6  # a quick look

Prints events/s for both and the ratio; not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def floor(input_dir: str) -> int:
    """Decode every record with fastavro and sum per job in DuckDB; returns the records read."""
    import duckdb
    import fastavro
    import pyarrow as pa

    job_ids, times = [], []
    for path in sorted(Path(input_dir).glob("*/*.avro")):
        with open(path, "rb") as handle:
            for record in fastavro.reader(handle):
                job_ids.append(record["job_id"])
                times.append(record["event_time"])
    events = pa.table({"job_id": job_ids, "event_time": pa.array(times, type=pa.timestamp("us", tz="UTC"))})
    duckdb.sql("select job_id, count(*) as events, max(event_time) - min(event_time) as span from events group by job_id").fetchall()
    return len(job_ids)


def measure(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS in MiB of one child process."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(command)}")
    return seconds, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=44.0, help="simulated hours (44 ≈ 1M events)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", help="work folder to keep (default: a temporary one)")
    parser.add_argument("--floor-only", metavar="INPUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_only:
        floor(args.floor_only)
        return 0

    from fleet_goodput.simulator import simulate

    work = Path(args.dir or tempfile.mkdtemp(prefix="mpg-bench-"))
    print(f"simulating {args.hours:g} h (seed {args.seed}) into {work} ...", flush=True)
    simulation = simulate(work / "telemetry", seed=args.seed, hours=args.hours)
    events = sum(simulation.events.values())
    mpg = str(Path(sys.executable).with_name("mpg"))
    floor_s, floor_mib = measure([sys.executable, __file__, "--floor-only", str(work / "telemetry")])
    run_s, run_mib = measure([mpg, "run", "--input", str(work / "telemetry"), "--output", str(work / "results")])

    print(f"\n{events:,} events ({', '.join(f'{n:,} {s}' for s, n in simulation.events.items())}), {os.cpu_count()} cores\n")
    print(f"{'':<44} {'seconds':>8} {'events/s':>10} {'peak MiB':>9}")
    print(f"{'floor: fastavro decode + DuckDB sum':<44} {floor_s:>8.1f} {events / floor_s:>10,.0f} {floor_mib:>9,.0f}")
    print(f"{'mpg run (Beam FnApiRunner, 1 worker)':<44} {run_s:>8.1f} {events / run_s:>10,.0f} {run_mib:>9,.0f}")
    print(f"\nmpg run takes {run_s / floor_s:.1f}x the floor's time and {run_mib / floor_mib:.1f}x its memory.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
