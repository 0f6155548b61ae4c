"""`mpg collect slurm --out DIR`: poll the cluster's accounting into new Avro files, from cron or a timer.

Each poll runs `sacct` (every attempt, -S the cursor), `sacctmgr show event`
and `scontrol show node -o` for the cluster the Slurm client is configured for
(SLURM_CONF, or the default), with two more `sacct` listings for the jobs the
first leaves out because they were never eligible (held, waiting on a
dependency): those that ended since the cursor, and those `squeue` shows
pending, by id. It keeps their text in DIR/.slurm-collect/poll/,
maps it as `mpg import slurm` does (importers/slurm.py) and writes the events
not written before to DIR/scheduler/slurm-NNNNNNNN.avro; then it moves the
cursor (DIR/.slurm-collect/cursor.json). A job still running is written as far
as it has got (SUBMIT, ALLOCATE, a PREEMPT), its end at a later poll.

Every poll's file states what the collection has observed of the cluster
(fleet_goodput/telemetry/observed.py): from the first record of the history
the first poll read (its earliest submission, as `mpg import slurm` starts
at) to the poll's time (its start: a record the commands return from after it
waits for the next poll). A quiet poll writes a file holding only that
statement, so a quiet cluster's day completes all the same; the capacity
levels start at that first record too, not at --since, so the collected and
the imported history give the same figures. A record that reaches accounting
after the poll (slurmdbd takes about a second) is written by the next poll,
within the allowed lateness of the as-of time.

Each command runs for at most its timeout (`--timeout`, DEFAULT_TIMEOUT_S), its output streamed into a
file: one that fails or does not answer in time ends the poll with CollectError before anything is
written; a cursor file that is not one is a CursorError naming it (docs/slurm.md says why exit 2).

Killed at any point and run again, it ends where one uninterrupted collection
ends: event ids depend only on the job, the attempt and the event; the cursor
remembers the ids written; and a file written by a poll the cursor never
recorded (killed between the two) is read back into it before polling.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import fastavro

from fleet_goodput.importers.common import Options
from fleet_goodput.importers.reading import MICROS, bounded_lines
from fleet_goodput.importers.slurm import (
    DEFAULT_TIMEOUT_S,
    ENDED_LISTING,
    PENDING_LISTING,
    SACCT_COMMAND,
    convert,
    first_record_us,
)
from fleet_goodput.importers.slurm_files import (
    EVENT_FIELDS,
    EVENTS,
    NODES,
    REQUIRED,
    SACCT,
    SACCT_FIELDS,
    parsable_rows,
)
from fleet_goodput.telemetry.avro_io import write_events

STATE_DIR = ".slurm-collect"
CURSOR = "cursor.json"
REJECTED_DIR = "slurm_rejected"
# Accounting reaches slurmdbd within about a second; each poll reaches back this far behind the
# last one, so nothing recorded late is missed (what was written already is known by its id).
LAG_US = 300 * MICROS
# A written id is forgotten once its job ended this long before the cursor: sacct -S never lists it again.
FORGET_US = 86_400 * MICROS
# A rejected row is listed once, and listed again only if sacct still shows it this long after.
FORGET_REJECTED_US = 30 * FORGET_US
OPEN = 2**62  # the "forget after" of an id whose job has not ended
IDS_PER_SACCT = 500  # pending jobs asked for by id: a command line and a query of bounded length


class CollectError(RuntimeError):
    """A Slurm command failed (not installed, no configuration, the controller down) or did not answer
    in time."""


class CursorError(ValueError):
    """The cursor file cannot be read as one: the message names it and says what is wrong."""


class CollectBusy(RuntimeError):
    """Another collection holds DIR (a slow poll still running when cron starts the next)."""


@dataclass
class Cursor:
    origin_us: int | None  # CAPACITY and the observed period start here: the first record read (None: none yet)
    since_us: int  # the next poll asks sacct from here
    polls: int  # the number of the last poll whose file is recorded here
    written: dict[str, int]  # event id → when it may be forgotten
    rejected: dict[str, int]  # "item|reason" → when it was first listed
    clusters: list[str] = field(default_factory=list)  # the clusters seen, which a quiet poll states too

    @classmethod
    def load(cls, folder: Path, start_us: int) -> Cursor:
        """The cursor; a new one starts sacct at `start_us` and is saved at once, so that a first poll
        killed midway continues from the same --since whatever the next run is given."""
        path = folder / STATE_DIR / CURSOR
        if not path.exists():
            cursor = cls(None, start_us, 0, {}, {})
            cursor.save(folder)
            return cursor
        return cls(**_cursor_fields(path))

    def save(self, folder: Path) -> None:
        path = folder / STATE_DIR / CURSOR
        partial = path.with_name(f".{CURSOR}.partial")
        partial.write_text(json.dumps(self.__dict__, sort_keys=True), encoding="utf-8")
        os.replace(partial, path)


# The cursor's fields and the JSON types each must have (an int is never a bool).
_CURSOR_TYPES = {
    "origin_us": (int, type(None)),
    "since_us": (int,),
    "polls": (int,),
    "written": (dict,),
    "rejected": (dict,),
    "clusters": (list,),
}


def _cursor_fields(path: Path) -> dict:
    """The cursor's fields, checked: a file that is not one (emptied, edited, damaged) is a CursorError
    naming it, never a traceback, and never silently a new cursor (that would rewrite what was written)."""

    def bad(problem: str) -> CursorError:
        return CursorError(
            f"{path}: {problem}; it is the collector's cursor: restore it, or move it aside "
            "to collect again from --since (events already written keep their ids)"
        )

    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise bad(f"not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:
        raise bad(f"not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise bad("not a JSON object")
    missing = [name for name in _CURSOR_TYPES if name not in raw and name != "clusters"]
    if missing:
        raise bad(f"no {', '.join(missing)}")
    raw.setdefault("clusters", [])
    for name, types in _CURSOR_TYPES.items():
        if isinstance(raw[name], bool) or not isinstance(raw[name], types):
            raise bad(f"{name} is {type(raw[name]).__name__}, not {' or '.join(_JSON_NAMES[t] for t in types)}")
    for name in ("written", "rejected"):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in raw[name].values()):
            raise bad(f"{name} maps to something other than whole numbers")
    if not all(isinstance(c, str) for c in raw["clusters"]):
        raise bad("clusters holds something other than names")
    return {name: raw[name] for name in _CURSOR_TYPES}


_JSON_NAMES = {int: "a whole number", type(None): "null", dict: "an object", list: "a list"}


def _slurm(*command: str, into: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Run `command` with its output streamed into the file `into` (never held whole), for `timeout_s` at most."""
    env = {**os.environ, "TZ": "UTC"}  # sacct prints times in the client's zone, without an offset
    try:
        with open(into, "wb") as output:
            done = subprocess.run(command, env=env, stdout=output, stderr=subprocess.PIPE, timeout=timeout_s)
    except FileNotFoundError as exc:
        raise CollectError(f"{command[0]} is not installed (the Slurm client tools are needed)") from exc
    except subprocess.TimeoutExpired:  # run() has killed it
        raise CollectError(
            f"{command[0]} did not answer within {timeout_s:g} s (is "
            f"{'slurmdbd' if command[0] in ('sacct', 'sacctmgr') else 'slurmctld'} responding? "
            "--timeout gives it longer)"
        ) from None
    if done.returncode:
        why = " ".join(done.stderr[:2000].decode("utf-8", "replace").split())[:400]
        raise CollectError(f"{' '.join(command[:3])} ... exited {done.returncode}: {why}")


