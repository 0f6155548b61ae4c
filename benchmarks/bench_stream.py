"""Benchmark: how fast telemetry can arrive before `mpg stream`'s results fall behind.

Simulates a fleet at the simulator's default density (about 54 jobs an hour),
runs `mpg run` over its first WARMUP hours (so the stream joins a fleet with
open jobs, as a live one would), then for each SPEED replays the next part of
the same fleet with `mpg replay --speed SPEED` into a folder that `mpg stream`
watches, both child processes. 1x is real time: the fleet's own event rate.
Each speed replays SECONDS of wall time (at least three slices), waits until
the stream has committed every replayed file, stops it with SIGTERM and reads
its peak RSS and CPU seconds with os.wait4 (which cover its shutdown too: the
DuckDB views and the headline). A child's peak starts from its parent's high-water mark
(Linux keeps it across exec), so the fleet is simulated, cut and analysed in
a helper process and this one stays near the size of its imports; it prints
its own peak as the floor below which no figure can read.

What is measured, after the fact rather than by sampling, so the benchmark
takes no CPU from the stream while the replay runs (after it, one look a
second at the runs table, to see whether the stream has caught up):

- when each slice landed: the latest mtime of its files (`mpg replay` writes
  a file under a temporary name and renames it, so the mtime is when it was
  complete), and its newest event time;
- when each run committed, its as-of time and the events it read: the
  output's runs table (`committed_at`, `as_of`, the manifest's `this_run`),
  which is what `mpg runs` prints; each run's seconds from the stream's own
  progress lines.

From those, at every moment between the first landing and the last commit:

    lag = newest event time landed in the folder - as-of of the latest committed run

the event time by which the results people can read (every window up to the
as-of time) trail the telemetry already delivered. It rises by a slice when a
slice lands and falls when a run commits; its maximum is just before a
commit. It is printed in event seconds and in windows (window_s, 1 h by
default); "within 2 windows" means its maximum stayed at or under two
windows. `wall max s` is the longest a slice waited, in wall seconds, from
landing to the commit of a run covering it. Both rates count the events of
every slice after the first, from the moment the first landed: `offered
ev/s` until the last slice landed, `committed ev/s` until the last run
committed (so it includes the tail after the replay ended). `busy` is the
share of the time from first landing to last commit that the stream spent
inside runs. A least-squares fit of run seconds against events read gives
each run's fixed cost and the marginal events/s.

    .venv/bin/python benchmarks/bench_stream.py                              # 1x to 1000x, 2 min each
    .venv/bin/python benchmarks/bench_stream.py --speeds 10 300 --seconds 60  # a quick look
    .venv/bin/python benchmarks/bench_stream.py --speeds 500 2000 --baseline /tmp/main  # against another checkout

With `--baseline DIR`, each speed is streamed twice in turn, by DIR's own
install (DIR/.venv/bin/python, run from DIR so that it imports its own
package) and then by this one, into copies of one warm-up store and from one
replay source, so that both sides see the same fleet; every row and fit
says which side it is.

Not a test, nothing is asserted. Wall times depend on what else the machine
runs: the load average is printed with each row.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fleet_goodput.runs.replay import load_slices
from fleet_goodput.simulator import START_US, simulate
from fleet_goodput.store.delta_store import Store
from fleet_goodput.telemetry.avro_io import split_by_time, telemetry_files

HOUR_US = 3_600 * 1_000_000
RUN_LINE = re.compile(r"run (\d+): \d+ new file\(s\) in ([\d.]+) s(?: \(([\d.]+) CPU s\))?")


@dataclass(frozen=True)
class Landing:
    wall_s: float
    newest_us: int
    events: int


@dataclass(frozen=True)
class Commit:
    wall_s: float
    as_of_us: int
    events: int
    seconds: float | None  # the run's own time, from the stream's progress line
    cpu_s: float | None  # its CPU seconds, from the same line (a checkout before they were printed: None)


@dataclass(frozen=True)
class Side:
    """A checkout whose `mpg stream` is measured: its name in the tables, its Python, and where it runs from."""

    name: str
    python: str
    cwd: str | None = None


@dataclass(frozen=True)
class Result:
    side: str
    speed: float
    replayed: int
    events: int
    offered: float
    committed: float
    runs: int
    run_median_s: float
    busy: float
    lag_max_s: float
    lag_mean_s: float
    wall_max_s: float
    peak_mib: float
    cpu_s: float
    load: str
    caught_up: bool


def cli(*args: str, python: str = sys.executable) -> list[str]:
    return [python, "-m", "fleet_goodput.cli", *args]


def cut_sources(fleet: Path, root: Path, warmup_us: int, ends_us: list[int]) -> tuple[Path, dict[int, Path]]:
    """The warm-up part, and for each end time a folder with the events from the warm-up's end up to it.

    The fleet is cut once; a speed's folder links the parts it needs, renamed so
    that their file names stay distinct.
    """
    edges = sorted(set(ends_us))
    parts = split_by_time(fleet, [warmup_us, *edges], root / "parts")
    sources = {}
    for k, end in enumerate(edges, start=1):
        source = root / f"source-{k:02d}"
        for part in parts[1 : k + 1]:
            for path in telemetry_files(part):
                target = source / path.parent.name / f"{part.name}-{path.name}"
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(path, target)
        sources[end] = source
    return parts[0], sources


def wait_for_line(path: Path, text: str, child: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in path.read_text():
        if child.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"mpg stream did not start: {path.read_text()}")
        time.sleep(0.2)


def stream_runs(output: Path) -> list:
    return [run for run in Store(output).runs() if run.mode == "stream"]


def landings(live: Path, source: Path, slice_s: int) -> list[Landing]:
    """Each replayed slice: when its last file landed and its newest event time.

    `mpg replay` numbers slices in event-time order, so slice n of the source
    is the files named replay-n in every stream folder.
    """
    slices = load_slices(source, slice_s)
    found = []
    for n, start in enumerate(sorted(slices)):
        files = [live / stream / f"replay-{n:06d}.avro" for stream in slices[start]]
        newest = max(record["event_time"] for records in slices[start].values() for record in records)
        found.append(
            Landing(
                max(path.stat().st_mtime_ns for path in files) / 1e9,
                newest,
                sum(len(records) for records in slices[start].values()),
            )
        )
    return found


def commits(output: Path, log: Path) -> list[Commit]:
    lines = {int(run): (float(s), float(cpu) if cpu else None) for run, s, cpu in RUN_LINE.findall(log.read_text())}
    return [
        Commit(
            run.committed_at_us / 1e6,
            run.as_of_us,
            sum(counts["read"] for counts in run.manifest["this_run"].values()),
            *lines.get(run.run_id, (None, None)),
        )
        for run in stream_runs(output)
    ]


def lag_steps(arrived: list[Landing], done: list[Commit], as_of_us: int) -> list[tuple[float, int]]:
    """(wall time, lag in µs) from each landing or commit on, until the next one."""
    moments = sorted([(a.wall_s, 0, a.newest_us) for a in arrived] + [(c.wall_s, 1, c.as_of_us) for c in done])
    newest, steps = None, []
    for wall_s, is_commit, time_us in moments:
        if is_commit:
            as_of_us = max(as_of_us, time_us)
        else:
            newest = time_us if newest is None else max(newest, time_us)
        if newest is not None:
            steps.append((wall_s, max(0, newest - as_of_us)))
    return steps


def slice_waits(arrived: list[Landing], done: list[Commit]) -> list[float]:
    """Wall seconds from each slice's landing to the first commit whose as-of reaches it
    (slices no commit reached, when the stream was stopped before catching up, are left out)."""
    return [
        next(c.wall_s for c in done if c.as_of_us >= a.newest_us) - a.wall_s
        for a in arrived
        if a.newest_us <= done[-1].as_of_us
    ]


def run_speed(side: Side, speed: float, source: Path, warm: Path, root: Path, slice_s: int, catch_up_s: float) -> dict:
    """Stream one speed's replay with `side`'s `mpg stream`; returns what only the running processes
    tell: peak RSS, load, caught up."""
    name = f"{side.name}-{speed:g}x"
    live, output = root / f"live-{name}", root / f"out-{name}"
    shutil.copytree(warm, output)
    out_log, err_log = root / f"stream-{name}.out", root / f"stream-{name}.err"
    with open(out_log, "w") as out, open(err_log, "w") as err:
        stream = subprocess.Popen(
            cli("stream", "--input", str(live), "--output", str(output), python=side.python),
            stdout=out,
            stderr=err,
            cwd=side.cwd,
        )
        wait_for_line(err_log, "Watching", stream)  # a progress line: on stderr
        load_before = os.getloadavg()[0]
        subprocess.run(
            cli(
                "replay",
                "--from",
                str(source),
                "--to",
                str(live),
                "--speed",
                f"{speed:g}",
                "--slice-s",
                str(slice_s),
                "-q",
            ),
            check=True,
        )
        files = len(telemetry_files(live))
        deadline = time.monotonic() + catch_up_s
        while sum(run.files_applied for run in stream_runs(output)) < files and time.monotonic() < deadline:
            if stream.poll() is not None:
                raise SystemExit(f"mpg stream stopped: {err_log.read_text()}")
            time.sleep(1.0)
        caught_up = sum(run.files_applied for run in stream_runs(output)) >= files
        load_after = os.getloadavg()[0]
        stream.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(stream.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"mpg stream failed: {err_log.read_text()}")
    return {
        "peak_mib": usage.ru_maxrss / 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "load": f"{load_before:.1f}-{load_after:.1f}",
        "caught_up": caught_up,
    }


def analyse(
    side: str, speed: float, root: Path, source: Path, slice_s: int, process: dict
) -> tuple[Result, list[Commit]]:
    """The figures of one side's speed, from the landed files, the runs table and the stream's log."""
    name = f"{side}-{speed:g}x"
    output = root / f"out-{name}"
    arrived, done = landings(root / f"live-{name}", source, slice_s), commits(output, root / f"stream-{name}.err")
    steps = lag_steps(arrived, done, Store(output).runs()[0].as_of_us)
    span_s = steps[-1][0] - steps[0][0]
    mean_us = sum(lag * (steps[i + 1][0] - t) for i, (t, lag) in enumerate(steps[:-1])) / span_s
    events = sum(c.events for c in done)
    # Both rates count the events that landed after the first slice, from the moment it landed:
    # offered until the last slice landed, committed until the last run committed.
    after_first = events - arrived[0].events
    run_seconds = [c.seconds for c in done if c.seconds is not None]
    return Result(
        side=side,
        speed=speed,
        replayed=sum(a.events for a in arrived),
        events=events,
        offered=sum(a.events for a in arrived[1:]) / (arrived[-1].wall_s - arrived[0].wall_s),
        committed=after_first / (done[-1].wall_s - arrived[0].wall_s),
        runs=len(done),
        run_median_s=statistics.median(run_seconds),
        busy=sum(run_seconds) / span_s,
        lag_max_s=max(lag for _, lag in steps) / 1e6,
        lag_mean_s=mean_us / 1e6,
        wall_max_s=max(slice_waits(arrived, done)),
        **process,
    ), done


def prepare(
    root: Path, seed: int, hours: float, warmup_us: int, ends_us: list[int]
) -> tuple[dict[int, Path], int, int]:
    """Simulate the fleet, cut it, and run the warm-up; returns the sources by end time, the warm-up's events
    and the window length."""
    print(f"  {simulate(root / 'fleet', seed=seed, hours=hours)}", flush=True)
    warm_input, sources = cut_sources(root / "fleet", root, warmup_us, ends_us)
    subprocess.run(cli("run", "--input", str(warm_input), "--output", str(root / "warm"), "-q"), check=True)
    warm = Store(root / "warm").latest()
    return sources, sum(c["read"] for c in warm.manifest["streams"].values()), warm.manifest["window_s"]


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares seconds = fixed + events / rate; returns (fixed seconds, marginal events/s)."""
    slope, fixed = statistics.linear_regression([e for e, _ in points], [s for _, s in points])
    return fixed, 1 / slope if slope > 0 else float("inf")


