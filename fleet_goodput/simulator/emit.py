"""Telemetry events from the simulated timeline, written as shuffled Avro part files.

Each stream is shuffled and cut into parts, so one job's events are spread
over files and out of time order inside each: the pipeline must not depend
on arrival order, and this makes sure a test notices if it does.
"""

from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path

from fleet_goodput.simulator.timeline import CHECKPOINT_RESTORE, FleetTimeline, JobTimeline
from fleet_goodput.telemetry.avro_io import write_events

EVENTS_PER_PART = 50_000
MIN_PARTS = 3  # even a tiny run spreads each job over several files


def scheduler_events(fleet: FleetTimeline) -> list[dict]:
    events = []
    for cluster in fleet.clusters:
        levels = fleet.capacity[cluster.name]
        # The last event restates every level at the horizon: the input's latest
        # event time is then the horizon, which the pipeline takes as its as-of time.
        restated = levels + [(fleet.horizon_us, _level_at(levels, fleet.horizon_us))]
        reasons = fleet.capacity_reasons.get(cluster.name, {})
        for n, (time_us, chips) in enumerate(restated):
            events.append(
                _scheduler(
                    f"capacity-{cluster.name}-{n}",
                    time_us,
                    None,
                    "CAPACITY",
                    cluster.name,
                    cluster.accelerator,
                    chips,
                    reasons.get(time_us) if n < len(levels) else None,
                )
            )
    for job in fleet.jobs:
        spec = job.spec
        ids = _ids(spec.job_id, "s")
        submit = _scheduler(
            next(ids), spec.submit_us, spec.job_id, "SUBMIT", spec.cluster, spec.accelerator, spec.requested_chips
        )
        submit.update(
            workload=spec.workload,
            framework=spec.framework,
            team=spec.team,
            topology=spec.topology,
            priority=spec.priority,
        )
        events.append(submit)
        for change in job.levels:
            events.append(
                _scheduler(
                    next(ids),
                    change.time_us,
                    spec.job_id,
                    change.kind,
                    spec.cluster,
                    spec.accelerator,
                    change.chips,
                    change.reason,
                )
            )
        if job.end_us is not None:
            end_type = {"FINISHED": "FINISH", "FAILED": "FAIL", "CANCELLED": "CANCEL"}[job.status]
            # chips on an ending event: the job holds none from now on.
            events.append(
                _scheduler(
                    next(ids), job.end_us, spec.job_id, end_type, spec.cluster, spec.accelerator, 0, job.end_reason
                )
            )
    return events


def runtime_events(fleet: FleetTimeline) -> list[dict]:
    events = []
    for job in fleet.jobs:
        ids = _ids(job.spec.job_id, "r")
        for span in job.spans:
            # A restore names the step it resumes from on both ends; a save only
            # knows its durable step when it ends.
            end_step = span.first_step if span.kind == CHECKPOINT_RESTORE else span.last_step
            events.append(_runtime(next(ids), span.start_us, job, f"{span.kind}_START", span.first_step, span.attempt))
            if span.ended:
                events.append(_runtime(next(ids), span.stop_us, job, f"{span.kind}_END", end_step, span.attempt))
    return events


def profiler_events(fleet: FleetTimeline) -> list[dict]:
    events = []
    for job in fleet.jobs:
        spec = job.spec
        ids = _ids(spec.job_id, "p")
        for sample in job.samples:
            events.append(
                {
                    "event_id": next(ids),
                    "event_time": sample.time_us,
                    "job_id": spec.job_id,
                    "step": sample.step,
                    "duration_s": sample.duration_s,
                    "chips": spec.requested_chips,
                    "ideal_flops": spec.ideal_flops,
                    "flops_source": spec.flops_source,
                    "bytes_accessed": spec.ideal_flops * spec.bytes_per_flop,
                }
            )
    return events


def write_stream(
    out_dir: Path, stream: str, events: list[dict], seed: int, observed: dict[str, tuple[int, int]] | None = None
) -> list[Path]:
    """Shuffle `events` and write them as DIR/stream/part-NNNNN.avro, each file stating `observed`
    (fleet_goodput/telemetry/observed.py: every part is a share of the one simulated period); returns
    the paths."""
    random.Random(f"{seed}:shuffle:{stream}").shuffle(events)
    parts = max(1, min(len(events), max(MIN_PARTS, math.ceil(len(events) / EVENTS_PER_PART))))
    size = math.ceil(len(events) / parts) if events else 0
    paths = []
    for part in range(parts):
        path = out_dir / stream / f"part-{part:05d}.avro"
        write_events(
            path,
            stream,
            events[part * size : (part + 1) * size],
            sync_marker=_sync_marker(seed, stream, part),
            observed=observed,
        )
        paths.append(path)
    return paths


def _sync_marker(seed: int, stream: str, part: int) -> bytes:
    return hashlib.sha256(f"{seed}:{stream}:{part}".encode()).digest()[:16]


def _scheduler(
    event_id: str,
    time_us: int,
    job_id: str | None,
    type_: str,
    cluster: str,
    accelerator: str,
    chips: int,
    reason: str | None = None,
) -> dict:
    return {
        "event_id": event_id,
        "event_time": time_us,
        "job_id": job_id,
        "type": type_,
        "cluster": cluster,
        "accelerator": accelerator,
        "chips": chips,
        "workload": None,
        "framework": None,
        "team": None,
        "topology": None,
        "priority": None,
        "reason": reason,
    }


def _runtime(event_id: str, time_us: int, job: JobTimeline, type_: str, step: int | None, attempt: int) -> dict:
    return {
        "event_id": event_id,
        "event_time": time_us,
        "job_id": job.spec.job_id,
        "type": type_,
        "step": step,
        "attempt": attempt,
    }


def _ids(job_id: str, stream_letter: str):
    n = 0
    while True:
        yield f"{job_id}-{stream_letter}{n}"
        n += 1


def _level_at(levels: list[tuple[int, int]], time_us: int) -> int:
    return [chips for t, chips in levels if t <= time_us][-1]
