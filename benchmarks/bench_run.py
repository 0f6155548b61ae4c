"""Benchmark: `mpg run` on about a million simulated events, against three floors.

A floor is what any tool must pay to touch the same data and sum it per job
in DuckDB. The fastavro floor decodes every Avro record with fastavro; the
columnar floor reads every file into columns with polars (all fields, but
for scheduler files the nullable `workload` enum, which polars cannot read).
The Beam floor does the columnar floor's work inside the smallest Beam
pipeline, on the runner `mpg run` uses: what a run costs for being a Beam
pipeline before it computes anything (importing Beam alone takes longer
than the whole columnar floor).
Floors and runs are child processes of this command, one after the other,
so their wall time and peak memory (the highest RSS summed over a child and
its processes) are measured the same way on the same files. `mpg run` runs
twice: by default (one Beam pipeline, which Beam's local runner computes in
one process), and in two of Beam's worker processes (`--workers 2`, short
for `--direct_num_workers=2 --direct_running_mode=multi_processing`).
`--baseline DIR` also runs `mpg run` from another checkout of the code (e.g.
`git archive main | tar -x -C DIR`) in the same command, for a before/after
on the same machine minutes apart.

    .venv/bin/python benchmarks/bench_run.py            # ~1M events (44 simulated hours)
    .venv/bin/python benchmarks/bench_run.py --hours 6  # a quick look
    .venv/bin/python benchmarks/bench_run.py --input /tmp/fleet --baseline /tmp/base

Prints events/s, CPU seconds, peak memory and the ratio of each floor's time to the run's (1.0 would
be as fast as the floor); not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


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
    # The query below reads `events` by name (DuckDB's replacement scan).
    events = pa.table({"job_id": job_ids, "event_time": pa.array(times, type=pa.timestamp("us", tz="UTC"))})  # noqa: F841
    duckdb.sql("select job_id, count(*) as events, max(event_time) - min(event_time) as span from events group by job_id").fetchall()
    return len(job_ids)


def columnar_floor(input_dir: str) -> int:
    """Read every file into columns with polars and sum per job in DuckDB; returns the records read."""
    import pyarrow as pa

    events = pa.concat_tables(job_times(path) for path in telemetry_files(input_dir))
    sum_per_job(events)
    return len(events)


def beam_floor(input_dir: str) -> None:
    """The columnar floor's work in the smallest Beam pipeline: what any Beam run costs before it computes.

    The files are read in a `FlatMap`, gathered with `ToList` and summed
    once, on Beam's default (direct) runner in this process: importing Beam
    and running a pipeline are what this floor adds to the columnar one.
    """
    import apache_beam as beam

    with beam.Pipeline() as pipeline:
        (pipeline
         | beam.Create([str(path) for path in telemetry_files(input_dir)])
         | beam.Map(job_times)
         | beam.combiners.ToList()
         | beam.Map(lambda tables: sum_per_job(_concat(tables))))


def telemetry_files(input_dir: str) -> list[Path]:
    return sorted(Path(input_dir).glob("*/*.avro"))


def job_times(path) -> "pa.Table":
    """One file's job ids and event times, read into Arrow columns by polars."""
    import polars as pl

    path = Path(path)
    # polars cannot read the scheduler's nullable enum (`workload`): read the rest.
    columns = None if path.parent.name != "scheduler" else [
        "event_id", "event_time", "job_id", "type", "cluster", "accelerator", "chips",
        "framework", "team", "topology", "priority"]
    return pl.read_avro(path, columns=columns).select("job_id", "event_time").to_arrow()


def _concat(tables) -> "pa.Table":
    import pyarrow as pa

    return pa.concat_tables(tables)


def sum_per_job(events) -> int:
    """Events and span per job in DuckDB; returns the events summed."""
    import duckdb

    duckdb.sql("select job_id, count(*) as events, max(event_time) - min(event_time) as span from events group by job_id").fetchall()
    return len(events)


