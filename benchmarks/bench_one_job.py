"""Benchmark: the memory of `mpg run` over one job of millions of runtime events in one file.

A fleet's memory follows its open jobs; a single job's follows its own events, which its key step
holds together (fleet_goodput/core/session.py). This writes one training job of N runtime events in
one Avro file (steps of 100 ms, a checkpoint save every 1,000 steps, a profiler sample an hour) with
its SUBMIT, ALLOCATE and FINISH, and runs `mpg run` on it into a fresh output as a child process,
measuring wall time, CPU seconds and peak memory (the highest RSS summed over the run's processes:
`bench_run.measure`).

    .venv/bin/python benchmarks/bench_one_job.py                       # 1M and 3M events
    .venv/bin/python benchmarks/bench_one_job.py --millions 0.3 1 3 --inputs /tmp/one-job

`--inputs DIR` keeps the inputs (DIR/1M, …) for the next command; writing them is not measured.
`--baseline SRC` runs another checkout's `mpg run` on the same inputs first. Not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_run import baseline_path, measure  # benchmarks/ is on the path when a script in it runs

from fleet_goodput.telemetry.avro_io import write_events

START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
STEP_US = 100_000
SAVE_EVERY = 1_000  # steps
HOUR_US = 3_600_000_000
JOB = "job-one"
CHIPS = 8


def runtime_events(count: int):
    """`count` runtime events of one job: INIT, then steps, each 1,000th followed by a checkpoint save."""
    yield {
        "event_id": "r-init-s",
        "event_time": START_US,
        "job_id": JOB,
        "type": "INIT_START",
        "step": None,
        "attempt": None,
    }
    yield {
        "event_id": "r-init-e",
        "event_time": START_US + 1_000_000,
        "job_id": JOB,
        "type": "INIT_END",
        "step": None,
        "attempt": None,
    }
    time_us, step, written = START_US + 1_000_000, 1, 2
    while written < count:
        for kind, at_us in (("STEP_START", time_us), ("STEP_END", time_us + STEP_US)):
            yield {
                "event_id": f"r{written}",
                "event_time": at_us,
                "job_id": JOB,
                "type": kind,
                "step": step,
                "attempt": None,
            }
            written += 1
        time_us += STEP_US
        if step % SAVE_EVERY == 0 and written + 2 <= count:
            for kind, at_us in (("CHECKPOINT_SAVE_START", time_us), ("CHECKPOINT_SAVE_END", time_us + 2_000_000)):
                yield {
                    "event_id": f"r{written}",
                    "event_time": at_us,
                    "job_id": JOB,
                    "type": kind,
                    "step": step,
                    "attempt": None,
                }
                written += 1
            time_us += 2_000_000
        step += 1


def end_of(count: int) -> int:
    """When the job's last runtime event is (as `runtime_events` lays them out), plus a second."""
    steps = count // 2
    return START_US + 1_000_000 + steps * STEP_US + (steps // SAVE_EVERY) * 2_000_000 + 1_000_000


def write_input(folder: Path, count: int) -> None:
    end_us = end_of(count)
    write_events(folder / "runtime" / "part-00000.avro", "runtime", runtime_events(count))
    write_events(
        folder / "scheduler" / "part-00000.avro",
        "scheduler",
        [
            {
                "event_id": f"s{n}",
                "event_time": time_us,
                "job_id": JOB,
                "type": kind,
                "cluster": "c",
                "accelerator": "tpu-v5e",
                "chips": chips,
                "workload": "TRAINING" if kind == "SUBMIT" else None,
                "framework": None,
                "team": None,
                "topology": None,
                "priority": None,
            }
            for n, (kind, time_us, chips) in enumerate(
                [("SUBMIT", START_US, CHIPS), ("ALLOCATE", START_US, CHIPS), ("FINISH", end_us, 0)]
            )
        ],
        # As a finished job's dump does, it states the period it covers: the as-of time is the job's end,
        # so its figures are computed. Without it the FINISH, after hours with no scheduler event, is a
        # clock ahead and every event waits in the store for a later run (docs/metric.md).
        observed={"c": (START_US, end_us)},
    )
    write_events(
        folder / "profiler" / "part-00000.avro",
        "profiler",
        [
            {
                "event_id": f"p{n}",
                "event_time": time_us,
                "job_id": JOB,
                "step": 1 + n * HOUR_US // STEP_US,
                "duration_s": 0.1,
                "chips": CHIPS,
                "ideal_flops": 1e14,
                "flops_source": "ANALYTIC",
                "bytes_accessed": None,
                "precision": None,
            }
            for n, time_us in enumerate(range(START_US + 2_000_000, end_us, HOUR_US))
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--millions", type=float, nargs="+", default=[1, 3], help="runtime events, in millions")
    parser.add_argument("--inputs", type=Path, help="keep the inputs here (written where missing)")
    parser.add_argument("--baseline", type=Path, help="another checkout whose `mpg run` runs first")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-one-job-"))
    inputs = args.inputs or work / "inputs"
    print(f"{'events':>10} {'checkout':>9} {'wall s':>7} {'cpu s':>7} {'peak MiB':>9} {'input MiB':>9}")
    try:
        for millions in args.millions:
            count = int(millions * 1_000_000)
            folder = inputs / f"{millions:g}M"
            if not (folder / "runtime" / "part-00000.avro").exists():
                shutil.rmtree(folder, ignore_errors=True)
                write_input(folder, count)
            size_mib = sum(p.stat().st_size for p in folder.rglob("*.avro")) / 2**20
            checkouts = ([("baseline", baseline_path(args.baseline, work))] if args.baseline else []) + [("this", None)]
            for name, path in checkouts:
                output = work / f"out-{name}-{millions:g}"
                env = {**os.environ, "PYTHONPATH": str(path)} if path else None
                command = [
                    sys.executable,
                    "-m",
                    "fleet_goodput.cli",
                    "run",
                    "-q",
                    "--input",
                    str(folder),
                    "--output",
                    str(output),
                ]
                seconds, peak_mib, cpu_s = measure(command, env=env)
                print(
                    f"{count:>10,} {name:>9} {seconds:>7.1f} {cpu_s:>7.1f} {peak_mib:>9,.0f} {size_mib:>9.1f}",
                    flush=True,
                )
                shutil.rmtree(output, ignore_errors=True)
    except subprocess.CalledProcessError as error:
        print(error, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
