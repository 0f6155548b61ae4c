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
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fleet_goodput.core.config import read_yaml
from fleet_goodput.core.setting_types import ConfigError
from fleet_goodput.importers.common import (MAX_CHIPS, MICROS, PLAUSIBLE_CHIPS, Imported, Options, SourceError,
                                            Unmappable, bounded_lines, chip_count, event_time_us, file_digest,
                                            require_file)

NAME = "slurm"
HELP = "Slurm accounting: sacct -D -X --parsable2 rows, sacctmgr node events, scontrol node list"
PREFIX = "slurm"
SACCT, EVENTS, NODES = "sacct.txt", "events.txt", "nodes.txt"
REQUIRED = ("JobID", "State", "Submit", "Start", "End")
SACCT_FIELDS = ("JobID,JobIDRaw,Cluster,Partition,Account,QOS,Priority,State,ExitCode,Reason,Submit,Eligible,Start,"
                "End,Timelimit,ReqTRES,AllocTRES,NodeList,SubmitLine")
EVENT_FIELDS = "Cluster,NodeName,Start,End,State,Reason,User,Event,TRES"
NO_TIME = ("Unknown", "None", "")
# sacct -S/-E without --state lists the jobs *eligible* in the window: a job held (--hold) or waiting on
# a dependency has no eligible time (one waiting on --begin, one still to come), so it is missing, even
# once cancelled. The two listings whose rows follow the first's add them: every job that ended in the
# window, whatever its eligibility (each end state sacct 22.05 accepts; with -S it selects by end time,
# while PD selects by the time pending after the eligible time, so it adds none of them), and, by id
# (-j lists a job whatever its eligibility), the jobs squeue shows pending.
SACCT_COMMAND = ("sacct", "--allocations", "--duplicates", "--parsable2", "--allusers")
ENDED_LISTING = ("--state=BF,CA,CD,DL,F,NF,OOM,PR,TO",)
PENDING_LISTING = ("squeue", "--noheader", "--all", "--states=PENDING", "--format=%A")  # ids → sacct -j IDS
# What ends a job, by the first word of its State.
TERMINAL = {"COMPLETED": "FINISH", "FAILED": "FAIL", "NODE_FAIL": "FAIL", "TIMEOUT": "FAIL",
            "OUT_OF_MEMORY": "FAIL", "BOOT_FAIL": "FAIL", "DEADLINE": "FAIL", "PREEMPTED": "FAIL",
            "CANCELLED": "CANCEL"}
_ATTEMPT_TAG = {"ALLOCATE": "start", "PREEMPT": "stop"}  # FINISH, FAIL, CANCEL: "end"
REQUEUABLE = ("PREEMPTED", "NODE_FAIL")  # may run again: a later row would say so
STILL_QUEUED_OR_RUNNING = ("PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
                           "SUSPENDED", "REVOKED", "SIGNALING", "STAGE_OUT", "COMPLETING", "CONFIGURING")