def measure(command: list[str], cwd: str | None = None, env: dict | None = None) -> tuple[float, float, float]:
    """Wall seconds, peak RSS in MiB and CPU seconds (user + system) of one child process and its own children.

    A run in Beam's worker processes (or an older checkout's `mpg run`,
    whose shards forked from a server the run started) computes in processes
    `wait4` does not report: the child runs in a session of its own, and
    every process of that session is sampled from /proc every 50 ms. Peak RSS is the highest sum over the session's processes;
    CPU seconds sum each process's last sample (a lower bound by under 50 ms
    a process). On a machine shared with other work, CPU seconds move less than wall time.
    """
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=cwd, env=env, start_new_session=True)
    peak_kib, cpu_ticks = 0, {}
    while child.poll() is None:
        rss_kib = 0
        for pid, ticks, kib in _session_processes(child.pid):
            cpu_ticks[pid], rss_kib = ticks, rss_kib + kib
        peak_kib = max(peak_kib, rss_kib)
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    if child.returncode:
        raise SystemExit(f"{' '.join(command)} exited with {child.returncode}")
    return seconds, peak_kib / 1024, sum(cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")


def _session_processes(session: int):
    """(pid, CPU ticks so far, RSS KiB) of every live process in `session`, from /proc."""
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # gone since listed
            continue
        # After the command's name: state is field 3, session 6, utime 14, stime 15, rss 24 (proc(5)).
        if int(fields[3]) == session:
            yield int(entry), int(fields[11]) + int(fields[12]), int(fields[21]) * page_kib


MAPPED_FOLDERS = ("pipelines", "transforms", "schemas", "sql", "configs")  # pyproject's package-dir


def baseline_path(checkout: Path, work: Path) -> Path:
    """A folder to put first on PYTHONPATH so that `fleet_goodput` is wholly the checkout's.

    The checkout's top-level folders install as `fleet_goodput.<folder>`
    (pyproject's package-dir), and the editable install maps those names to
    this checkout's folders: so the baseline's tree is laid out here as one
    package of links. A checkout from before the one namespace is used as is.
    """
    if '"fleet_goodput.transforms"' not in (checkout / "pyproject.toml").read_text():
        return checkout
    package = work / "baseline-path" / "fleet_goodput"
    package.mkdir(parents=True, exist_ok=True)
    for entry in [*(checkout / "fleet_goodput").iterdir(), *(checkout / name for name in MAPPED_FOLDERS)]:
        link = package / entry.name
        if entry.exists() and not link.exists():
            link.symlink_to(entry)
    return package.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=44.0, help="simulated hours (44 ≈ 1M events)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", help="work folder to keep (default: a temporary one)")
    parser.add_argument("--input", help="an existing telemetry folder to use instead of simulating")
    parser.add_argument("--baseline", metavar="SRC", help="a checkout of other code whose `mpg run` runs too, for a before/after")
    parser.add_argument("--floor-only", metavar="INPUT", help=argparse.SUPPRESS)
    parser.add_argument("--columnar-floor-only", metavar="INPUT", help=argparse.SUPPRESS)
    parser.add_argument("--beam-floor-only", metavar="INPUT", help=argparse.SUPPRESS)
    args, beam_args = parser.parse_known_args()
    if args.floor_only:
        floor(args.floor_only)
        return 0
    if args.columnar_floor_only:
        columnar_floor(args.columnar_floor_only)
        return 0
    if args.beam_floor_only:
        beam_floor(args.beam_floor_only)
        return 0

    work = Path(args.dir or tempfile.mkdtemp(prefix="mpg-bench-"))
    telemetry = Path(args.input) if args.input else work / "telemetry"
    if not args.input:
        print(f"simulating {args.hours:g} h (seed {args.seed}) into {work} ...", flush=True)
        # In a child of its own, so that this process stays small while the others run.
        subprocess.run([sys.executable, "-m", "fleet_goodput.cli", "simulate", "--out", str(telemetry),
                        "--seed", str(args.seed), "--hours", str(args.hours), "-q"], check=True)
    counts = {stream: count_records(telemetry, stream) for stream in ("scheduler", "runtime", "profiler")}
    events = sum(counts.values())

    mpg = str(Path(sys.executable).with_name("mpg"))
    rows = {
        "floor: fastavro decode + DuckDB sum": measure([sys.executable, __file__, "--floor-only", str(telemetry)]),
        "floor: polars columns + DuckDB sum": measure([sys.executable, __file__, "--columnar-floor-only", str(telemetry)]),
        "floor: the same in a Beam pipeline": measure([sys.executable, __file__, "--beam-floor-only", str(telemetry)]),
    }
    if args.baseline:
        env = {**os.environ, "PYTHONPATH": str(baseline_path(Path(args.baseline).resolve(), work))}
        rows["baseline mpg run (its defaults)"] = measure(
            [mpg, "run", "--input", str(telemetry), "--output", str(work / "results-baseline"), *beam_args],
            cwd=args.baseline, env=env)
    rows["mpg run (one pipeline, one process)"] = measure(
        [mpg, "run", "--input", str(telemetry), "--output", str(work / "results"), *beam_args])
    rows["mpg run --workers 2 (Beam's processes)"] = measure(
        [mpg, "run", "--input", str(telemetry), "--output", str(work / "results-2"), "--workers", "2", *beam_args])

    print(f"\n{events:,} events ({', '.join(f'{n:,} {s}' for s, n in counts.items())}), {os.cpu_count()} cores\n")
    # Ratios of time, floor / run (1.0: as fast as the floor), by wall clock and by CPU seconds.
    print(f"{'':<40} {'seconds':>8} {'events/s':>10} {'CPU s':>7} {'peak MiB':>9} "
          f"{'fastavro floor/run':>19} {'columnar floor/run':>19} {'Beam floor/run':>15} {'same three, by CPU s':>23}")
    fastavro_s, _, fastavro_cpu = rows["floor: fastavro decode + DuckDB sum"]
    columnar_s, _, columnar_cpu = rows["floor: polars columns + DuckDB sum"]
    beam_s, _, beam_cpu = rows["floor: the same in a Beam pipeline"]
    for name, (seconds, mib, cpu_s) in rows.items():
        print(f"{name:<40} {seconds:>8.1f} {events / seconds:>10,.0f} {cpu_s:>7.1f} {mib:>9,.0f} "
              f"{fastavro_s / seconds:>19.2f} {columnar_s / seconds:>19.2f} {beam_s / seconds:>15.2f} "
              f"{fastavro_cpu / cpu_s:>7.2f} {columnar_cpu / cpu_s:>7.2f} {beam_cpu / cpu_s:>7.2f}")
    return 0


def count_records(telemetry: Path, stream: str) -> int:
    """Records in a stream's files, from the Avro blocks' counts (nothing is decoded)."""
    import fastavro

    total = 0
    for path in sorted(Path(telemetry, stream).glob("*.avro")):
        with open(path, "rb") as handle:
            total += sum(block.num_records for block in fastavro.block_reader(handle))
    return total


if __name__ == "__main__":
    sys.exit(main())