def _utc(time_us: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time_us // MICROS))


def poll_files(folder: Path, since_us: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """Run the commands into `folder`, each for at most `timeout_s`; the path of the sacct text: the eligible
    jobs' rows, then those of the jobs only the other listings show (ENDED_LISTING, PENDING_LISTING)."""
    folder.mkdir(parents=True, exist_ok=True)
    since = _utc(since_us)
    sacct = (*SACCT_COMMAND, "-S", since, "-E", "now", "-o", SACCT_FIELDS)
    outputs = {
        SACCT: sacct,
        EVENTS: ("sacctmgr", "-P", "show", "event", f"format={EVENT_FIELDS}", f"Start={since}"),
        NODES: ("scontrol", "show", "node", "-o"),
        "sacct-ended.txt": (*sacct, *ENDED_LISTING),
        "squeue-pending.txt": PENDING_LISTING,
    }
    for name, command in outputs.items():
        _slurm(*command, into=folder / name, timeout_s=timeout_s)
    listed = {row.fields.get("JobIDRaw", "").strip() for row in parsable_rows(folder / SACCT, REQUIRED)}
    listings = [folder / "sacct-ended.txt"]
    with open(folder / "squeue-pending.txt", "rb") as handle:
        pending = [
            job
            for _, line in bounded_lines(handle, 1024)
            if line and (job := line.strip().decode("ascii", "replace")) and job not in listed
        ]
    for number, start in enumerate(range(0, len(pending), IDS_PER_SACCT)):
        listings.append(folder / f"sacct-pending-{number}.txt")
        _slurm(*sacct, "-j", ",".join(pending[start : start + IDS_PER_SACCT]), into=listings[-1], timeout_s=timeout_s)
    # A job listed twice may have moved on in between (running in the first listing, ended in the next),
    # and its two rows would read as two attempts: each job's rows come from the first listing that has it.
    # A job just submitted is listed by id before accounting has its partition and priority: a later
    # poll lists it whole (its SUBMIT is written once).
    with open(folder / SACCT, "ab") as sacct_text:
        for listing in listings:
            added = set()  # a job's every row (attempt) of this listing, none of a later one
            for row in parsable_rows(listing, REQUIRED):
                job = row.fields.get("JobIDRaw", "").strip()
                if job not in listed and row.fields.get("Partition", "").strip():
                    sacct_text.write(row.raw + b"\n")
                    added.add(job)
            listed |= added
    return folder / SACCT


def _recover(out: Path, cursor: Cursor) -> None:
    """Ids of the files of polls the cursor never recorded (killed before it moved): written already."""
    recorded = cursor.polls
    for path in sorted((out / "scheduler").glob("slurm-*.avro")):
        number = int(path.stem.split("-")[1])
        if number > recorded:
            with _read_back(path), open(path, "rb") as handle:
                for record in fastavro.reader(handle):
                    cursor.written[record["event_id"]] = OPEN
            cursor.polls = number
    for path in sorted((out / REJECTED_DIR).glob("poll-*.jsonl")) if (out / REJECTED_DIR).is_dir() else []:
        if int(path.stem.split("-")[1]) > recorded:
            cursor.polls = max(cursor.polls, int(path.stem.split("-")[1]))
            with _read_back(path):
                for line in path.read_text(encoding="utf-8").splitlines():
                    row = json.loads(line)
                    cursor.rejected.setdefault(f"{row['item']}|{row['reason']}", cursor.since_us)


@contextlib.contextmanager
def _read_back(path: Path):
    """Reading back a file of a poll the cursor never recorded: one that does not read is a CursorError
    naming it (written whole by a rename, it was damaged since), never a traceback."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - fastavro and json raise many kinds on damaged bytes: each is this
        raise CursorError(
            f"{path} cannot be read back ({type(exc).__name__}: {str(exc)[:120]}): a poll wrote it "
            "whole, so it was damaged since; move it aside and poll again (its rows are read again "
            "from Slurm)"
        ) from None


def collect(
    out: Path, options: Options, since_us: int, now_us: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict:
    """One poll into `out`, each Slurm command given `timeout_s`; what it wrote. Raises CollectBusy while
    another holds `out`, CollectError when a command fails or does not answer in time (nothing written),
    CursorError when the cursor file is not one."""
    (out / STATE_DIR).mkdir(parents=True, exist_ok=True)
    with open(out / STATE_DIR / "lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CollectBusy(f"another `mpg collect` is polling into {out}") from None
        return _poll(out, options, since_us, now_us, timeout_s)


def _poll(out: Path, options: Options, since_us: int, now_us: int | None, timeout_s: float) -> dict:
    cursor = Cursor.load(out, since_us)
    _recover(out, cursor)
    now_us = now_us if now_us is not None else time.time_ns() // 1000
    poll_dir = out / STATE_DIR / "poll"
    shutil.rmtree(poll_dir, ignore_errors=True)
    imported = convert(
        poll_files(poll_dir, cursor.since_us, timeout_s),
        options,
        origin_us=cursor.origin_us,
        since_us=cursor.since_us,
        settle_after_us=now_us - LAG_US,
    )
    # Capacity and the observed period start at the first record of the history read so far, as an
    # import of it starts: a record that reached accounting after an earlier poll moves them earlier
    # (convert writes the level there too).
    first_us = first_record_us(imported)
    if first_us is not None and (cursor.origin_us is None or first_us < cursor.origin_us):
        cursor.origin_us = first_us
    scheduler = imported.streams["scheduler"]
    clusters = sorted(
        {*cursor.clusters, *(r["cluster"] for r in scheduler), *([options.cluster] if options.cluster else [])}
    )
    # The file states the cluster observed up to the poll's start (now_us): a record the commands returned
    # from after it (a node event while sacct ran, a clock ahead) would be past the file's stated end, so it
    # waits for the poll whose time passes it, which lists it again (nothing marks it written meanwhile).
    held_back = {r["event_id"] for r in scheduler if r["event_id"] not in cursor.written and r["event_time"] > now_us}
    records = [r for r in scheduler if r["event_id"] not in cursor.written and r["event_id"] not in held_back]
    rejections = [r.row() for r in imported.rejections if f"{r.item}|{r.reason}" not in cursor.rejected]
    number = cursor.polls + 1
    # Observed from the first record on (or from this poll, where none was read yet) up to now.
    start_us = min(cursor.origin_us, now_us) if cursor.origin_us is not None else now_us
    observed = {cluster: (start_us, now_us) for cluster in clusters} or None
    if records or observed:
        write_events(
            out / "scheduler" / f"slurm-{number:08d}.avro",
            "scheduler",
            sorted(records, key=lambda r: (r["event_time"], r["event_id"])),
            observed=observed,
        )
    if rejections:
        (out / REJECTED_DIR).mkdir(exist_ok=True)
        partial = out / REJECTED_DIR / f".poll-{number:08d}.partial"
        partial.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rejections), encoding="utf-8")
        os.replace(partial, out / REJECTED_DIR / f"poll-{number:08d}.jsonl")
    _remember(cursor, [r for r in scheduler if r["event_id"] not in held_back], rejections, now_us)
    cursor.clusters = clusters
    if records or rejections or observed:
        cursor.polls = number
    cursor.save(out)
    return {
        "events": len(records),
        "rejected": len(rejections),
        "jobs": len({r["job_id"] for r in records if r["job_id"]}),
        "file": f"scheduler/slurm-{number:08d}.avro" if records or observed else None,
        "observed": observed,
    }


def _remember(cursor: Cursor, records: list[dict], rejections: list[dict], now_us: int) -> None:
    """Record what is written, move the cursor, and forget what no later poll can list again."""
    ended = {r["job_id"]: r["event_time"] for r in records if r["type"] in ("FINISH", "FAIL", "CANCEL")}
    for record in records:
        job = record["job_id"]
        cursor.written[record["event_id"]] = record["event_time"] if job is None else ended.get(job, OPEN)
    for row in rejections:
        cursor.rejected[f"{row['item']}|{row['reason']}"] = now_us
    cursor.since_us = max(cursor.since_us, now_us - LAG_US)
    horizon = cursor.since_us - FORGET_US
    cursor.written = {key: until for key, until in cursor.written.items() if until >= horizon}
    cursor.rejected = {
        key: first for key, first in cursor.rejected.items() if first >= cursor.since_us - FORGET_REJECTED_US
    }
