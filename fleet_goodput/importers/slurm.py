"""Slurm accounting (`sacct`, `sacctmgr show event`, `scontrol show node -o`) → scheduler events.

SOURCE is a folder holding what a site already has (docs/slurm.md says how to
produce each):

    sacct.txt    sacct --allocations --duplicates --parsable2 --allusers -S ... -E now -o FIELDS
                 (every attempt of a requeued or preempted job is its own row), followed by the
                 rows of jobs never eligible (held, waiting on a dependency): ENDED_LISTING and
                 PENDING_LISTING say how; a row listed twice alike is read once
    events.txt   sacctmgr -P show event format=Cluster,NodeName,Start,End,State,Reason,User,Event,TRES  (optional)
    nodes.txt    scontrol show node -o  (optional; needed for capacity)

The mapping, per job (rows of one JobID are its attempts, in Submit order):

    SUBMIT   at the first attempt's Submit, chips = gres/gpu of ReqTRES, team = Account,
             priority = Priority, queue = Partition
    ALLOCATE at each attempt's Start, chips = gres/gpu of AllocTRES
    PREEMPT  chips 0 at the End of every attempt but the last (it ended PREEMPTED, REQUEUED or
             NODE_FAIL and ran again), reason = its State (and the node's event reason)
    FINISH   COMPLETED; FAIL: FAILED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE,
             PREEMPTED; CANCEL: CANCELLED (by N): at the last attempt's End, reason = its State
             (and, for a job that ended before it ever started, why it was pending:
             CANCELLED by 0 (never started: JobHeldUser))

The accelerator is the GRES type through a map the user may extend (partition
as a fallback). CAPACITY per cluster and accelerator, from the first
submission on, is the GPUs of the node inventory, lowered while a node is
down, drained or failing (events.txt) and raised when it returns. Job ids are `<cluster>/<JobID>`; event ids depend only
on the job, the attempt's Submit time and the event, so the collector
(`mpg collect slurm`) and this importer agree and a rerun repeats them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fleet_goodput.core.config import read_yaml
from fleet_goodput.core.setting_types import ConfigError
from fleet_goodput.importers.common import Imported, Options, Unmappable
from fleet_goodput.importers.reading import MAX_CHIPS, MICROS, PLAUSIBLE_CHIPS, chip_count, file_digest, require_file
from fleet_goodput.importers.slurm_files import (
    CONTROL_CHARACTER,
    EVENTS,
    NODES,
    PREFIX,
    REQUIRED,
    SACCT,
    SACCT_FIELDS,
    Row,
    TimeReader,
    number_ranges,
    parsable_rows,
    whole_number,
)
from fleet_goodput.importers.slurm_nodes import (
    emit_capacity,
    expand_hostlist,
    hostlist_ranges,
    read_nodes,
    read_outages,
    tres_gpus,
)

NAME = "slurm"
HELP = "Slurm accounting: sacct -D -X --parsable2 rows, sacctmgr node events, scontrol node list"
# sacct -S/-E without --state lists the jobs *eligible* in the window: a job held (--hold) or waiting on
# a dependency has no eligible time (one waiting on --begin, one still to come), so it is missing, even
# once cancelled. The two listings whose rows follow the first's add them: every job that ended in the
# window, whatever its eligibility (each end state sacct 22.05 accepts; with -S it selects by end time,
# while PD selects by the time pending after the eligible time, so it adds none of them), and, by id
# (-j lists a job whatever its eligibility), the jobs squeue shows pending.
SACCT_COMMAND = ("sacct", "--allocations", "--duplicates", "--parsable2", "--allusers")
ENDED_LISTING = ("--state=BF,CA,CD,DL,F,NF,OOM,PR,TO",)
PENDING_LISTING = ("squeue", "--noheader", "--all", "--states=PENDING", "--format=%A")  # ids → sacct -j IDS
# How long each Slurm command may take (`mpg collect slurm`, importers/slurm_collect.py). sacct gives up on a slurmdbd that does not answer only after its
# own timeouts (45 s with the defaults, measured on 22.05; longer where MessageTimeout is raised), and a
# wedged one may never answer: a poll waits this long at most per command, then ends writing nothing,
# well within the ten minutes between two polls of the shipped timer.
DEFAULT_TIMEOUT_S = 120
# What ends a job, by the first word of its State.
TERMINAL = {
    "COMPLETED": "FINISH",
    "FAILED": "FAIL",
    "NODE_FAIL": "FAIL",
    "TIMEOUT": "FAIL",
    "OUT_OF_MEMORY": "FAIL",
    "BOOT_FAIL": "FAIL",
    "DEADLINE": "FAIL",
    "PREEMPTED": "FAIL",
    "CANCELLED": "CANCEL",
}
_ATTEMPT_TAG = {"ALLOCATE": "start", "PREEMPT": "stop"}  # FINISH, FAIL, CANCEL: "end"
REQUEUABLE = ("PREEMPTED", "NODE_FAIL")  # may run again: a later row would say so
STILL_QUEUED_OR_RUNNING = (
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SUSPENDED",
    "REVOKED",
    "SIGNALING",
    "STAGE_OUT",
    "COMPLETING",
    "CONFIGURING",
)
# GRES types as sites commonly name them (and as NVML autodetection does) → catalogue keys.
GRES_TYPES = {
    "h100": "h100",
    "h100_80gb": "h100",
    "nvidia_h100_80gb_hbm3": "h100",
    "h100-sxm": "h100",
    "h100-pcie": "h100-pcie",
    "nvidia_h100_pcie": "h100-pcie",
    "h100-nvl": "h100-nvl",
    "nvidia_h100_nvl": "h100-nvl",
    "h200": "h200",
    "nvidia_h200": "h200",
    "gh200": "gh200",
    "b200": "b200",
    "nvidia_b200": "b200",
    "a100": "a100",
    "a100_80gb": "a100",
    "a100_40gb": "a100",
    "nvidia_a100-sxm4-80gb": "a100",
    "nvidia_a100-sxm4-40gb": "a100",
    "nvidia_a100_80gb_pcie": "a100",
    "v100": "v100",
    "tesla_v100-sxm2-32gb": "v100",
    "tesla_v100-sxm2-16gb": "v100",
    "l4": "l4",
    "nvidia_l4": "l4",
    "l40s": "l40s",
    "nvidia_l40s": "l40s",
    "t4": "t4",
    "tesla_t4": "t4",
    "mi250x": "mi250x",
    "mi300x": "mi300x",
    "gaudi2": "gaudi2",
    "gaudi3": "gaudi3",
}
_JOB_ID = re.compile(r"^(\d+)(?:_(\d+|\[[\d,\-%]+\]))?(?:\+\d+)?$", re.ASCII)
_PENDING_TASKS = re.compile(r"^\[(\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)(?:%\d+)?\]$", re.ASCII)
# A pending array range is one SUBMIT per task: Slurm's MaxArraySize is at most 4,000,001 (task ids up to
# 4,000,000), and each task costs a record in memory, so one row may stand for this many tasks at most.
MAX_ARRAY_TASK_ID = 4_000_000
MAX_ARRAY_TASKS = 100_000
# The fields the mapping reads: a control character (NUL included) or bytes that are not UTF-8 in one
# reject the row; elsewhere (SubmitLine, Reason, ExitCode) they are kept, and `reason` drops them.
MAPPED_FIELDS = (
    "JobID",
    "Cluster",
    "Partition",
    "Account",
    "Priority",
    "State",
    "Submit",
    "Start",
    "End",
    "ReqTRES",
    "AllocTRES",
    "NodeList",
)
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]+")

PROVENANCE = {
    "source": "Slurm accounting of the site (sacct --duplicates --allocations, sacctmgr show event, scontrol show node)",
    "licence": "the site's own data",
    "citation": "https://slurm.schedmd.com/sacct.html",
    "mapping": [
        "SUBMIT at the first attempt's Submit, chips = gres/gpu of ReqTRES, team = Account, priority = Priority, "
        "queue = Partition",
        "ALLOCATE at each attempt's Start with the gres/gpu of AllocTRES",
        "PREEMPT chips 0 at the End of an attempt that ran again (PREEMPTED, REQUEUED, NODE_FAIL), reason = State",
        "FINISH (COMPLETED), FAIL (FAILED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, PREEMPTED), "
        "CANCEL (CANCELLED by N) at the last attempt's End, reason = State",
        "accelerator: the GRES type through the accelerator map, else the partition's entry",
        "CAPACITY: GPUs of the node inventory per cluster and accelerator, lowered while a node is down, drained or "
        "failing (sacctmgr events) and raised when it returns",
    ],
    "cannot_tell": [
        "no runtime stream: all-allocated time is unmeasured, RG and PG need the runtime and profiler streams",
        "workload and framework: Slurm does not know them",
        "nodes added or removed during the window: the inventory is the nodes as listed now",
    ],
}


ACCELERATOR_MAP_HELP = (
    "YAML with `gres_types: {TYPE: KEY}` and `partitions: {PARTITION: KEY}` adding to the "
    "built-in GRES type → catalogue key map (docs/slurm.md)"
)


@dataclass
class AcceleratorMap:
    """GRES type → catalogue key, and partition → key for jobs whose GRES has no type."""

    gres_types: dict[str, str] = field(default_factory=lambda: dict(GRES_TYPES))
    partitions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None) -> AcceleratorMap:
        mapping = cls()
        if path is None:
            return mapping
        try:
            raw = read_yaml(path)  # bounded in size, values and depth, as every settings file
        except ConfigError as exc:
            raise ValueError(f"--accelerator-map: {exc}") from exc
        if set(raw) - {"gres_types", "partitions"}:
            raise ValueError(f"--accelerator-map {path}: expected a mapping with `gres_types:` and/or `partitions:`")
        for section in ("gres_types", "partitions"):
            entries = raw.get(section) or {}
            if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
                raise ValueError(f"--accelerator-map {path}: `{section}` must map names to catalogue keys")
            getattr(mapping, section).update(
                {str(k).lower() if section == "gres_types" else str(k): v for k, v in entries.items()}
            )
        return mapping

    def key(self, gres_type: str | None, partitions: list[str], accelerators) -> str:
        if gres_type:
            key = self.gres_types.get(gres_type.lower(), gres_type.lower())
            if key in accelerators:
                return key
        for partition in partitions:
            if partition in self.partitions:
                return self.partitions[partition]
        what = f"GRES type {gres_type!r}" if gres_type else "a GPU without a GRES type"
        raise Unmappable(
            "GPU type not in the accelerator map",
            f"{what} (partition {','.join(partitions) or '?'}): add it to --accelerator-map",
        )


# ---- reading the files -----------------------------------------------------------


# ---- mapping -------------------------------------------------------------------------
@dataclass
class Attempt:
    row: Row
    submit_us: int
    start_us: int | None
    end_us: int | None
    state: str
    requested: int
    allocated: int | None
    gres_type: str | None


def _job_ids(job_id: str) -> Iterator[str]:
    """The JobIDs a row stands for: itself, or each task of a pending array range `10_[3-5]`, checked
    whole before the first is given (at most MAX_ARRAY_TASKS, ids up to MAX_ARRAY_TASK_ID)."""
    match = _JOB_ID.match(job_id)
    if not match:
        raise Unmappable("not a job allocation's JobID (a step? pass --allocations)", repr(job_id[:80]))
    base, task = match.group(1), match.group(2)
    if task is None or task.isdigit():
        return iter([job_id])
    tasks = _PENDING_TASKS.match(task)
    if not tasks:
        raise Unmappable("array task range not understood", repr(job_id[:80]))
    ranges = number_ranges(tasks.group(1), MAX_ARRAY_TASK_ID, MAX_ARRAY_TASKS, "array task")
    return (f"{base}_{n}" for low, high in ranges for n in range(low, high + 1))


def _attempt(row: Row, read_time: TimeReader, imported: Imported, item: str) -> Attempt:
    fields = row.fields
    if "__count__" in fields:
        raise Unmappable("a row with a different number of fields than the header", f"{fields['__count__']} fields")
    mapped = [name for name in MAPPED_FIELDS if name in fields]
    if set(mapped) & set(row.undecodable):
        raise Unmappable("invalid UTF-8", f"in {', '.join(sorted(set(mapped) & set(row.undecodable)))}")
    controlled = [name for name in mapped if CONTROL_CHARACTER.search(fields[name])]
    if controlled:
        raise Unmappable(
            "a control character in a field the mapping reads",
            ", ".join(f"{name} {fields[name][:40]!r}" for name in controlled),
        )
    if row.undecodable:
        imported.caveat(SACCT, item, "invalid UTF-8 replaced", ", ".join(row.undecodable))
    hostlist_ranges(fields.get("NodeList", ""))  # checked here, where a rejection names the row; read at a node failure
    submit = read_time(fields["Submit"], "Submit")
    if submit is None:
        raise Unmappable("no Submit time", repr(fields["Submit"]))
    start, end = read_time(fields["Start"], "Start"), read_time(fields["End"], "End")
    if "AllocTRES" in fields and not fields["AllocTRES"].strip():
        start = None  # nothing was ever allocated: a job cancelled while pending may read Start = End
    for name in ("Submit", "Start", "End"):
        if read_time.ambiguous(fields[name]):
            imported.caveat(
                SACCT,
                item,
                "time in a repeated daylight-saving hour, read as its first occurrence",
                f"{name} {fields[name]}",
            )
    if start is not None and start < submit:
        raise Unmappable("Start before Submit", f"{fields['Submit']} > {fields['Start']}")
    if end is not None and start is not None and end < start:
        raise Unmappable("End before Start", f"{fields['Start']} > {fields['End']}")
    requested = tres_gpus(fields.get("ReqTRES", "")) or tres_gpus(fields.get("AllocTRES", ""))
    if requested is None:
        raise Unmappable("CPU-only job (no gres/gpu in ReqTRES or AllocTRES)")
    chip_count(requested[0], "gres/gpu", PLAUSIBLE_CHIPS)
    allocated = tres_gpus(fields.get("AllocTRES", "")) if start is not None else None
    gres_type = (allocated or requested)[1] or requested[1]
    return Attempt(
        row, submit, start, end, fields["State"].strip(), requested[0], allocated[0] if allocated else None, gres_type
    )


def _reason(attempt: Attempt, node_reasons) -> str:
    """The attempt's State (with the exit code of a failure, the node's reason for a node failure),
    printable and at most 200 characters, as the contract's `reason`."""
    return _CONTROLS.sub(" ", _state_and_why(attempt, node_reasons))[:200]


