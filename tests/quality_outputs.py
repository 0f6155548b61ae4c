"""Pipeline outputs that tests/quality/test_quality.py and tests/report/test_report.py both validate and report on, built
once per test worker, and the corruptions they commit to copies of them as a buggy writer would.

The outputs come from the real pipeline on small data: the worked example of docs/metric.md section 4
(tests/conftest.py's `worked_example_run`), and a three-day fleet written here (two clusters, training with
checkpoints and a preemption, serving across midnight, a job without a team, an event on an unknown
accelerator).
"""

from __future__ import annotations

import dataclasses
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

import worked_example
from fleet_goodput.cli import main
from fleet_goodput.store.delta_store import Store
from fleet_goodput.telemetry.avro_io import write_events

T0 = worked_example.T0_US  # 2026-01-01T00:00:00Z
S = 1_000_000
DAYS = 3


class _Fleet:
    """Records per stream, with event ids numbered as they are added."""

    def __init__(self):
        self.records = {"scheduler": [], "runtime": [], "profiler": []}

    def _base(self, job_id, t_s):
        n = sum(len(r) for r in self.records.values())
        return {"event_id": f"e{n:05d}", "event_time": T0 + int(t_s * S), "job_id": job_id}

    def scheduler(self, job_id, t_s, kind, chips=0, accelerator="tpu-v5e", cluster="c1", **attributes):
        self.records["scheduler"].append(
            {
                **self._base(job_id, t_s),
                "type": kind,
                "cluster": cluster,
                "accelerator": accelerator,
                "chips": chips,
                "workload": attributes.get("workload"),
                "framework": attributes.get("framework"),
                "team": attributes.get("team"),
                "topology": None,
                "priority": None,
            }
        )

    def runtime(self, job_id, t_s, kind, step=None):
        self.records["runtime"].append({**self._base(job_id, t_s), "type": kind, "step": step, "attempt": None})

    def span(self, job_id, start_s, end_s, kind, first=None, last=None):
        self.runtime(job_id, start_s, f"{kind}_START", first)
        self.runtime(job_id, end_s, f"{kind}_END", last)

    def profile(self, job_id, t_s, step, chips, ideal_flops):
        self.records["profiler"].append(
            {
                **self._base(job_id, t_s),
                "step": step,
                "duration_s": 10.0,
                "chips": chips,
                "ideal_flops": ideal_flops,
                "flops_source": "HLO_UNOPTIMIZED",
                "bytes_accessed": None,
            }
        )