# GRES types as sites commonly name them (and as NVML autodetection does) → catalogue keys.
GRES_TYPES = {
    "h100": "h100", "h100_80gb": "h100", "nvidia_h100_80gb_hbm3": "h100", "h100-sxm": "h100",
    "h100-pcie": "h100-pcie", "nvidia_h100_pcie": "h100-pcie", "h100-nvl": "h100-nvl", "nvidia_h100_nvl": "h100-nvl",
    "h200": "h200", "nvidia_h200": "h200", "gh200": "gh200", "b200": "b200", "nvidia_b200": "b200",
    "a100": "a100", "a100_80gb": "a100", "a100_40gb": "a100", "nvidia_a100-sxm4-80gb": "a100",
    "nvidia_a100-sxm4-40gb": "a100", "nvidia_a100_80gb_pcie": "a100", "v100": "v100", "tesla_v100-sxm2-32gb": "v100",
    "tesla_v100-sxm2-16gb": "v100", "l4": "l4", "nvidia_l4": "l4", "l40s": "l40s", "nvidia_l40s": "l40s",
    "t4": "t4", "tesla_t4": "t4", "mi250x": "mi250x", "mi300x": "mi300x", "gaudi2": "gaudi2", "gaudi3": "gaudi3",
}
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu(?::([^=,]+))?=(\d+)", re.ASCII)
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::([^:,(]+))?:(\d+)", re.ASCII)
_JOB_ID = re.compile(r"^(\d+)(?:_(\d+|\[[\d,\-%]+\]))?(?:\+\d+)?$", re.ASCII)
_PENDING_TASKS = re.compile(r"^\[(\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)(?:%\d+)?\]$", re.ASCII)
_RANGES = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$", re.ASCII)
# Bounds on what one row may make the import hold (docs/slurm.md, "Rows that are awkward"). A row (with the
# lines a SubmitLine carries on) longer than Linux's ARG_MAX, 2 MiB, holds no command line sbatch took.
MAX_ROW_BYTES = 4 << 20
# A pending array range is one SUBMIT per task: Slurm's MaxArraySize is at most 4,000,001 (task ids up to
# 4,000,000), and each task costs a record in memory, so one row may stand for this many tasks at most.
MAX_ARRAY_TASK_ID = 4_000_000
MAX_ARRAY_TASKS = 100_000
# Node names of one hostlist (`gpu[001-128]`): the largest clusters have some 10,000 nodes.
MAX_HOSTLIST_NODES = 100_000
# GPUs of one node: the densest servers hold 8 to 16 (a GB200 NVL72 rack 72); more is a typo or hostile.
MAX_GPUS_PER_NODE = 1_024
# The fields the mapping reads: a control character (NUL included) or bytes that are not UTF-8 in one
# reject the row; elsewhere (SubmitLine, Reason, ExitCode) they are kept, and `reason` drops them.
MAPPED_FIELDS = ("JobID", "Cluster", "Partition", "Account", "Priority", "State", "Submit", "Start", "End",
                 "ReqTRES", "AllocTRES", "NodeList")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
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


ACCELERATOR_MAP_HELP = ("YAML with `gres_types: {TYPE: KEY}` and `partitions: {PARTITION: KEY}` adding to the "
                        "built-in GRES type → catalogue key map (docs/slurm.md)")


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
            getattr(mapping, section).update({str(k).lower() if section == "gres_types" else str(k): v
                                              for k, v in entries.items()})
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
        raise Unmappable("GPU type not in the accelerator map",
                         f"{what} (partition {','.join(partitions) or '?'}): add it to --accelerator-map")


# ---- reading the files -----------------------------------------------------------
class TimeReader:
    """Slurm prints times in the client's zone without an offset (or as epoch seconds under
    SLURM_TIME_FORMAT=%s): read them in `zone` (UTC unless said), as µs since the epoch."""

    def __init__(self, zone: str | None):
        try:
            self.zone = ZoneInfo(zone) if zone else timezone.utc
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"--timezone {zone!r} is not a time zone name (e.g. UTC, Europe/Berlin)") from exc

    def __call__(self, text: str, what: str) -> int | None:
        """None for Unknown/None (not yet happened)."""
        text = text.strip()
        if text in NO_TIME:
            return None
        if text.isascii() and text.isdigit():
            # Past 20 digits it is past 2100 whatever it says, and int() of thousands of digits refuses.
            return event_time_us(int(text) if len(text) <= 20 else 10**20, what, MICROS)
        try:
            local = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
        except ValueError:
            raise Unmappable(f"{what} is not a time", repr(text[:80])) from None
        if not 1970 <= local.year < 2100:  # and so never past what a zone's offset moves a datetime to
            raise Unmappable(f"{what} is not a time from 1970 up to 2100", repr(text))
        moment = local.replace(tzinfo=self.zone)
        if self.zone is not timezone.utc:
            # A wall time that the zone skips (spring forward) does not come back from UTC unchanged.
            back = moment.astimezone(timezone.utc).astimezone(self.zone).replace(tzinfo=None)
            if back != local:
                raise Unmappable(f"{what} does not exist in {self.zone} (skipped by a daylight-saving change)",
                                 repr(text))
        return event_time_us(int(moment.timestamp()), what, MICROS)

    def ambiguous(self, text: str) -> bool:
        """A wall time the zone shows twice (fall back): read as its first occurrence."""
        if self.zone is timezone.utc or text.strip() in NO_TIME or text.strip().isdigit():
            return False
        local = datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S")
        return local.replace(tzinfo=self.zone, fold=0).utcoffset() != local.replace(tzinfo=self.zone,
                                                                                    fold=1).utcoffset()


