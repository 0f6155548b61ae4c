"""Benchmark: what a store costs to use after 10 runs and after thousands.

A local stream commits a run every few seconds, so a store reaches 10,000
runs in about 14 hours (issue 26). This builds two stores from one real run
over a small simulated fleet: one extended to 10 runs, one to N (tests/
long_history.py: each run one commit to every table and one `runs` row,
changing no row, which is what makes a long history slow: the number of
commits), then times on each, in fresh processes as a user meets them:

  open   `fleet_goodput.open(OUT)` and a first query (what `mpg sql` does inside)
  sql    `mpg sql --output OUT "select 1"`
  runs   `mpg runs --output OUT`
  run    the next `mpg run`, over one more hour of the fleet

The history's last run keeps the store as a run does (maintenance.maintain:
checkpoints, log clean-up to the kept runs, vacuum), as the N-th real run
would have. Prints each cost at 10 and at N runs and their ratio.

    .venv/bin/python benchmarks/bench_history.py            # N = 10,000 (a few minutes)
    .venv/bin/python benchmarks/bench_history.py --runs 2000

Not a test, nothing is asserted; tests/store/test_long_history.py checks the logs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the history builder, shared with the tests

from long_history import extend_history  # noqa: E402

from fleet_goodput.telemetry.avro_io import split_by_time  # noqa: E402
from fleet_goodput.cli import main as mpg  # noqa: E402
from fleet_goodput.simulator import simulate  # noqa: E402
from fleet_goodput.store import maintenance  # noqa: E402
from fleet_goodput.store.delta_store import Store  # noqa: E402

MPG = [sys.executable, "-m", "fleet_goodput.cli"]
OPEN = "import sys, fleet_goodput as fg; fg.open(sys.argv[1]).sql('select count(*) from fleet_daily').fetchall()"
CUT_US = 1_767_225_600_000_000 + 3 * 3600 * 1_000_000  # 2026-01-01T03:00Z: the next run reads the hour after


def _seconds(command: list[str], repeats: int) -> float:
    """The median wall-clock seconds of `command`, run `repeats` times."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _costs(output: Path, next_input: Path, repeats: int) -> dict[str, float]:
    costs = {
        "open": _seconds([sys.executable, "-c", OPEN, str(output)], repeats),
        "sql": _seconds([*MPG, "sql", "--output", str(output), "select 1"], repeats),
        "runs": _seconds([*MPG, "runs", "--output", str(output)], repeats),
    }
    costs["run"] = _seconds([*MPG, "-q", "run", "--input", str(next_input), "--output", str(output)], 1)
    return costs


def _store(work: Path, first: Path, runs: int) -> Path:
    output = work / f"out-{runs}"
    shutil.copytree(work / "base", output)
    started = time.perf_counter()
    extend_history(output, runs - 1)
    with Store(output).lock():
        maintenance.maintain(Store(output))  # what the last of those runs did after its commit
    commits = sum(1 for _ in output.rglob("_delta_log/*.json"))
    print(f"  built {runs:,} runs in {time.perf_counter() - started:.1f} s ({commits:,} log commits kept)", flush=True)
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000, help="the long history's runs (default: 10,000)")
    parser.add_argument("--repeats", type=int, default=3, help="timings of open, sql and runs (default: 3)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_history-"))
    try:
        simulate(work / "fleet", seed=4, hours=4, jobs=12)
        first, second = split_by_time(work / "fleet", [CUT_US], work / "parts")
        assert mpg(["-q", "run", "--input", str(first), "--output", str(work / "base")]) == 0
        short, long = _store(work, first, 10), _store(work, first, args.runs)
        print(f"{'':6} {'10 runs':>10} {f'{args.runs:,} runs':>12} {'ratio':>7}")
        at_10, at_n = _costs(short, second, args.repeats), _costs(long, second, args.repeats)
        for name in at_10:
            print(f"{name:6} {at_10[name]:9.2f}s {at_n[name]:11.2f}s {at_n[name] / at_10[name]:7.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