def print_idle_host_model(
    cpu_points: list[tuple[int, float]], rate_1x: float, slice_s: int, window_s: int, speeds: list[float]
) -> None:
    """What the stream would do with a core to itself, from its runs' CPU seconds: a run that reads
    what piled up during the last one takes d = fixed / (1 - offered / rate), and a slice landing
    just after a run started waits for it and the next, so the lag peaks near 2 d x speed + a slice."""
    fixed, rate = fit(cpu_points)
    print(f"run CPU seconds = {fixed:.2f} s + events / {rate:,.0f} per s  (least squares over {len(cpu_points)} runs)")

    def lag_s(speed: float) -> float:
        offered = speed * rate_1x
        return float("inf") if offered >= rate else 2 * fixed / (1 - offered / rate) * speed + slice_s

    for speed in speeds:
        if lag_s(speed) == float("inf"):
            print(
                f"  {speed:g}x on an idle core: offered {speed * rate_1x:,.0f} events/s is beyond the throughput; "
                "no bound"
            )
            continue
        print(
            f"  {speed:g}x on an idle core: runs of {(lag_s(speed) - slice_s) / 2 / speed:.2f} s, lag max about "
            f"{lag_s(speed):,.0f} s ({lag_s(speed) / window_s:.2f} windows)"
        )
    low, high = 1.0, rate / rate_1x  # the lag grows with the speed: bisect for where it reaches two windows
    for _ in range(60):
        low, high = (low, (low + high) / 2) if lag_s((low + high) / 2) > 2 * window_s else ((low + high) / 2, high)
    print(f"  within two windows on an idle core up to about {low:,.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--speeds",
        type=float,
        nargs="+",
        default=[1, 10, 30, 100, 300, 500, 1000],
        help="replay speeds, in multiples of real time (default 1 10 30 100 300 500 1000)",
    )
    parser.add_argument("--seconds", type=float, default=120.0, help="wall seconds of replay per speed (default 120)")
    parser.add_argument(
        "--slice-s",
        type=int,
        default=60,
        help="event seconds per replayed file, as a fleet's loggers flushing once a minute (default 60)",
    )
    parser.add_argument("--warmup-hours", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workdir", help="keep the files here (default: a temporary folder)")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also measure the checkout in DIR, with its own .venv (e.g. main: git -C MAIN archive "
        "HEAD | tar -x -C DIR, then its venv), each speed streamed by it and then by this one",
    )
    args = parser.parse_args()

    # A child's ru_maxrss starts from its parent's high-water mark (Linux carries it across
    # exec), so everything that holds a fleet in memory runs in a helper process: this
    # one stays near its imports' size, well under any stream's peak.
    helper = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    with tempfile.TemporaryDirectory() as scratch, helper:
        root = Path(args.workdir or scratch)
        warmup_us = START_US + round(args.warmup_hours * HOUR_US)
        # Each speed replays at least three slices, so slow speeds see more than one file land.
        spans_us = {speed: round(speed * max(args.seconds, 3 * args.slice_s / speed) * 1e6) for speed in args.speeds}
        hours = args.warmup_hours + max(spans_us.values()) / HOUR_US + 0.5
        print(f"simulating {hours:.1f} h of a fleet at the default density ...", flush=True)
        sources, warm_events, window_s = helper.submit(
            prepare, root, args.seed, hours, warmup_us, [warmup_us + span for span in spans_us.values()]
        ).result()
        print(f"  warm-up: `mpg run` over the first {args.warmup_hours:g} h, {warm_events:,} events", flush=True)

        this = Side("this", sys.executable)
        sides = (
            [Side("baseline", str(Path(args.baseline, ".venv", "bin", "python")), args.baseline), this]
            if args.baseline
            else [this]
        )
        results = []
        for speed in args.speeds:
            source = sources[warmup_us + spans_us[speed]]
            for side in sides:
                print(
                    f"replaying {spans_us[speed] / HOUR_US:.2f} h at {speed:g}x into {side.name}'s stream ...",
                    flush=True,
                )
                process = run_speed(
                    side, speed, source, root / "warm", root, args.slice_s, catch_up_s=max(120.0, 2 * args.seconds)
                )
                result, done = helper.submit(analyse, side.name, speed, root, source, args.slice_s, process).result()
                results.append((result, done))
                print(
                    f"  {result.events:,} events in {result.runs} runs; lag max {result.lag_max_s:,.0f} s "
                    f"({result.lag_max_s / window_s:.2f} windows)",
                    flush=True,
                )

        rate_1x = sum(r.replayed for r, _ in results if r.side == this.name) / (sum(spans_us.values()) / 1e6)
        print(f"\n1x = the fleet's own rate, about {rate_1x:.1f} events/s; window {window_s} s\n")
        header = (
            f"{'side':>8} {'speed':>6} {'offered ev/s':>12} {'committed ev/s':>14} {'runs':>5} {'s/run':>6} "
            f"{'busy':>5} {'lag max s':>10} {'windows':>8} {'lag mean s':>10} {'windows':>8} {'wall max s':>10} "
            f"{'peak MiB':>9} {'CPU s':>6} {'within 2':>8} {'load':>9}"
        )
        print(header)
        for r, _ in results:
            within = ("yes" if r.lag_max_s <= 2 * window_s else "NO") + ("" if r.caught_up else "*")
            print(
                f"{r.side:>8} {r.speed:>5g}x {r.offered:12,.0f} {r.committed:14,.0f} {r.runs:5d} "
                f"{r.run_median_s:6.1f} {r.busy:5.0%} {r.lag_max_s:10,.0f} {r.lag_max_s / window_s:8.2f} "
                f"{r.lag_mean_s:10,.0f} {r.lag_mean_s / window_s:8.2f} {r.wall_max_s:10.1f} {r.peak_mib:9.0f} "
                f"{r.cpu_s:6.1f} {within:>8} {r.load:>9}"
            )
        own_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"(this process peaked at {own_mib:.0f} MiB: a stream's peak cannot read lower than that)")
        if not all(r.caught_up for r, _ in results):
            print("* the stream had not applied every replayed file when it was stopped")
        for side in sides:
            ran = [(r, done) for r, done in results if r.side == side.name]
            points = [(c.events, c.seconds) for _, done in ran for c in done if c.seconds is not None]
            fixed, rate = fit(points)
            print(
                f"\n{side.name}: run seconds = {fixed:.2f} s + events / {rate:,.0f} per s  "
                f"(least squares over {len(points)} runs)"
            )
            cpu_points = [(c.events, c.cpu_s) for _, done in ran for c in done if c.cpu_s is not None]
            if len(cpu_points) > 1:
                print_idle_host_model(cpu_points, rate_1x, args.slice_s, window_s, [r.speed for r, _ in ran])


if __name__ == "__main__":
    main()
