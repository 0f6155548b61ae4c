"""Benchmark: what `mpg run` costs, fixed and per event, against floors measured in the same command.

A floor is what any tool must pay to touch the same data and sum it per job
in DuckDB:

- the columnar floor reads every file into columns with polars (all fields,
  but for scheduler files the nullable `workload` enum, which polars cannot
  read), in one plain process, no runner;
- the Beam floor does the columnar floor's work inside the smallest Beam
  pipeline (`Create` of the paths, a `Map` reading each with polars, `ToList`,
  the DuckDB sum) on the runner and with the options `mpg run` uses by default
  (`fleet_goodput.pipelines.goodput.DEFAULT_RUNNER`, in the process): what a
  run costs for being a Beam pipeline before it computes anything;
- the fastavro floor decodes every Avro record with fastavro (`--fastavro`).

Three measurements, every one a child process (CPU s: user + system of it
and its own processes; peak RSS summed over them), alternated round by round
so that a change in the host's load falls on every row alike; the least CPU s
of the rounds is kept:

1. **Fixed and marginal cost**: each floor and `mpg run` (a fresh output) on
   two inputs, SMALL and LARGE hours of the same simulated fleet. The marginal
   cost is the slope, (CPU at LARGE - CPU at SMALL) / (events at LARGE - events
   at SMALL), in µs per event; the fixed cost is what is left at zero events.
2. **A continuing hourly run**: a store holding every hour of the SMALL input
   but its last; then `mpg run` over the input folder that now also holds the
   last hour's events (cut from each of its files), continuing a copy of that
   store, against the Beam floor over the same new files.
3. **Small commands** on that store: `mpg --help`, `mpg runs`, `mpg sql`.

    .venv/bin/python benchmarks/bench_run.py                         # 22 h and 44 h (about 1.2M events)
    .venv/bin/python benchmarks/bench_run.py --hours 3 6 --rounds 1  # a quick look
    .venv/bin/python benchmarks/bench_run.py --dir /tmp/bench --baseline /tmp/base

`--dir` keeps the simulated inputs there (simulated only where missing), for
the next command. `--baseline SRC` also runs `mpg run` from another checkout
(e.g. `git archive main | tar -x -C SRC`) on the same inputs, in the same
rounds. `--fastavro` adds the fastavro floor. The load average (`uptime`) is
printed before and after. Not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

HOUR_US = 3_600_000_000


def fastavro_floor(input_dir: str) -> int:
    """Decode every record with fastavro and sum per job in DuckDB; returns the records read."""
    import fastavro
    import pyarrow as pa

    job_ids, times = [], []
    for path in telemetry_files(input_dir):
        with open(path, "rb") as handle:
            for record in fastavro.reader(handle):
                job_ids.append(record["job_id"])
                times.append(record["event_time"])
    return sum_per_job(pa.table({"job_id": job_ids, "event_time": pa.array(times, type=pa.timestamp("us", tz="UTC"))}))


def columnar_floor(input_dir: str) -> int:
    """Read every file into columns with polars and sum per job in DuckDB; returns the records read."""
    import pyarrow as pa

    return sum_per_job(pa.concat_tables(job_times(path) for path in telemetry_files(input_dir)))


def beam_floor(input_dir: str, flags: list[str]) -> None:
    """The columnar floor's work in the smallest Beam pipeline, with Beam's `flags` (those of `mpg run`,
    `beam_floor_flags`, which the parent process reads: this one imports no project code)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    with beam.Pipeline(options=PipelineOptions(flags)) as pipeline:
        (
            pipeline
            | beam.Create([str(path) for path in telemetry_files(input_dir)])
            | beam.Map(job_times)
            | beam.combiners.ToList()
            | beam.Map(lambda tables: sum_per_job(_concat(tables)))
        )


def beam_floor_flags() -> list[str]:
    """The flags `mpg run` gives Beam when it is given none (fleet_goodput/pipelines/goodput.py)."""
    from fleet_goodput.pipelines.goodput import DEFAULT_RUNNER

    return [f"--runner={DEFAULT_RUNNER}", "--no_pipeline_type_check"]


