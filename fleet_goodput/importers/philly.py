"""Microsoft Philly (2017) job trace → scheduler events.

SOURCE is a folder holding the trace's `cluster_job_log` (its published format: a JSON
array of jobs with `jobid`, `status` Pass/Killed/Failed, `vc`, `submitted_time` and the
`attempts`, each with its start, end and the GPUs of every machine it ran on) or, failing
that, `jobs.json` (a third-party subset of successful jobs with `id` and `num_gpus`), and
`cluster_machine_list` (machine id, GPUs per machine, GPU memory); or the jobs file itself,
with the machine list beside it. The mapping, per job:

    SUBMIT   at submitted_time, chips = the GPUs of its largest attempt (`num_gpus` in the
             subset), workload TRAINING, team = its virtual cluster (`vc`)
    ALLOCATE at each attempt's start, chips = the GPUs that attempt held
    PREEMPT  chips = 0 at the end of every attempt but the last
    FINISH   at the end of the last attempt for Pass (and the subset), FAIL for Failed,
             CANCEL for Killed; nothing for a job whose last attempt has no end_time: it
             was still running when the trace's snapshot was taken, and stays running

and one CAPACITY level for the whole cluster (Σ GPUs of the machine list) from
the earliest submission on. Philly has no runtime stream, so all of a job's
all-allocated time shows as `idle` and RG is 0 by construction; no profiler
stream, so PG is unknown. See docs/importers.md.
"""

from __future__ import annotations

from pathlib import Path

from fleet_goodput.importers.common import Imported, JobEmitter, Options, SourceError, Unmappable, capacity
from fleet_goodput.importers.reading import (
    chip_count,
    file_digest,
    load_json,
    progress,
    read_text,
    require_file,
    utc_us,
)

NAME = "philly"
HELP = "Microsoft Philly job trace (cluster_job_log or jobs.json + cluster_machine_list) → scheduler events"
CLUSTER = "philly"
# The trace names GPU memory (12 GB, 24 GB) but not the model, and this subset
# does not say which machines a job ran on, so the cluster is one pool.
ACCELERATOR = "philly-gpu"
PREFIX = "philly"
# The jobs files SOURCE may hold, the trace's own first.
JOB_FILES = ("cluster_job_log", "jobs.json")
# How each status ends a job's last attempt (the subset, without `status`, holds successful jobs).
END_OF = {"Pass": "FINISH", "Failed": "FAIL", "Killed": "CANCEL"}
# What the trace writes for a time it did not record (its README: `None`).
NO_TIME = (None, "", "None")

PROVENANCE = {
    "source": "Microsoft Philly traces (msr-fiddle/philly-traces): cluster_job_log, or the subset of successful "
    "jobs with >= 4 GPUs running >= 10 min (jobs.json)",
    "licence": "CC BY 4.0",
    "citation": "Microsoft Philly traces, Jeon et al., ATC'19",
    "mapping": [
        "SUBMIT at submitted_time with chips = the GPUs of the job's largest attempt (sum of len(gpus) over "
        "its detail; jobs.json: num_gpus), workload TRAINING, team = vc",
        "ALLOCATE chips = the attempt's GPUs at every attempt start; PREEMPT chips = 0 at every attempt end but "
        "the last",
        "the last attempt's end: FINISH for Pass (and jobs.json), FAIL for Failed, CANCEL for Killed",
        "a last attempt without end_time: running at the trace's snapshot; no end event, the job stays running",
        "CAPACITY: one level for the cluster = sum of GPUs over cluster_machine_list, from the earliest submission",
        "times carry no zone in the trace and are read as UTC",
    ],
    "cannot_tell": [
        "no runtime stream: all-allocated time is unmeasured, and RG, PG and MPG are unknown",
        "no profiler stream: PG unknown",
        "the GPU model (only 12 GB / 24 GB memory): one pooled accelerator key",
        "jobs without attempts (never scheduled) have no time they left the queue: rejected, counted",
        "jobs.json keeps survivors only (successful, >= 4 GPUs, >= 10 min): demand-base SG is optimistic; "
        "capacity-base SG understates the cluster's real use",
    ],
}


def _read_machines(path: Path, limit: int) -> dict[str, int]:
    """GPUs online per GPU memory size, from the machine list (a CSV with a header line)."""
    gpus: dict[str, int] = {}
    lines = read_text(path, limit).splitlines()
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = [part.strip() for part in line.split(",")]
        if len(fields) != 3:
            raise SourceError(
                path, f"line {number}", f"expected 3 fields (machineId, GPUs, GPU memory), got {len(fields)}"
            )
        try:
            count = int(fields[1])
        except ValueError as exc:
            raise SourceError(path, f"line {number}", f"GPU count {fields[1]!r} is not an integer") from exc
        gpus[fields[2]] = gpus.get(fields[2], 0) + count
    if not gpus:
        raise SourceError(path, None, "no machines listed")
    return gpus


def _time(value) -> int | None:
    return None if value in NO_TIME else utc_us(value)