def _training(
    fleet,
    job_id,
    start_s,
    *,
    chips,
    team,
    cluster="c1",
    accelerator="tpu-v5e",
    cycles=6,
    step_s=1200,
    save_s=40,
    preempt_after=None,
    peak_flops=197e12,
):
    """Submit, queue 10 min, init, compile, then cycles of steps + a checkpoint; optionally preempted once."""
    where = {"cluster": cluster, "accelerator": accelerator}
    fleet.scheduler(job_id, start_s, "SUBMIT", chips, **where, workload="TRAINING", team=team, framework="jax")
    t = start_s + 600
    fleet.scheduler(job_id, t, "ALLOCATE", chips, **where)
    fleet.span(job_id, t, t + 120, "INIT")
    fleet.span(job_id, t + 120, t + 420, "COMPILE")
    t += 420
    step = 0
    fleet.profile(job_id, t + 60, 1, chips, ideal_flops=0.4 * chips * peak_flops * 10)  # 40% of peak for a 10 s step
    for cycle in range(cycles):
        if cycle == preempt_after:
            fleet.span(job_id, t, t + step_s // 2, "STEP", step + 1, step + step_s // 20)
            t += step_s // 2
            fleet.scheduler(job_id, t, "PREEMPT", 0, **where)
            t += 900
            fleet.scheduler(job_id, t, "ALLOCATE", chips, **where)
            fleet.span(job_id, t, t + 120, "CHECKPOINT_RESTORE", None, step)
            t += 120
        fleet.span(job_id, t, t + step_s, "STEP", step + 1, step + step_s // 10)
        step += step_s // 10
        t += step_s
        fleet.span(job_id, t, t + save_s, "CHECKPOINT_SAVE", None, step)
        t += save_s
    fleet.scheduler(job_id, t, "FINISH", **where)


def _serving(fleet, job_id, start_s, hours, *, chips, team, accelerator="h100", cluster="c2", workload="SERVING"):
    where = {"cluster": cluster, "accelerator": accelerator}
    fleet.scheduler(job_id, start_s, "SUBMIT", chips, **where, workload=workload, team=team, framework="pytorch")
    fleet.scheduler(job_id, start_s + 60, "ALLOCATE", chips, **where)
    fleet.span(job_id, start_s + 60, start_s + 300, "INIT")
    t, step = start_s + 300, 0
    while t + 600 <= start_s + hours * 3600:
        fleet.span(job_id, t, t + 540, "STEP", step + 1, step + 54)
        fleet.span(job_id, t + 540, t + 600, "DATA_WAIT")
        step, t = step + 54, t + 600
    fleet.scheduler(job_id, t, "FINISH", **where)


def multi_day_records() -> dict[str, list[dict]]:
    fleet = _Fleet()
    fleet.scheduler(None, 0, "CAPACITY", 48, "tpu-v5e", "c1")
    fleet.scheduler(None, 0, "CAPACITY", 28, "h100", "c2")
    for day in range(DAYS):
        d = day * 86_400
        _training(fleet, f"train-{day}", d + 3_600, chips=32, team="research", preempt_after=3)
        _training(fleet, f"small-{day}", d + 20_000, chips=8, team="research", cycles=4, save_s=20)
        _training(
            fleet,
            f"gpu-train-{day}",
            d + 7_200,
            chips=16,
            team="vision",
            cluster="c2",
            accelerator="h100",
            peak_flops=989e12,
            preempt_after=1 if day == 1 else None,
        )
        _serving(
            fleet, f"batch-{day}", d + 40_000, 3, chips=4, team="inference" if day else None, workload="BULK_INFERENCE"
        )
    _serving(fleet, "serve-night", 80_000, 10, chips=8, team="serving")  # crosses into day 2
    fleet.scheduler("ghost", 5_000, "SUBMIT", 8, "tpu-v99", "c9", workload="TRAINING", team="x")  # rejected
    fleet.scheduler(None, DAYS * 86_400, "CAPACITY", 48, "tpu-v5e", "c1")  # as-of: the end of the last day
    fleet.scheduler(None, DAYS * 86_400, "CAPACITY", 28, "h100", "c2")
    return fleet.records


_BUILT: dict[str, Path] = {}


def build_outputs(tmp_path_factory, worked_example_run) -> dict[str, Path]:
    """Pipeline outputs for the worked example (a copy of tests/conftest.py's) and the three-day fleet,
    built once per test worker."""
    if not _BUILT:
        _BUILT["worked"] = pristine_copy(worked_example_run[1], tmp_path_factory.mktemp("worked_out") / "out")
        root = tmp_path_factory.mktemp("fleet_in")
        for stream, stream_records in multi_day_records().items():
            write_events(root / stream / "part-0.avro", stream, stream_records)
        output = tmp_path_factory.mktemp("fleet_out")
        assert main(["run", "--input", str(root), "--output", str(output)]) == 0
        _BUILT["fleet"] = output
    return _BUILT


def pristine_copy(output: Path, destination: Path) -> Path:
    """A copy of a pipeline output without what validate and report wrote into it."""
    shutil.copytree(output, destination, ignore=shutil.ignore_patterns("quality", "reports", "locks"))
    return destination


def commit_change(output: Path, table: str, change) -> None:
    """Commit `change(pyarrow.Table) -> pyarrow.Table` to a table as a new run, as a buggy
    writer would: the corruption is in the committed snapshot every reader sees."""
    store = Store(output)
    latest = store.latest()
    path = store.path(f"tables/{table}")
    write_deltalake(path, change(store.read(table, latest)), mode="overwrite", partition_by=["date"])
    versions = {**latest.versions, table: DeltaTable(path).version()}
    record = dataclasses.replace(latest, run_id=latest.run_id + 1, versions=versions)
    write_deltalake(store.path("runs"), record.to_arrow(), mode="append")


def rewrite_partition(output: Path, table: str, day: str, change) -> None:
    """Apply `change(pyarrow.Table) -> pyarrow.Table` to one day's rows of a table, committed."""

    def apply(data: pa.Table) -> pa.Table:
        in_day = pc.equal(data.column("date"), day)
        return pa.concat_tables([change(data.filter(in_day)), data.filter(pc.invert(in_day))])

    commit_change(output, table, apply)


def set_capacity_over_day(output: Path, cluster: str | None, day: str, chips: int | None) -> None:
    """Rewrite `capacity_level` so that `cluster` (every cluster: None) has `chips` online over UTC `day`
    (None: no level at all), as a buggy writer would: the stretches crossing the day are cut at its edges."""
    day_start = datetime.fromisoformat(f"{day}T00:00:00+00:00")
    day_end = day_start + timedelta(days=1)

    def change(table: pa.Table) -> pa.Table:
        rows = []
        for row in table.to_pylist():
            start, end = row["start_time"], row["end_time"]
            if cluster not in (None, row["cluster"]) or end <= day_start or start >= day_end:
                rows.append(row)
                continue
            if start < day_start:
                rows.append({**row, "end_time": day_start})
            if end > day_end:
                rows.append({**row, "start_time": day_end, "date": day_end.strftime("%Y-%m-%d")})
            if chips is not None:
                rows.append(
                    {
                        **row,
                        "start_time": max(start, day_start),
                        "end_time": min(end, day_end),
                        "chips": chips,
                        "date": max(start, day_start).strftime("%Y-%m-%d"),
                    }
                )
        return pa.Table.from_pylist(rows, schema=table.schema)

    commit_change(output, "capacity_level", change)