def telemetry_files(input_dir: str) -> list[Path]:
    return sorted(Path(input_dir).glob("*/*.avro"))


def job_times(path) -> "pa.Table":
    """One file's job ids and event times, read into Arrow columns by polars."""
    import polars as pl

    path = Path(path)
    # polars cannot read the scheduler's nullable enum (`workload`): read the rest.
    columns = (
        None
        if path.parent.name != "scheduler"
        else [
            "event_id",
            "event_time",
            "job_id",
            "type",
            "cluster",
            "accelerator",
            "chips",
            "framework",
            "team",
            "topology",
            "priority",
        ]
    )
    return pl.read_avro(path, columns=columns).select("job_id", "event_time").to_arrow()


def _concat(tables) -> "pa.Table":
    import pyarrow as pa

    return pa.concat_tables(tables)


def sum_per_job(events) -> int:
    """Events and span per job in DuckDB; returns the events summed."""
    import duckdb

    duckdb.sql(
        "select job_id, count(*) as events, max(event_time) - min(event_time) as span from events group by job_id"
    ).fetchall()
    return len(events)


FLOORS = {
    "--fastavro-floor-only": fastavro_floor,
    "--columnar-floor-only": columnar_floor,
    "--beam-floor-only": beam_floor,
}


def measure(command: list[str], cwd: str | None = None, env: dict | None = None) -> tuple[float, float, float]:
    """Wall seconds, peak RSS in MiB and CPU seconds (user + system) of one child process and the children it waits for.

    CPU seconds are the kernel's account (`wait4`), exact for a command of a
    fraction of a second. The child runs in a session of its own, whose
    processes are sampled from /proc every 50 ms: peak RSS is the highest sum
    over them, and their summed CPU stands instead where it is more (processes
    the child did not wait for, such as Beam's workers under `--workers`).
    """
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=cwd, env=env, start_new_session=True)
    peak_kib, cpu_ticks = 0, {}
    while True:
        rss_kib = 0
        for pid, ticks, kib in _session_processes(child.pid):
            cpu_ticks[pid], rss_kib = ticks, rss_kib + kib
        peak_kib = max(peak_kib, rss_kib)
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    if child.returncode:
        raise SystemExit(f"{' '.join(command)} exited with {child.returncode}")
    sampled = sum(cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")
    return seconds, peak_kib / 1024, max(usage.ru_utime + usage.ru_stime, sampled)


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


def compile_bytecode(checkout: Path) -> None:
    """Write the bytecode of a checkout's package, as an install does for its users.

    Where PYTHONDONTWRITEBYTECODE is set (some CI images and sandboxes set it), Python never caches a
    module's bytecode, so every `mpg` compiles the whole package from source again: about 0.25 CPU s of
    every command on 2 cores, which no user with a normal install pays.
    """
    for folder in ["fleet_goodput", *MAPPED_FOLDERS]:
        if (checkout / folder).is_dir():
            compileall.compile_dir(checkout / folder, quiet=1)


def count_records(telemetry: Path, stream: str) -> int:
    """Records in a stream's files, from the Avro blocks' counts (nothing is decoded)."""
    import fastavro

    total = 0
    for path in sorted(Path(telemetry, stream).glob("*.avro")):
        with open(path, "rb") as handle:
            total += sum(block.num_records for block in fastavro.block_reader(handle))
    return total


def events_in(telemetry: Path) -> int:
    return sum(count_records(telemetry, stream) for stream in ("scheduler", "runtime", "profiler"))


def simulate(folder: Path, hours: float, seed: int) -> Path:
    """`mpg simulate` into `folder` (in a child, so that this process stays small), unless it is there."""
    if not (folder / "scheduler").is_dir():
        print(f"simulating {hours:g} h (seed {seed}) into {folder} ...", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "fleet_goodput.cli",
                "simulate",
                "--out",
                str(folder),
                "--seed",
                str(seed),
                "--hours",
                str(hours),
                "-q",
            ],
            check=True,
        )
    return folder