@dataclass
class Row:
    where: str  # line number(s) in the file
    fields: dict[str, str]
    undecodable: tuple[str, ...] = ()  # fields whose bytes were not UTF-8
    raw: bytes = b""  # the row as the file holds it (lines joined by \n)
    problem: str | None = None  # why it cannot be read at all (too long): fields and raw are then empty


def parsable_rows(path: Path, required: tuple[str, ...]) -> Iterator[Row]:
    """Rows of a `--parsable2` file (a header line, then `|`-separated rows), read as a stream.

    A row with fewer fields than the header continues on the next line (a
    SubmitLine with newlines in it); extra fields are put back into the last
    column when that is SubmitLine (a `|` in the command). Bytes that are not
    UTF-8 are kept as U+FFFD, and the row says in which fields. A row longer
    than MAX_ROW_BYTES is read past, never held, and given with its `problem`.
    The file's faults (empty, no header, a last line that does not end) raise
    SourceError, the last once the rows before it were given: a caller keeps
    nothing of a file that raises.
    """
    with open(path, "rb") as handle:
        lines = bounded_lines(handle, MAX_ROW_BYTES)
        number, first_line = next(lines, (0, b""))
        if first_line is None:
            raise SourceError(path, "line 1", f"a header longer than {MAX_ROW_BYTES >> 20} MiB")
        if not first_line:
            raise SourceError(path, None, "empty: expected a header line")
        header = first_line.rstrip(b"\n").decode("utf-8", "replace").rstrip("\r").split("|")
        missing = [name for name in required if name not in header]
        if missing:
            raise SourceError(path, "line 1", f"no {', '.join(missing)} column: produce it with -o {SACCT_FIELDS}"
                              if path.name == SACCT else f"no {', '.join(missing)} column")
        row, first, too_long, ended = None, 0, False, first_line.endswith(b"\n")  # row: the one being read
        for number, line in lines:
            ended = line is None or line.endswith(b"\n")  # only a file's last line may not end
            # A line carries on the row when it has fewer fields than the header; a line too long to hold,
            # when the row has fewer itself.
            if row is not None and (line.count(b"|") + 1 < len(header) if line is not None
                                    else not too_long and row.count(b"|") + 1 < len(header)):
                if line is None or too_long or len(row) + len(line) > MAX_ROW_BYTES:
                    row, too_long = bytearray(), True  # read past the rest, holding none of it
                else:
                    row += b"\n" + line.rstrip(b"\n")
                continue
            if row is not None:
                yield _row(header, None if too_long else bytes(row), first, number - 1)
            row, first, too_long = bytearray(b"" if line is None else line.rstrip(b"\n")), number, line is None
        if not ended:  # sacct and sacctmgr end every line
            raise SourceError(path, f"line {number}", "the last line does not end: is the file truncated?")
        if row is not None:
            yield _row(header, None if too_long else bytes(row), first, number)


