"""Benchmark: committing a daily run's keyed rows, by replacing partitions or by a Delta MERGE.

Simulates DAYS days of a fleet (jobs that span days included), cuts the
telemetry at midnights as it would arrive, and runs the pipeline once a day
into one output store, each run continuing the last. Each day's staged rows of
the keyed tables (job_window, jobs, capacity_level) are then committed, the
same rows into three stores of those tables alone, three ways:

- replace: the partitions the rows touch are rewritten with the latest row of
  each key (fleet_goodput/store/keyed_tables.py, what `mpg run` does);
- merge:   a Delta MERGE on the key (and `date`): matched rows updated, the
  others inserted (delta-rs `DeltaTable.merge`);
- append:  the rows appended as new versions, as stores did before (every
  version of a row kept; readers had to pick the latest).

    .venv/bin/python benchmarks/bench_commit.py                      # 7 days, 20 jobs an hour
    .venv/bin/python benchmarks/bench_commit.py --days 3 --jobs-per-hour 5   # a quick look

Prints each day's rows committed and seconds per way (the best of --repeat
tries from the same state), and the seconds the
whole run's commit took in `mpg run` (all tables, the state and the `runs`
row: how long a reader of the tables may see some at the new run and some at
the previous one); then each way's files,
bytes and the time polars takes to read the latest version and sum it. The
replace and merge stores are checked to hold the same rows. Not a test.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from fleet_goodput.core.config import load_settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.pipelines import goodput
from fleet_goodput.runs.commit import commit_run
from fleet_goodput.runs.plan import plan_run, staging_folder
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.keyed_tables import commit_keyed, latest_per_key
from fleet_goodput.store.layout import delta_schema
from fleet_goodput.store.tables import TABLES, Table
from fleet_goodput.telemetry.avro_io import split_by_time

DAY_US = 86_400 * 1_000_000
KEYED = [table for table in TABLES.values() if table.key]
WAYS = ("replace", "merge", "append")


def merge(path: Path, files: list[str], table: Table, exists: bool) -> None:
    """The staged rows (latest per key: chunks may stage a key twice) merged on the key."""
    schema = delta_schema(table)
    rows = latest_per_key(ds.dataset(files, schema=schema, format="parquet").to_table(), table)
    if not exists:
        write_deltalake(path, rows, mode="overwrite", partition_by=["date"])
        return
    on = " and ".join(f"t.{name} = s.{name}" for name in (*table.key, "date"))
    (
        DeltaTable(path)
        .merge(rows, predicate=on, source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def append(path: Path, files: list[str], table: Table, exists: bool) -> None:
    reader = ds.dataset(files, schema=delta_schema(table), format="parquet").scanner().to_reader()
    write_deltalake(path, reader, mode="append" if exists else "overwrite", partition_by=["date"])


def replace(path: Path, files: list[str], table: Table, exists: bool) -> None:
    commit_keyed(str(path), files, table, delta_schema(table), DeltaTable(path) if exists else None)


def run_day(part: Path, output: Path, saved: Path) -> float:
    """One daily run of the pipeline into `output`, its staged rows kept in `saved`; returns the
    seconds its commit took (every table, the state, then its `runs` row: the in-flight window)."""
    settings, run_settings = load_settings(), RunSettings()
    store = Store(output)
    with store.lock():
        plan = plan_run(str(part), store, None)
        goodput.run(
            plan.files_by_stream,
            list(plan.state_files),
            staging_folder(plan),
            settings,
            run_settings,
            plan.continuation,
            None,
            None,
        )
        for table in KEYED:
            shutil.copytree(Path(staging_folder(plan), table.name), saved / table.name, dirs_exist_ok=True)
        started = time.perf_counter()
        commit_run(plan, settings, run_settings, "batch")
        return time.perf_counter() - started


def commit_best_of(repeat: int, tables: Path, commit, staged: dict[str, list[str]], exists: bool) -> float:
    """Seconds to commit a day's staged rows of every keyed table in `tables` one way: the best of
    `repeat` tries, each from the same state (a shared host's noise only ever adds time)."""
    best = float("inf")
    for attempt in range(repeat):
        last = attempt == repeat - 1
        if exists and not last:
            shutil.copytree(tables, tables.with_name(f"{tables.name}.before"))
        started = time.perf_counter()
        for table in KEYED:
            commit(tables / table.name, staged[table.name], table, exists=exists)
        best = min(best, time.perf_counter() - started)
        if not last:
            shutil.rmtree(tables)
            if exists:
                tables.with_name(f"{tables.name}.before").rename(tables)
    return best


def read_and_sum(path: Path, table: Table) -> tuple[float, int]:
    started = time.perf_counter()
    frame = pl.read_delta(str(path))
    column = (
        "chips"
        if table.name == "capacity_level"
        else ("productive_chip_s" if table.name == "job_window" else "requested_chips")
    )
    frame.select(pl.col(column).sum())
    return time.perf_counter() - started, frame.height


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--jobs-per-hour", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--repeat", type=int, default=3, help="tries of each commit; the fastest counts")
    parser.add_argument("--workdir", help="keep the files here (default: a temporary folder)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.workdir or scratch)
        hours = args.days * 24
        print(f"simulating {args.days} days, {args.jobs_per_hour:g} jobs an hour ...", flush=True)
        print(f"  {simulate(root / 'fleet', seed=args.seed, hours=hours, jobs=round(args.jobs_per_hour * hours))}")
        parts = split_by_time(root / "fleet", [START_US + d * DAY_US for d in range(1, args.days)], root / "days")

        totals = {way: 0.0 for way in WAYS}
        print(
            f"{'day':>4} {'rows':>8} " + " ".join(f"{way + ' s':>9}" for way in WAYS) + f" {'run commit s':>13}",
            flush=True,
        )
        for day, part in enumerate(parts, start=1):
            saved = root / "staged" / f"day-{day}"
            committing = run_day(part, root / "output", saved)
            staged = {table.name: sorted(str(p) for p in (saved / table.name).glob("*.parquet")) for table in KEYED}
            rows = sum(pq.ParquetFile(f).metadata.num_rows for files in staged.values() for f in files)
            seconds = {
                way: commit_best_of(args.repeat, root / way, commit, staged, day > 1)
                for way, commit in zip(WAYS, (replace, merge, append))
            }
            for way in WAYS:
                totals[way] += seconds[way]
            print(
                f"{day:>4} {rows:>8} " + " ".join(f"{seconds[way]:>9.2f}" for way in WAYS) + f" {committing:>13.2f}",
                flush=True,
            )
        print(f"{'all':>4} {'':>8} " + " ".join(f"{totals[way]:>9.2f}" for way in WAYS))

        print(f"\n{'table':<16} {'way':<8} {'files':>6} {'MiB':>7} {'rows':>8} {'polars read+sum s':>18}")
        for table in KEYED:
            for way in WAYS:
                path = root / way / table.name
                files = DeltaTable(str(path)).file_uris()
                mib = sum(Path(f.removeprefix("file://")).stat().st_size for f in files) / 2**20
                seconds, rows = read_and_sum(path, table)
                print(f"{table.name:<16} {way:<8} {len(files):>6} {mib:>7.2f} {rows:>8} {seconds:>18.3f}")
            replaced, merged = (pl.read_delta(str(root / way / table.name)).sort(list(table.key)) for way in WAYS[:2])
            assert replaced.equals(merged.select(replaced.columns)), f"{table.name}: replace and merge disagree"
        current, appended = (
            pl.read_delta(str(root / way / "job_window"))["productive_chip_s"].sum() for way in ("replace", "append")
        )
        print(
            f"\na plain sum of job_window.productive_chip_s over the appended table is "
            f"{appended / current - 1:+.2%} off the latest figures"
        )


if __name__ == "__main__":
    main()
