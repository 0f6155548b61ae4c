"""Ground truth: the chip-seconds docs/metric.md section 3 expects, from the simulated timeline.

Computed from what the simulator decided (held chips over time, the runtime
spans and their outcomes, the profiler samples), never from the events it
wrote, so comparing the pipeline's output to these tables tests the pipeline
rather than restating it.

Time is accumulated per (job, window, category) in integer microseconds and
converted to chip-seconds once, so the truth carries no summation drift.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fleet_goodput.simulator.timeline import FAILED, PRODUCTIVE, RUNNING, STEP, FleetTimeline, JobTimeline

CATEGORIES = (
    "queued",
    "partial",
    "productive",
    "pending",
    "lost",
    "data_wait",
    "compile",
    "checkpoint_save",
    "checkpoint_restore",
    "init",
    "idle",
)
_SPAN_CATEGORY = {
    "INIT": "init",
    "COMPILE": "compile",
    "DATA_WAIT": "data_wait",
    "CHECKPOINT_SAVE": "checkpoint_save",
    "CHECKPOINT_RESTORE": "checkpoint_restore",
}

_TIMESTAMP = pa.timestamp("us", tz="UTC")


def job_window_table(fleet: FleetTimeline, peak_flops: dict[str, float], window_us: int) -> pa.Table:
    """One row per (job, window) with any lifetime in it."""
    rows: dict[tuple[str, int], dict] = {}
    for job in fleet.jobs:
        _add_job(rows, job, fleet.horizon_us, peak_flops[job.spec.accelerator], window_us)
    ordered = sorted(rows.items())
    columns = {
        "job_id": pa.array([k[0] for k, _ in ordered], pa.string()),
        "window_start": pa.array([k[1] for k, _ in ordered], _TIMESTAMP),
    }
    chips_of = {job.spec.job_id: job.spec.requested_chips for job in fleet.jobs}
    for category in CATEGORIES:
        columns[f"{category}_chip_s"] = pa.array(
            [r["us"][category] * chips_of[k[0]] / 1e6 for k, r in ordered], pa.float64()
        )
    # Unknown is not zero (docs/metric.md section 1): a job without a profiler sample has a null ideal in
    # every window; a profiled job's windows have one, 0 where nothing productive ran.
    profiled = {job.spec.job_id for job in fleet.jobs if job.samples}
    columns["ideal_chip_s"] = pa.array([r["ideal"] if k[0] in profiled else None for k, r in ordered], pa.float64())
    columns["held_chip_s"] = pa.array([r["held_chip_us"] / 1e6 for _, r in ordered], pa.float64())
    return pa.table(columns)


def _add_job(rows: dict, job: JobTimeline, horizon_us: int, peak: float, window_us: int) -> None:
    spec = job.spec
    end_us = job.end_us if job.end_us is not None else horizon_us

    def row(window_start: int) -> dict:
        key = (spec.job_id, window_start)
        if key not in rows:
            rows[key] = {"us": dict.fromkeys(CATEGORIES, 0), "ideal": 0.0, "held_chip_us": 0}
        return rows[key]

    def add(start: int, stop: int, category: str, ideal: float = 0.0) -> None:
        for window_start, seconds_us in _split(start, stop, window_us):
            r = row(window_start)
            r["us"][category] += seconds_us
            if ideal:
                r["ideal"] += ideal * seconds_us / (stop - start)

    # Held chips as a step function from SUBMIT (holding nothing) to the job's end.
    changes = [(spec.submit_us, 0)] + [(c.time_us, c.chips) for c in job.levels] + [(end_us, 0)]
    spans = sorted(job.spans, key=lambda s: s.start_us)
    for (start, chips), (stop, _next) in zip(changes, changes[1:]):
        if stop <= start:
            continue
        for window_start, seconds_us in _split(start, stop, window_us):
            row(window_start)["held_chip_us"] += chips * seconds_us
        if chips == 0:
            add(start, stop, "queued")
        elif chips < spec.requested_chips:
            add(start, stop, "partial")
        else:  # all allocated: the runtime spans of this attempt, idle between them
            cursor = start
            for span in spans:
                if span.start_us < start or span.start_us >= stop:
                    continue
                if span.stop_us > stop or span.start_us < cursor:
                    raise AssertionError(f"{spec.job_id}: span {span} outside its allocation or overlapping")
                add(cursor, span.start_us, "idle")
                if span.kind == STEP:
                    add(
                        span.start_us,
                        span.stop_us,
                        span.outcome,
                        _ideal(span, job, peak) if span.outcome == PRODUCTIVE else 0.0,
                    )
                else:
                    add(span.start_us, span.stop_us, _SPAN_CATEGORY[span.kind])
                cursor = span.stop_us
            add(cursor, stop, "idle")


def _ideal(span, job: JobTimeline, peak: float) -> float:
    """Ideal chip-seconds of a productive step span (docs/metric.md section 3), for a job with a profile.

    The pipeline takes ideal_flops from the job's latest sample at or before
    the span (else its first); the simulator gives every sample of a job the
    same ideal_flops, so any sample gives the same answer.
    """
    return (span.last_step - span.first_step + 1) * job.spec.ideal_flops / peak


def _split(start: int, stop: int, window_us: int):
    """(window_start, microseconds) pieces of [start, stop) at window edges."""
    t = start
    while t < stop:
        window_start = t // window_us * window_us
        edge = min(stop, window_start + window_us)
        if edge > t:
            yield window_start, edge - t
        t = edge


def jobs_table(fleet: FleetTimeline) -> pa.Table:
    jobs = sorted(fleet.jobs, key=lambda j: j.spec.job_id)
    return pa.table(
        {
            "job_id": pa.array([j.spec.job_id for j in jobs], pa.string()),
            "cluster": pa.array([j.spec.cluster for j in jobs], pa.string()),
            "accelerator": pa.array([j.spec.accelerator for j in jobs], pa.string()),
            "workload": pa.array([j.spec.workload for j in jobs], pa.string()),
            "team": pa.array([j.spec.team for j in jobs], pa.string()),
            "framework": pa.array([j.spec.framework for j in jobs], pa.string()),
            "requested_chips": pa.array([j.spec.requested_chips for j in jobs], pa.int64()),
            "submit_time": pa.array([j.spec.submit_us for j in jobs], _TIMESTAMP),
            "end_time": pa.array([j.end_us for j in jobs], _TIMESTAMP),
            "status": pa.array([_status(j) for j in jobs], pa.string()),
            "disruptions": pa.array([_disruptions(j) for j in jobs], pa.int32()),
        }
    )


def _status(job: JobTimeline) -> str:
    """The job's status at the horizon: its end, or RUNNING while it holds chips, PENDING while it holds none."""
    if job.status != RUNNING:
        return job.status
    held = job.levels[-1].chips if job.levels else 0
    return RUNNING if held > 0 else "PENDING"