def _row(header: list[str], raw: bytes | None, first: int, last: int) -> Row:
    """The row of lines `first` to `last`; None for one too long to hold."""
    where = f"line {first}" if first == last else f"lines {first}-{last}"
    if raw is None:
        return Row(where, {}, problem=f"a row longer than {MAX_ROW_BYTES >> 20} MiB")
    parts = raw.rstrip(b"\r").split(b"|")
    if len(parts) > len(header) and header[-1] == "SubmitLine":
        parts = parts[:len(header) - 1] + [b"|".join(parts[len(header) - 1:])]
    fields, undecodable = {}, []
    for name, part in zip(header, parts):
        try:
            fields[name] = part.decode("utf-8")
        except UnicodeDecodeError:
            fields[name] = part.decode("utf-8", "replace")
            undecodable.append(name)
    if len(parts) != len(header):
        fields["__count__"] = str(len(parts))
    return Row(where, fields, tuple(undecodable), raw)


def tres_gpus(tres: str) -> tuple[int, str | None] | None:
    """(GPUs, GRES type or None) of a TRES list (`gres/gpu:h100=4,gres/gpu=4`); None without GPUs.
    Raises Unmappable for more than one GPU type."""
    total, types = None, {}
    for kind, count in _TRES_GPU.findall(tres):
        if kind:
            types[kind] = _whole(count)
        else:
            total = _whole(count)
    if len(types) > 1:
        raise Unmappable("more than one GPU type in one job", tres)
    if total is None and types:
        total = next(iter(types.values()))
    if not total:
        return None
    return total, next(iter(types), None)


def _whole(digits: str) -> int:
    """An ASCII run of digits as an int; past 19 digits (more than any count here may be) 10**19, since
    int() refuses thousands of digits."""
    return int(digits) if len(digits) <= 19 else 10**19


def read_nodes(path: Path, imported: Imported) -> dict[str, dict]:
    """Node name → {gpus: [(type, count)], partitions: [..]} from `scontrol show node -o` lines, read as a
    stream; a line that is not a node's, or whose GPUs no node holds, is one rejection."""
    nodes = {}
    with open(path, "rb") as handle:
        for number, raw in bounded_lines(handle, MAX_ROW_BYTES):
            line = None if raw is None else raw.decode("utf-8", "replace")
            try:
                if line is None:
                    raise Unmappable(f"a line longer than {MAX_ROW_BYTES >> 20} MiB")
                if not line.strip():
                    continue
                name, node = _node(line)
            except Unmappable as exc:
                imported.reject(NODES, f"line {number}", (line or "")[:80].strip(), exc.reason, exc.detail)
                continue
            nodes[name] = node
    return nodes


def _node(line: str) -> tuple[str, dict]:
    pairs = dict(re.findall(r"(\w+)=(\S*)", line))
    if "NodeName" not in pairs:
        raise Unmappable("not a `scontrol show node -o` line (no NodeName=)")
    if _CONTROL.search(line.rstrip("\r\n")):
        raise Unmappable("a control character in the line", repr(line.strip()[:80]))
    gpus = [(kind or None, _whole(count)) for kind, count in _GRES_GPU.findall(pairs.get("Gres", ""))]
    if not gpus:  # a node whose GPUs only its configured TRES lists (CfgTRES=...,gres/gpu:h100=8)
        configured = _TRES_GPU.findall(pairs.get("CfgTRES", ""))
        gpus = ([(kind, _whole(count)) for kind, count in configured if kind]
                or [(None, _whole(count)) for kind, count in configured if not kind and _whole(count)])
    for _, count in gpus:
        if count > MAX_GPUS_PER_NODE:
            raise Unmappable(f"a node with more than {MAX_GPUS_PER_NODE:,} GPUs of a type", f"{count:,}")
    return pairs["NodeName"], {
        "gpus": gpus, "partitions": [p for p in pairs.get("Partitions", "").split(",") if p and p != "(null)"]}


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
    ranges = _ranges(tasks.group(1), MAX_ARRAY_TASK_ID, MAX_ARRAY_TASKS, "array task")
    return (f"{base}_{n}" for low, high in ranges for n in range(low, high + 1))


