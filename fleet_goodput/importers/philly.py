"""Microsoft Philly (2017) job trace → scheduler events.

SOURCE is a folder with `jobs.json` (a JSON array of jobs: id, num_gpus,
submitted_time and the start/end of every attempt) and `cluster_machine_list`
(machine id, GPUs per machine, GPU memory), or the jobs file itself, with the
machine list beside it. The mapping, per job:

    SUBMIT   at submitted_time, chips = num_gpus, workload TRAINING
    ALLOCATE at each attempt's start, chips = num_gpus
    PREEMPT  chips = 0 at the end of every attempt but the last
    FINISH   at the end of the last attempt (the subset holds successful jobs only)

and one CAPACITY level for the whole cluster (Σ GPUs of the machine list) from
the earliest submission on. Philly has no runtime stream, so all of a job's
all-allocated time shows as `idle` and RG is 0 by construction; no profiler
stream, so PG is unknown. See docs/importers.md.
"""

from __future__ import annotations

from pathlib import Path

from fleet_goodput.importers.common import (
    Imported, JobEmitter, Options, SourceError, Unmappable, capacity, chip_count, file_digest, load_json, progress,
    read_text, require_file, utc_us,
)

NAME = "philly"
HELP = "Microsoft Philly job trace (jobs.json + cluster_machine_list) → scheduler events"
CLUSTER = "philly"
# The trace names GPU memory (12 GB, 24 GB) but not the model, and this subset
# does not say which machines a job ran on, so the cluster is one pool.
ACCELERATOR = "philly-gpu"
PREFIX = "philly"

PROVENANCE = {
    "source": "Microsoft Philly traces (msr-fiddle/philly-traces); successful jobs with >= 4 GPUs running >= 10 min",
    "licence": "CC BY 4.0",
    "citation": "Microsoft Philly traces, Jeon et al., ATC'19",
    "mapping": [
        "SUBMIT at submitted_time with chips = num_gpus, workload TRAINING",
        "ALLOCATE chips = num_gpus at every attempt start; PREEMPT chips = 0 at every attempt end but the last",
        "FINISH at the last attempt end (the subset holds successful jobs only)",
        "CAPACITY: one level for the cluster = sum of GPUs over cluster_machine_list, from the earliest submission",
        "times carry no zone in the trace and are read as UTC",
    ],
    "cannot_tell": [
        "no runtime stream: all-allocated time is `idle`, RG = 0 by construction",
        "no profiler stream: PG unknown",
        "the GPU model (only 12 GB / 24 GB memory) and which machines a job used: one pooled accelerator key",
        "survivors only (successful, >= 4 GPUs, >= 10 min): demand-base SG is optimistic; capacity-base SG "
        "understates the cluster's real use, since most jobs are not in the subset",
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
            raise SourceError(path, f"line {number}", f"expected 3 fields (machineId, GPUs, GPU memory), got {len(fields)}")
        try:
            count = int(fields[1])
        except ValueError as exc:
            raise SourceError(path, f"line {number}", f"GPU count {fields[1]!r} is not an integer") from exc
        gpus[fields[2]] = gpus.get(fields[2], 0) + count
    if not gpus:
        raise SourceError(path, None, "no machines listed")
    return gpus


def _attempt_times(job: dict) -> list[tuple[int, int]]:
    """(start, end) of every attempt, in µs; raises Unmappable with the reason they cannot be used."""
    attempts = job.get("attempts") or []
    if not isinstance(attempts, list):
        raise Unmappable("attempts is not a list")
    if not attempts:
        raise Unmappable("no attempts: the job never started")
    times = []
    for attempt in attempts:
        if not isinstance(attempt, dict) or not attempt.get("start_time") or not attempt.get("end_time"):
            raise Unmappable("an attempt without a start or end time")
        times.append((utc_us(attempt["start_time"]), utc_us(attempt["end_time"])))
    for (start, end), following in zip(times, times[1:] + [None]):
        if end < start:
            raise Unmappable("an attempt that ends before it starts")
        if following is not None and following[0] < end:
            raise Unmappable("attempts that overlap or are out of order")
    return times


def read(source: Path, options: Options) -> Imported:
    folder, jobs_name = (source.parent, source.name) if source.is_file() else (source, "jobs.json")
    jobs_path = require_file(folder / jobs_name, "the Philly jobs file jobs.json")
    machines_path = require_file(folder / "cluster_machine_list",
                                 "the Philly machine list cluster_machine_list beside the jobs file")
    gpus_by_memory = _read_machines(machines_path, options.max_expanded_bytes)
    jobs = load_json(jobs_path, options.max_expanded_bytes)
    if not isinstance(jobs, list):
        raise SourceError(jobs_path, None, f"expected a JSON array of jobs, found {type(jobs).__name__}")
    if options.limit is not None:
        jobs = jobs[:options.limit]

    imported = Imported(NAME)
    imported.provenance = {**PROVENANCE, "inputs": [file_digest(jobs_path), file_digest(machines_path)],
                           "accelerator": ACCELERATOR, "capacity_gpus_by_memory": gpus_by_memory}
    if ACCELERATOR not in options.accelerators:
        raise SourceError(jobs_path, None, f"accelerator key {ACCELERATOR!r} is not in the catalogue")
    submits = []
    for index, job in enumerate(progress(jobs, "philly jobs", unit="job")):
        where, job_id = f"record {index}", str(job.get("id", f"#{index}")) if isinstance(job, dict) else f"#{index}"
        try:
            if not isinstance(job, dict):
                raise Unmappable("not a JSON object")
            if not isinstance(job.get("num_gpus"), int) or job["num_gpus"] <= 0:
                raise Unmappable("num_gpus is not a positive integer", repr(job.get("num_gpus")))
            chips = chip_count(job["num_gpus"], "num_gpus")
            submit_us = utc_us(job["submitted_time"])
            attempts = _attempt_times(job)
            if attempts[0][0] < submit_us:
                raise Unmappable("first attempt starts before the submission")
        except KeyError as exc:
            imported.reject(jobs_path.name, where, job_id, f"missing field {exc.args[0]}")
            continue
        except Unmappable as exc:
            imported.reject(jobs_path.name, where, job_id, exc.reason, exc.detail)
            continue
        emit = JobEmitter(imported, PREFIX, job_id, CLUSTER, ACCELERATOR)
        emit.scheduler("SUBMIT", submit_us, chips, workload="TRAINING")
        for number, (start_us, end_us) in enumerate(attempts):
            emit.scheduler("ALLOCATE", start_us, chips)
            if number < len(attempts) - 1:
                emit.scheduler("PREEMPT", end_us, 0)
        emit.scheduler("FINISH", attempts[-1][1], 0)
        submits.append(submit_us)
    if submits:
        capacity(imported, PREFIX, CLUSTER, ACCELERATOR, min(submits), sum(gpus_by_memory.values()))
    return imported