def _attempts(job: dict) -> list[tuple[int, int | None, int | None]]:
    """(start, end, GPUs) of every attempt, in µs; the last one's end None if the job was
    running at the snapshot; GPUs None where the attempt does not list them (jobs.json).
    Raises Unmappable with the reason they cannot be used."""
    attempts = job.get("attempts") or []
    if not isinstance(attempts, list):
        raise Unmappable("attempts is not a list")
    if not attempts:
        raise Unmappable(
            "no attempts: the job never started, and the trace gives no time it left the queue",
            f"status {job.get('status', 'Pass')}",
        )
    times = []
    for number, attempt in enumerate(attempts):
        if not isinstance(attempt, dict) or _time(attempt.get("start_time")) is None:
            raise Unmappable("an attempt without a start time (a logging error, as the trace's README says)")
        end = _time(attempt.get("end_time"))
        if end is None and number < len(attempts) - 1:
            raise Unmappable("an attempt before the last without an end time")
        times.append((_time(attempt["start_time"]), end, _gpus(attempt)))
    for (start, end, _), following in zip(times, times[1:] + [None]):
        if end is not None and end < start:
            raise Unmappable("an attempt that ends before it starts")
        if following is not None and following[0] < end:
            raise Unmappable("attempts that overlap or are out of order")
    return times


def _gpus(attempt: dict) -> int | None:
    """The GPUs an attempt held: Σ len(gpus) over the machines of its `detail`."""
    detail = attempt.get("detail")
    if detail is None:
        return None
    if not isinstance(detail, list) or not all(isinstance(d, dict) and isinstance(d.get("gpus"), list) for d in detail):
        raise Unmappable("an attempt whose detail is not a list of machines with their gpus")
    return sum(len(machine["gpus"]) for machine in detail)


def _jobs_file(source: Path) -> Path:
    if source.is_file():
        return source
    for name in JOB_FILES:
        if (source / name).is_file():
            return source / name
    return require_file(source / JOB_FILES[0], "the Philly jobs file cluster_job_log (or jobs.json)")


def _requested(job: dict, attempts: list[tuple[int, int | None, int | None]]) -> int:
    """GPUs the job asked for: `num_gpus` where given (jobs.json), else its largest attempt's."""
    if "num_gpus" in job:
        if not isinstance(job["num_gpus"], int) or job["num_gpus"] <= 0:
            raise Unmappable("num_gpus is not a positive integer", repr(job["num_gpus"]))
        return chip_count(job["num_gpus"], "num_gpus")
    held = [gpus for _, _, gpus in attempts if gpus is not None]
    if not held or max(held) <= 0:
        raise Unmappable("no GPUs listed in any attempt's detail (and no num_gpus)")
    return chip_count(max(held), "the GPUs of the largest attempt")


def read(source: Path, options: Options) -> Imported:
    jobs_path = _jobs_file(source)
    machines_path = require_file(
        jobs_path.parent / "cluster_machine_list", "the Philly machine list cluster_machine_list beside the jobs file"
    )
    gpus_by_memory = _read_machines(machines_path, options.max_expanded_bytes)
    jobs = load_json(jobs_path, options.max_expanded_bytes)
    if not isinstance(jobs, list):
        raise SourceError(jobs_path, None, f"expected a JSON array of jobs, found {type(jobs).__name__}")
    if options.limit is not None:
        jobs = jobs[: options.limit]

    imported = Imported(NAME)
    imported.provenance = {
        **PROVENANCE,
        "inputs": [file_digest(jobs_path), file_digest(machines_path)],
        "accelerator": ACCELERATOR,
        "capacity_gpus_by_memory": gpus_by_memory,
    }
    if ACCELERATOR not in options.accelerators:
        raise SourceError(jobs_path, None, f"accelerator key {ACCELERATOR!r} is not in the catalogue")
    submits, running = [], 0
    for index, job in enumerate(progress(jobs, "philly jobs", unit="job")):
        where = f"record {index}"
        job_id = str(job.get("jobid", job.get("id", f"#{index}"))) if isinstance(job, dict) else f"#{index}"
        try:
            if not isinstance(job, dict):
                raise Unmappable("not a JSON object")
            status = job.get("status", "Pass")
            if status not in END_OF:
                raise Unmappable("status is not Pass, Killed or Failed", repr(status))
            submit_us = utc_us(job["submitted_time"])
            attempts = _attempts(job)
            chips = _requested(job, attempts)
            if attempts[0][0] < submit_us:
                raise Unmappable("first attempt starts before the submission")
        except KeyError as exc:
            imported.reject(jobs_path.name, where, job_id, f"missing field {exc.args[0]}")
            continue
        except Unmappable as exc:
            imported.reject(jobs_path.name, where, job_id, exc.reason, exc.detail)
            continue
        emit = JobEmitter(imported, PREFIX, job_id, CLUSTER, ACCELERATOR)
        emit.scheduler("SUBMIT", submit_us, chips, workload="TRAINING", team=job.get("vc") or None)
        for number, (start_us, end_us, gpus) in enumerate(attempts):
            emit.scheduler("ALLOCATE", start_us, gpus or chips)
            if number < len(attempts) - 1:
                emit.scheduler("PREEMPT", end_us, 0)
        if attempts[-1][1] is None:
            running += 1
        else:
            emit.scheduler(END_OF[status], attempts[-1][1], 0)
        submits.append(submit_us)
    if submits:
        capacity(imported, PREFIX, CLUSTER, ACCELERATOR, min(submits), sum(gpus_by_memory.values()))
    imported.provenance["running_at_snapshot"] = running
    return imported