def _ranges(text: str, largest: int, most: int, what: str) -> list[tuple[int, int]]:
    """`1-3,7` as [(1, 3), (7, 7)]: numbers up to `largest`, each range in order, `most` numbers in all
    (counted, not expanded); else Unmappable."""
    if not _RANGES.match(text):
        raise Unmappable(f"{what} range not understood", repr(text[:80]))
    ranges, count = [], 0
    for piece in text.split(","):
        low, _, high = piece.partition("-")
        low, high = _whole(low), _whole(high or low)
        if high > largest:
            raise Unmappable(f"{what} number past {largest:,}", repr(text[:80]))
        if low > high:
            raise Unmappable(f"{what} range not understood", f"{piece[:40]!r} runs backwards")
        ranges.append((low, high))
        count += high - low + 1
        if count > most:
            raise Unmappable(f"more than {most:,} {what}s in one row", repr(text[:80]))
    return ranges


def _attempt(row: Row, read_time: TimeReader, imported: Imported, item: str) -> Attempt:
    fields = row.fields
    if "__count__" in fields:
        raise Unmappable("a row with a different number of fields than the header",
                         f"{fields['__count__']} fields")
    mapped = [name for name in MAPPED_FIELDS if name in fields]
    if set(mapped) & set(row.undecodable):
        raise Unmappable("invalid UTF-8", f"in {', '.join(sorted(set(mapped) & set(row.undecodable)))}")
    controlled = [name for name in mapped if _CONTROL.search(fields[name])]
    if controlled:
        raise Unmappable("a control character in a field the mapping reads",
                         ", ".join(f"{name} {fields[name][:40]!r}" for name in controlled))
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
            imported.caveat(SACCT, item, "time in a repeated daylight-saving hour, read as its first occurrence",
                            f"{name} {fields[name]}")
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
    return Attempt(row, submit, start, end, fields["State"].strip(), requested[0],
                   allocated[0] if allocated else None, gres_type)


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


def _emit_job(imported: Imported, cluster: str, job_id: str, attempts: list[Attempt], accelerator: str,
              node_reasons, settle_after_us: int | None) -> None:
    def event(kind: str, attempt: Attempt, time_us: int, chips: int, **extra) -> None:
        # A job's SUBMIT is one event whichever attempt a poll sees first (sacct -S lists no attempt
        # that ended before it); the others are named by their attempt's Submit.
        tag = "submit" if kind == "SUBMIT" else f"{attempt.submit_us // MICROS}/{_ATTEMPT_TAG.get(kind, 'end')}"
        imported.streams["scheduler"].append({
            "event_id": f"{PREFIX}/{cluster}/{job_id}/{tag}",
            "event_time": time_us, "job_id": f"{cluster}/{job_id}", "type": kind, "cluster": cluster,
            "accelerator": accelerator, "chips": chips, "workload": None, "framework": None, "team": None,
            "topology": None, "priority": None, "reason": None, **extra})

    first = attempts[0]
    fields = first.row.fields
    priority = fields.get("Priority", "").strip()
    priority = int(priority) if priority.isascii() and priority.isdigit() and _whole(priority) <= MAX_CHIPS else None
    event("SUBMIT", first, first.submit_us, first.requested, team=fields.get("Account") or None,
          priority=priority, queue=fields.get("Partition") or None)
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
    return convert(require_file(folder / SACCT if source.is_dir() else source,
                                f"{SACCT}: the output of sacct --allocations --duplicates --parsable2 -o "
                                f"{SACCT_FIELDS}"), options)


def first_record_us(imported: Imported) -> int | None:
    """The first record of the history `imported` holds (its earliest job event): where capacity starts."""
    return min((r["event_time"] for r in imported.streams["scheduler"] if r["job_id"] is not None), default=None)