def prepare_hourly(work: Path, telemetry: Path, hours: float, mpg: str) -> tuple[Path, Path, Path]:
    """(input folder, the store over every hour but the last, the last hour's files) for the hourly run.

    The input folder holds the files of every hour but the last, which the
    store's one run applied, and the last hour's files (cut from each file of
    `telemetry` at the hour's start), which it did not.
    """
    hourly = work / "hourly"
    last_hour, store = hourly / "last-hour", hourly / "store-before"
    if store.is_dir():
        return hourly / "input", store, last_hour
    shutil.rmtree(hourly, ignore_errors=True)
    code = (
        "import sys; from fleet_goodput.simulator.run import START_US; "
        "from fleet_goodput.telemetry.avro_io import split_by_time; "
        "split_by_time(sys.argv[1], [START_US + int(sys.argv[2])], sys.argv[3])"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(telemetry), str(int((hours - 1) * HOUR_US)), str(hourly / "cut")], check=True
    )
    (hourly / "cut" / "part-00").rename(hourly / "input")
    (hourly / "cut" / "part-01").rename(last_hour)
    subprocess.run(
        [mpg, "run", "--input", str(hourly / "input"), "--output", str(store), "-q"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for path in sorted(last_hour.glob("*/*.avro")):  # the new hour lands beside the history
        shutil.copy2(path, hourly / "input" / path.parent.name / f"last-hour-{path.name}")
    return hourly / "input", store, last_hour


def least(samples: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """The round with the least CPU seconds: the one the host's other work slowed least."""
    return min(samples, key=lambda sample: sample[2])


def fixed_and_marginal(small: tuple[int, float], large: tuple[int, float]) -> tuple[float, float]:
    """(fixed CPU s, µs per event) of the line through (events, CPU s) at two sizes."""
    slope = (large[1] - small[1]) / (large[0] - small[0])
    return small[1] - slope * small[0], slope * 1e6


def uptime() -> str:
    with open("/proc/loadavg") as handle:
        return "load average " + ", ".join(handle.read().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--hours",
        type=float,
        nargs=2,
        default=[22.0, 44.0],
        metavar=("SMALL", "LARGE"),
        help="simulated hours of the two inputs (default 22 and 44: about 0.6M and 1.2M events)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every measurement, alternated (default 2)")
    parser.add_argument(
        "--dir", help="work folder to keep, with the inputs for the next command (default: a temporary one)"
    )
    parser.add_argument("--baseline", metavar="SRC", help="a checkout of other code whose `mpg run` runs too")
    parser.add_argument("--fastavro", action="store_true", help="also the fastavro floor (slow: 5 µs an event)")
    for flag in FLOORS:
        parser.add_argument(flag, metavar="INPUT", help=argparse.SUPPRESS)
    args, beam_flags = parser.parse_known_args()
    for flag, floor in FLOORS.items():  # this script as a floor's child process
        if (data := getattr(args, flag.removeprefix("--").replace("-", "_"))) is not None:
            floor(data, beam_flags) if floor is beam_floor else floor(data)
            return 0
    if beam_flags:
        parser.error(f"unrecognized arguments: {' '.join(beam_flags)}")

    work = Path(args.dir or tempfile.mkdtemp(prefix="mpg-bench-"))
    mpg = str(Path(sys.executable).with_name("mpg"))
    inputs = {hours: simulate(work / f"fleet-{hours:g}h", hours, args.seed) for hours in args.hours}
    events = {hours: events_in(folder) for hours, folder in inputs.items()}
    hourly_input, store_before, last_hour = prepare_hourly(work, inputs[args.hours[0]], args.hours[0], mpg)
    hour_events = events_in(last_hour)

    this = [sys.executable, __file__]
    flags = beam_floor_flags()
    runner = flags[0].removeprefix("--runner=")
    beam_name = f"Beam floor (the same on {runner})"
    tools = {
        "columnar floor (polars + DuckDB; no runner)": [*this, "--columnar-floor-only"],
        beam_name: [*this, *flags, "--beam-floor-only"],
    }
    if args.fastavro:
        tools["fastavro floor (fastavro + DuckDB; no runner)"] = [*this, "--fastavro-floor-only"]
    runs = {f"mpg run ({runner}, its default)": (None, None)}  # name: (cwd, env)
    if args.baseline:
        runs[f"baseline mpg run ({args.baseline})"] = (
            args.baseline,
            {**os.environ, "PYTHONPATH": str(baseline_path(Path(args.baseline).resolve(), work))},
        )

    for checkout in [Path(__file__).resolve().parents[1], *([Path(args.baseline)] if args.baseline else [])]:
        compile_bytecode(checkout)
    print(f"{uptime()}; {os.cpu_count()} cores", flush=True)
    sized: dict[tuple[str, float], list] = {}
    hourly: dict[str, list] = {}
    small: dict[str, list] = {}
    store_after = work / "hourly" / "store-after"
    for number in range(args.rounds):
        print(f"round {number + 1}/{args.rounds} ({uptime()})", flush=True)
        for hours, data in inputs.items():
            for name, command in tools.items():
                sized.setdefault((name, hours), []).append(measure([*command, str(data)]))
            for name, where in runs.items():
                output = work / "results"
                shutil.rmtree(output, ignore_errors=True)
                command = [mpg, "run", "--input", str(data), "--output", str(output), "-q"]
                sized.setdefault((name, hours), []).append(measure(command, *where))
        hourly.setdefault(beam_name, []).append(measure([*tools[beam_name], str(last_hour)]))
        for name, where in runs.items():
            shutil.rmtree(store_after, ignore_errors=True)
            shutil.copytree(store_before, store_after, symlinks=True)
            command = [mpg, "run", "--input", str(hourly_input), "--output", str(store_after), "-q"]
            hourly.setdefault(name, []).append(measure(command, *where))
        for name, command in {
            "mpg --help": [mpg, "--help"],
            "mpg runs": [mpg, "runs", "--output", str(store_after)],
            "mpg sql": [
                mpg,
                "sql",
                "--output",
                str(store_after),
                "select day, cluster, mpg from fleet_daily order by all",
            ],
        }.items():
            small.setdefault(name, []).append(measure(command))
    print(f"done ({uptime()})\n")
    report(
        args.hours,
        events,
        sized,
        hourly,
        small,
        hour_events,
        len(telemetry_files(str(last_hour))),
        [*tools, *runs],
        beam_name,
    )
    return 0


def report(sizes, events, sized, hourly, small, hour_events, hour_files, names, beam_name) -> None:
    """Print the three tables: fixed and marginal cost, the hourly run, the small commands."""
    columnar_name = names[0]
    small_h, large_h = sizes
    print(
        f"1. Fixed and marginal cost: {events[small_h]:,} and {events[large_h]:,} events "
        f"({small_h:g} h and {large_h:g} h); least CPU s of the rounds"
    )
    print(
        f"{'':<48} {'CPU s small':>11} {'CPU s large':>11} {'peak MiB':>9} {'fixed CPU s':>11} "
        f"{'µs/event':>9} {'÷ columnar':>10}"
    )
    slopes = {}
    for name in names:
        at = {hours: least(sized[(name, hours)]) for hours in sizes}
        fixed, slope = fixed_and_marginal((events[small_h], at[small_h][2]), (events[large_h], at[large_h][2]))
        slopes[name] = slope
        print(
            f"{name:<48} {at[small_h][2]:>11.2f} {at[large_h][2]:>11.2f} {at[large_h][1]:>9,.0f} {fixed:>11.2f} "
            f"{slope:>9.2f} {slope / slopes[columnar_name]:>10.1f}"
        )
    print(f"\n2. A continuing run over one new hour ({hour_events:,} events in {hour_files} files); least CPU s")
    print(f"{'':<48} {'seconds':>8} {'CPU s':>7} {'peak MiB':>9} {'÷ Beam floor (CPU)':>19}")
    beam = least(hourly[beam_name])[2]
    for name, samples in hourly.items():
        seconds, mib, cpu = least(samples)
        print(f"{name:<48} {seconds:>8.2f} {cpu:>7.2f} {mib:>9,.0f} {cpu / beam:>19.2f}")
    print("\n3. Small commands on that store; least CPU s")
    for name, samples in small.items():
        seconds, mib, cpu = least(samples)
        print(f"{name:<48} {seconds:>8.2f} {cpu:>7.2f} {mib:>9,.0f}")


if __name__ == "__main__":
    sys.exit(main())