def _state_and_why(attempt: Attempt, node_reasons) -> str:
    state = attempt.state
    if state.split()[0] in ("FAILED", "OUT_OF_MEMORY") and attempt.row.fields.get("ExitCode"):
        state = f"{state} (exit {attempt.row.fields['ExitCode']})"
    pending_why = attempt.row.fields.get("Reason", "").strip()
    if attempt.start_us is None and pending_why not in ("None", ""):  # ended while queued: held, a dependency, ...
        state = f"{state} (never started: {pending_why})"
    if state.startswith("NODE_FAIL") and attempt.end_us is not None:
        why = node_reasons(attempt.row.fields.get("NodeList", ""), attempt.end_us)
        if why:
            state = f"{state}: {why}"
    return state


def _emit_job(
    imported: Imported,
    cluster: str,
    job_id: str,
    attempts: list[Attempt],
    accelerator: str,
    node_reasons,
    settle_after_us: int | None,
) -> None:
    def event(kind: str, attempt: Attempt, time_us: int, chips: int, **extra) -> None:
        # A job's SUBMIT is one event whichever attempt a poll sees first (sacct -S lists no attempt
        # that ended before it); the others are named by their attempt's Submit.
        tag = "submit" if kind == "SUBMIT" else f"{attempt.submit_us // MICROS}/{_ATTEMPT_TAG.get(kind, 'end')}"
        imported.streams["scheduler"].append(
            {
                "event_id": f"{PREFIX}/{cluster}/{job_id}/{tag}",
                "event_time": time_us,
                "job_id": f"{cluster}/{job_id}",
                "type": kind,
                "cluster": cluster,
                "accelerator": accelerator,
                "chips": chips,
                "workload": None,
                "framework": None,
                "team": None,
                "topology": None,
                "priority": None,
                "reason": None,
                **extra,
            }
        )

    first = attempts[0]
    fields = first.row.fields
    priority = fields.get("Priority", "").strip()
    priority = (
        int(priority) if priority.isascii() and priority.isdigit() and whole_number(priority) <= MAX_CHIPS else None
    )
    event(
        "SUBMIT",
        first,
        first.submit_us,
        first.requested,
        team=fields.get("Account") or None,
        priority=priority,
        queue=fields.get("Partition") or None,
    )
    for number, attempt in enumerate(attempts):
        last = number == len(attempts) - 1
        if attempt.start_us is not None:
            event("ALLOCATE", attempt, attempt.start_us, min(attempt.allocated or attempt.requested, first.requested))
        if attempt.end_us is None:
            continue
        word = attempt.state.split()[0] if attempt.state else ""
        if not last:
            if attempt.start_us is not None:
                event("PREEMPT", attempt, attempt.end_us, 0, reason=_reason(attempt, node_reasons))
        elif word in REQUEUABLE and settle_after_us is not None and attempt.end_us >= settle_after_us:
            continue  # just ended: Slurm may yet list it again as requeued; a later poll says
        elif word in TERMINAL:
            event(TERMINAL[word], attempt, attempt.end_us, 0, reason=_reason(attempt, node_reasons))
        elif attempt.start_us is not None and word in STILL_QUEUED_OR_RUNNING:
            # Requeued and no later attempt listed yet: it holds nothing and waits.
            event("PREEMPT", attempt, attempt.end_us, 0, reason=_reason(attempt, node_reasons))