def convert(sacct_path: Path, options: Options, origin_us: int | None = None, since_us: int | None = None,
            settle_after_us: int | None = None) -> Imported:
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
        return next((o.reason for o in outages if o.node in names and o.start_us <= time_us
                     and (o.end_us is None or time_us <= o.end_us) and o.reason), None)

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
        attempt.row = Row(row.where, {name: row.fields[name] for name in (*MAPPED_FIELDS, "Reason", "ExitCode")
                                      if name in row.fields})
        for job_id in ids:
            jobs.setdefault((cluster, job_id), []).append(attempt)
    if options.limit is not None:
        jobs = dict(list(jobs.items())[:options.limit])
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
            imported.caveat(SACCT, item, "held: PENDING and not eligible to start; its wait counts the hold",
                            last.row.fields["Reason"])
    clusters = sorted({cluster for cluster, _ in jobs})
    if not nodes:
        imported.caveat(NODES, "capacity", "no node inventory: no CAPACITY, so fleet views have no base",
                        f"put the output of `scontrol show node -o` in {NODES}")
    elif len(clusters) > 1:
        imported.caveat(NODES, "capacity", "one node inventory for several clusters: no CAPACITY",
                        f"import each cluster's sacct rows with its own {NODES}: {', '.join(clusters)}")
    elif clusters:
        first_us = first_record_us(imported)
        if first_us is not None and (origin_us is None or first_us < origin_us):
            origin_us, since_us = first_us, None if since_us is None else min(since_us, first_us)
        if origin_us is not None:  # else no job of the cluster was mapped: no history to count capacity over
            _emit_capacity(imported, clusters[0], nodes, outages, accelerator_map, options.accelerators, origin_us,
                           since_us)
    return imported


def _check_attempts(attempts: list[Attempt]) -> None:
    for earlier, later in zip(attempts, attempts[1:]):
        if earlier.end_us is None:
            raise Unmappable("an attempt without End followed by another", earlier.row.where)
        if later.start_us is not None and later.start_us < earlier.end_us:
            raise Unmappable("attempts that overlap", f"{earlier.row.where} and {later.row.where}")


# ---- nodes and capacity ---------------------------------------------------------------
@dataclass(frozen=True)
class Outage:
    node: str
    start_us: int
    end_us: int | None  # None: still out
    state: str
    reason: str


_HOSTLIST_PART = re.compile(r"([^,\[]+)(?:\[([^\]]*)\])?")


def hostlist_ranges(text: str) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """`gpu[01-03,07],cpu1` as [("gpu", [("01", 1, 3), ("07", 7, 7)]), ("cpu1", [])] (Slurm's hostlist
    notation), checked whole: at most MAX_HOSTLIST_NODES names, counted, not expanded; else Unmappable."""
    parts, count = [], 0
    for match in _HOSTLIST_PART.finditer(text):
        prefix, ranges = match.group(1), match.group(2)
        if ranges is None:
            parts.append((prefix, []))
            count += 1
            continue
        pieces = [(piece.partition("-")[0], low, high)  # the low end's digits give the names' width
                  for piece, (low, high) in zip(ranges.split(","), _ranges(ranges, 10**18, MAX_HOSTLIST_NODES, "node"))]
        parts.append((prefix, pieces))
        count += sum(high - low + 1 for _, low, high in pieces)
        if count > MAX_HOSTLIST_NODES:
            raise Unmappable(f"more than {MAX_HOSTLIST_NODES:,} nodes in one row", repr(text[:80]))
    return parts


def expand_hostlist(text: str) -> Iterator[str]:
    """`gpu[01-03,07],cpu1` → its node names, one at a time (Slurm's hostlist notation). Raises Unmappable
    for a hostlist that is not one or names more than MAX_HOSTLIST_NODES nodes, before giving any."""
    for prefix, pieces in hostlist_ranges(text):
        if not pieces:
            if prefix and prefix != "None assigned":
                yield prefix
            continue
        for low_text, low, high in pieces:
            yield from (f"{prefix}{n:0{len(low_text)}d}" for n in range(low, high + 1))