def _disruptions(job: JobTimeline) -> int:
    """Running attempts the scheduler cut short: preempted off the chips or failed while holding them all.
    (The simulated runtime never restarts inside an allocation.)"""
    requested, held, count = job.spec.requested_chips, 0, 0
    for change in job.levels:
        count += change.kind == "PREEMPT" and held >= requested > change.chips
        held = change.chips
    return count + (job.status == FAILED and held >= requested)


def capacity_window_table(fleet: FleetTimeline, window_us: int) -> pa.Table:
    totals: dict[tuple[str, str, int], int] = defaultdict(int)
    for cluster in fleet.clusters:
        levels = fleet.capacity[cluster.name] + [(fleet.horizon_us, 0)]
        for (start, chips), (stop, _next) in zip(levels, levels[1:]):
            for window_start, seconds_us in _split(start, stop, window_us):
                totals[(cluster.name, cluster.accelerator, window_start)] += chips * seconds_us
    ordered = sorted(totals.items())
    return pa.table(
        {
            "cluster": pa.array([k[0] for k, _ in ordered], pa.string()),
            "accelerator": pa.array([k[1] for k, _ in ordered], pa.string()),
            "window_start": pa.array([k[2] for k, _ in ordered], _TIMESTAMP),
            "capacity_chip_s": pa.array([v / 1e6 for _, v in ordered], pa.float64()),
        }
    )


def write_truth(
    truth_dir: Path, fleet: FleetTimeline, peak_flops: dict[str, float], window_s: int, manifest: dict
) -> dict[str, Path]:
    """Write the truth tables and truth.json into `truth_dir`; returns their paths by name."""
    truth_dir.mkdir(parents=True, exist_ok=True)
    window_us = window_s * 1_000_000
    tables = {
        "job_window": job_window_table(fleet, peak_flops, window_us),
        "jobs": jobs_table(fleet),
        "capacity_window": capacity_window_table(fleet, window_us),
    }
    paths = {}
    for name, table in tables.items():
        paths[name] = truth_dir / f"{name}.parquet"
        pq.write_table(table, paths[name])
    paths["truth"] = truth_dir / "truth.json"
    paths["truth"].write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return paths