def read(source: Path, options: Options) -> Imported:
    folder = source if source.is_dir() else source.parent
    return convert(
        require_file(
            folder / SACCT if source.is_dir() else source,
            f"{SACCT}: the output of sacct --allocations --duplicates --parsable2 -o {SACCT_FIELDS}",
        ),
        options,
    )


def first_record_us(imported: Imported) -> int | None:
    """The first record of the history `imported` holds (its earliest job event): where capacity starts."""
    return min((r["event_time"] for r in imported.streams["scheduler"] if r["job_id"] is not None), default=None)


def convert(
    sacct_path: Path,
    options: Options,
    origin_us: int | None = None,
    since_us: int | None = None,
    settle_after_us: int | None = None,
) -> Imported:
    """The events of `sacct_path` (with events.txt and nodes.txt beside it). CAPACITY starts at the first
    record (`first_record_us`), or at `origin_us` where that is earlier (a collector's origin from its
    earlier polls), and only levels from `since_us` on are kept (the collector's later polls, whose node
    events no longer reach back to the origin), but for the level at a first record earlier than
    `origin_us`, which a record reaching accounting late can bring. A job whose last attempt ended
    PREEMPTED or NODE_FAIL at or after `settle_after_us` is not ended yet."""
    folder = sacct_path.parent
    events_path, nodes_path = folder / EVENTS, folder / NODES
    accelerator_map = options.accelerator_map or AcceleratorMap()
    read_time = TimeReader(options.timezone)
    imported = Imported(NAME)
    inputs = [file_digest(p) for p in (sacct_path, events_path, nodes_path) if p.is_file()]
    imported.provenance = {**PROVENANCE, "inputs": inputs, "timezone": options.timezone or "UTC"}
    nodes = read_nodes(nodes_path, imported) if nodes_path.is_file() else {}
    outages = read_outages(events_path, read_time, imported) if events_path.is_file() else []

    def node_reasons(node_list: str, time_us: int) -> str | None:
        names = set(expand_hostlist(node_list))
        return next(
            (
                o.reason
                for o in outages
                if o.node in names and o.start_us <= time_us and (o.end_us is None or time_us <= o.end_us) and o.reason
            ),
            None,
        )

    jobs: dict[tuple[str, str], list[Attempt]] = {}
    seen: set[bytes] = set()  # digests of the rows read: a row is held only while it is mapped
    for row in parsable_rows(sacct_path, REQUIRED):
        digest = hashlib.blake2b(row.raw, digest_size=16).digest()
        if row.raw and digest in seen:
            continue  # the same row from another listing (ENDED_LISTING repeats eligible jobs that ended)
        seen.add(digest)
        raw_id = row.fields.get("JobID", "").strip()
        cluster = (row.fields.get("Cluster") or options.cluster or "slurm").strip()
        item = f"{cluster}/{raw_id}"[:200] if not row.problem else ""  # a row read past names no job
        try:
            if row.problem:
                raise Unmappable(row.problem)
            ids = _job_ids(raw_id)  # first: a step row's ReqTRES is empty, and its JobID says why
            attempt = _attempt(row, read_time, imported, item)
        except Unmappable as exc:
            imported.reject(SACCT, row.where, item, exc.reason, exc.detail)
            continue
        # The attempt keeps the fields the mapping reads, not the row's text (its SubmitLine may be long).
        attempt.row = Row(
            row.where, {name: row.fields[name] for name in (*MAPPED_FIELDS, "Reason", "ExitCode") if name in row.fields}
        )
        for job_id in ids:
            jobs.setdefault((cluster, job_id), []).append(attempt)
    if options.limit is not None:
        jobs = dict(list(jobs.items())[: options.limit])
    for (cluster, job_id), attempts in jobs.items():
        attempts.sort(key=lambda a: (a.submit_us, a.start_us or 0))
        item = f"{cluster}/{job_id}"
        try:
            _check_attempts(attempts)
            first = attempts[0]
            partitions = [p for p in first.row.fields.get("Partition", "").split(",") if p]
            gres_type = next((a.gres_type for a in attempts if a.gres_type), None)
            accelerator = accelerator_map.key(gres_type, partitions, options.accelerators)
            if accelerator not in options.accelerators:
                raise Unmappable("accelerator not in the catalogue", repr(accelerator))
        except Unmappable as exc:
            imported.reject(SACCT, attempts[0].row.where, item, exc.reason, exc.detail)
            continue
        _emit_job(imported, cluster, job_id, attempts, accelerator, node_reasons, settle_after_us)
        last = attempts[-1]
        if last.state == "PENDING" and last.row.fields.get("Reason", "").startswith("JobHeld"):
            # Shown PENDING, as Slurm shows it; the hold is the user's or an admin's, not a wait for GPUs.
            imported.caveat(
                SACCT,
                item,
                "held: PENDING and not eligible to start; its wait counts the hold",
                last.row.fields["Reason"],
            )
    clusters = sorted({cluster for cluster, _ in jobs})
    if not nodes:
        imported.caveat(
            NODES,
            "capacity",
            "no node inventory: no CAPACITY, so fleet views have no base",
            f"put the output of `scontrol show node -o` in {NODES}",
        )
    elif len(clusters) > 1:
        imported.caveat(
            NODES,
            "capacity",
            "one node inventory for several clusters: no CAPACITY",
            f"import each cluster's sacct rows with its own {NODES}: {', '.join(clusters)}",
        )
    elif clusters:
        first_us = first_record_us(imported)
        if first_us is not None and (origin_us is None or first_us < origin_us):
            origin_us, since_us = first_us, None if since_us is None else min(since_us, first_us)
        if origin_us is not None:  # else no job of the cluster was mapped: no history to count capacity over
            emit_capacity(
                imported, clusters[0], nodes, outages, accelerator_map, options.accelerators, origin_us, since_us
            )
    return imported


def _check_attempts(attempts: list[Attempt]) -> None:
    for earlier, later in zip(attempts, attempts[1:]):
        if earlier.end_us is None:
            raise Unmappable("an attempt without End followed by another", earlier.row.where)
        if later.start_us is not None and later.start_us < earlier.end_us:
            raise Unmappable("attempts that overlap", f"{earlier.row.where} and {later.row.where}")


# ---- nodes and capacity ---------------------------------------------------------------