def read_outages(path: Path, read_time: TimeReader, imported: Imported) -> list[Outage]:
    """Node events (a node down, drained, failing) from `sacctmgr -P show event`."""
    outages = []
    for row in parsable_rows(path, ("NodeName",)):
        fields = row.fields
        node = fields.get("NodeName", "").strip()
        if not node and not row.problem:
            continue  # a cluster event (its TRES registered), not a node's
        start_text = fields.get("TimeStart", fields.get("Start", ""))
        end_text = fields.get("TimeEnd", fields.get("End", ""))
        try:
            if row.problem:
                raise Unmappable(row.problem)
            if _CONTROL.search(node) or _CONTROL.search(start_text) or _CONTROL.search(end_text):
                raise Unmappable("a control character in a field the mapping reads", repr(node[:80]))
            start = read_time(start_text, "event start")
            end = read_time(end_text, "event end")
            if start is None:
                raise Unmappable("a node event without a start", repr(start_text))
            names = list(expand_hostlist(node))
        except Unmappable as exc:
            imported.reject(EVENTS, row.where, node[:80], exc.reason, exc.detail)
            continue
        for name in names:
            outages.append(Outage(name, start, end, fields.get("State", ""), fields.get("Reason", "").strip()))
    return outages


def _emit_capacity(imported, cluster, nodes, outages, accelerator_map, accelerators, origin_us, since_us) -> None:
    """A level per accelerator at the origin (every node's GPUs less those out then), and one at
    every later instant the level changes, from `since_us` on."""
    node_key: dict[str, list[tuple[str, int]]] = {}
    for name, node in nodes.items():
        for gres_type, count in node["gpus"]:
            try:
                node_key.setdefault(name, []).append(
                    (accelerator_map.key(gres_type, node["partitions"], accelerators), count))
            except Unmappable as exc:
                imported.reject(NODES, "node", name, exc.reason, exc.detail)
    changes: dict[str, dict[int, int]] = {}
    for pieces in node_key.values():
        for key, count in pieces:
            changes.setdefault(key, {}).setdefault(origin_us, 0)
            changes[key][origin_us] += count
    for outage in _merged(outages):
        if outage.end_us is not None and outage.end_us <= origin_us:
            continue  # over before the origin
        for key, count in node_key.get(outage.node, []):
            start = max(outage.start_us, origin_us)
            changes[key][start] = changes[key].get(start, 0) - count
            if outage.end_us is not None and outage.end_us > start:
                changes[key][outage.end_us] = changes[key].get(outage.end_us, 0) + count
    for key, deltas in sorted(changes.items()):
        level, levels = 0, []
        for time_us, delta in sorted(deltas.items()):
            level += delta
            if (delta or time_us == origin_us) and (since_us is None or time_us >= since_us):
                levels.append((time_us, level))
        if any(chips > PLAUSIBLE_CHIPS for _, chips in levels):  # each node is bounded; this many nodes is not
            imported.reject(NODES, "file", f"capacity {cluster}/{key}",
                            f"nodes hold more than {PLAUSIBLE_CHIPS:,} GPUs of one type",
                            f"{max(chips for _, chips in levels):,}")
            continue
        for time_us, chips in levels:
            _capacity(imported, cluster, key, time_us, chips)


def _merged(outages: list[Outage]) -> list[Outage]:
    """Each node's outages with overlapping ones joined (a DRAIN that becomes DOWN is one outage)."""
    merged: list[Outage] = []
    for outage in sorted(outages, key=lambda o: (o.node, o.start_us)):
        previous = merged[-1] if merged else None
        if previous and previous.node == outage.node and (previous.end_us is None or outage.start_us <= previous.end_us):
            end = None if previous.end_us is None or outage.end_us is None else max(previous.end_us, outage.end_us)
            merged[-1] = Outage(previous.node, previous.start_us, end, previous.state, previous.reason)
        else:
            merged.append(outage)
    return merged


def _capacity(imported: Imported, cluster: str, accelerator: str, time_us: int, chips: int) -> None:
    imported.streams["scheduler"].append({
        "event_id": f"{PREFIX}/capacity/{cluster}/{accelerator}/{time_us}", "event_time": time_us, "job_id": None,
        "type": "CAPACITY", "cluster": cluster, "accelerator": accelerator, "chips": chips, "workload": None,
        "framework": None, "team": None, "topology": None, "priority": None, "reason": None})
