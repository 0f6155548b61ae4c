"""Google `ml-goodput-measurement` log entries → scheduler and runtime events.

SOURCE is a JSON-lines file (or a folder of `*.jsonl`/`*.json` files) of the
entries the library's GoodputRecorder writes to Cloud Logging, one per line,
either bare or as exported LogEntry objects (the entry under `jsonPayload`).
Each entry holds `job_name` and one timestamp (float seconds since the epoch):
job_start_time / job_end_time, step_count + step_start_time,
tpu_init_start/end_time, training_prep_start/end_time,
data_loading_start/end_time, custom_badput_event_type + _start/_end_time, and
Orbax checkpoint records (event_type save / restore with their blocking start
time and duration). The logs name neither the accelerator nor the chips, so
--accelerator and --chips are required. Mapping, per job_name:

    SUBMIT + ALLOCATE at the first job_start_time; each later job_start_time is a
    restart: PREEMPT chips=0 then ALLOCATE at that instant; FINISH at job_end_time
    INIT             tpu_init and training_prep
    DATA_WAIT        data_loading
    CHECKPOINT_SAVE  checkpoint_manager_blocking_start_time + its duration, durable step = `step`
    CHECKPOINT_RESTORE checkpoint_manager_start_time + its duration, resumed step = `step`
    STEP             step k from its step_start_time to the next step's (the last one to
                     job_end or the restart), cut around the spans above and custom badput
                     events, whose time then shows as `idle`

See docs/importers.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleet_goodput.importers.common import Imported, JobEmitter, Options, SourceError, Unmappable
from fleet_goodput.importers.reading import (
    LATEST_US,
    MICROS,
    bounded_lines,
    decode_json,
    event_time_us,
    file_digest,
    progress,
    seconds_to_us,
    too_long,
)
from fleet_goodput.importers.spans import subtract

NAME = "mgm"
HELP = "Google ml-goodput-measurement log entries (JSON lines) → scheduler and runtime events"
PREFIX = "mgm"
CLUSTER = "mgm"
# Paired start/end keys of the recorder → the runtime span kind they map to.
INTERVALS = {
    "tpu_init": ("tpu_init_start_time", "tpu_init_end_time", "INIT"),
    "training_prep": ("training_prep_start_time", "training_prep_end_time", "INIT"),
    "data_loading": ("data_loading_start_time", "data_loading_end_time", "DATA_WAIT"),
}
CUSTOM = ("custom_badput_event_start_time", "custom_badput_event_end_time")

PROVENANCE = {
    "source": "log entries in the format of Google's ml-goodput-measurement library "
    "(AI-Hypercomputer/ml-goodput-measurement, GoodputRecorder and Orbax checkpoint statistics)",
    "licence": "as the user's own logs",
    "mapping": [
        "SUBMIT + ALLOCATE at the first job_start_time; a later job_start_time is a restart: PREEMPT 0 then "
        "ALLOCATE; FINISH at job_end_time",
        "tpu_init and training_prep -> INIT; data_loading -> DATA_WAIT",
        "Orbax save -> CHECKPOINT_SAVE from checkpoint_manager_blocking_start_time for its duration, durable "
        "step = step; restore -> CHECKPOINT_RESTORE from checkpoint_manager_start_time, resumed step = step",
        "step k spans its step_start_time to the next step's (the last: to job_end_time or the restart), cut "
        "around the spans above and custom badput events",
    ],
    "cannot_tell": [
        "the accelerator and chips (given on the command line)",
        "queueing before the job started: SG covers restarts only",
        "program startup (job start to TPU init) is not a span: it shows as `idle`",
        "custom badput events (e.g. evaluation) have no category in the contract: `idle`",
        "asynchronous checkpoints become durable after their blocking part; the end of the blocking part is "
        "taken as durable (optimistic)",
        "model FLOPs: no profiler stream, PG unknown",
    ],
}


def _entries(path: Path, limit: int) -> tuple[list[tuple[int, dict]], list[tuple[int, Unmappable]]]:
    """(line number, entry) of every log entry, and (line number, why) of the lines refused:
    NaN or Infinity, nesting too deep (reading.decode_json), or longer than `limit` bytes (never
    held whole)."""
    entries, refused = [], []
    with open(path, encoding="utf-8") as handle:
        try:
            for number, line in bounded_lines(handle, limit):
                if line is None:
                    refused.append((number, too_long(limit)))
                    continue
                if not line.strip():
                    continue
                try:
                    entry = decode_json(line)
                except json.JSONDecodeError as exc:
                    raise SourceError(
                        path, f"line {number}", f"not a JSON log entry; is the file truncated? ({exc.msg})"
                    ) from exc
                except Unmappable as exc:
                    refused.append((number, exc))
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("jsonPayload"), dict):
                    entry = entry["jsonPayload"]
                if not isinstance(entry, dict):
                    raise SourceError(path, f"line {number}", "a log entry must be a JSON object")
                entries.append((number, entry))
        except UnicodeDecodeError as exc:
            raise SourceError(path, None, f"not UTF-8 text at byte {exc.start}") from exc
    return entries, refused


def _time(entry: dict, key: str) -> int:
    value = entry[key]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise Unmappable(f"{key} is not a number of seconds", repr(value))
    event_time_us(value, key, MICROS)
    return seconds_to_us(value)


class _Job:
    """One job's entries sorted into what the mapping needs."""

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.steps: list[tuple[int, int]] = []  # (time, step)
        self.spans: dict[str, list[tuple[str, int]]] = {name: [] for name in INTERVALS}  # (edge, time)
        self.checkpoints: list[tuple[str, int, int, int]] = []  # (kind, start, end, step)
        self.custom: list[tuple[str, int]] = []

    def add(self, entry: dict) -> None:
        if "job_start_time" in entry:
            self.starts.append(_time(entry, "job_start_time"))
        elif "job_end_time" in entry:
            self.ends.append(_time(entry, "job_end_time"))
        elif "step_start_time" in entry:
            if not isinstance(entry.get("step_count"), int):
                raise Unmappable("step_start_time without an integer step_count")
            self.steps.append((_time(entry, "step_start_time"), entry["step_count"]))
        elif entry.get("event_type") in ("save", "restore", "emergency_restore"):
            self._checkpoint(entry)
        elif any(key in entry for key in CUSTOM):
            edge = "start" if CUSTOM[0] in entry else "end"
            self.custom.append((edge, _time(entry, CUSTOM[0] if edge == "start" else CUSTOM[1])))
        else:
            for name, (start_key, end_key, _) in INTERVALS.items():
                if start_key in entry or end_key in entry:
                    edge = "start" if start_key in entry else "end"
                    self.spans[name].append((edge, _time(entry, start_key if edge == "start" else end_key)))
                    return
            raise Unmappable("entry holds none of the recorder's keys", ", ".join(sorted(entry))[:200])

    def _checkpoint(self, entry: dict) -> None:
        save = entry["event_type"] == "save"
        start_key = "checkpoint_manager_blocking_start_time" if save else "checkpoint_manager_start_time"
        duration_key = "checkpoint_manager_blocking_duration_secs" if save else "checkpoint_manager_duration_secs"
        if not isinstance(entry.get("step"), int):
            raise Unmappable("checkpoint record without an integer step")
        if start_key not in entry or not isinstance(entry.get(duration_key), (int, float)):
            raise Unmappable(f"checkpoint record without {start_key} and {duration_key}")
        start = _time(entry, start_key)
        if entry[duration_key] * MICROS >= LATEST_US:  # finite: decode_json refuses the rest
            raise Unmappable(f"{duration_key} is more seconds than from 1970 to 2100", repr(entry[duration_key]))
        end = event_time_us(start + seconds_to_us(entry[duration_key]), f"{start_key} + {duration_key}")
        self.checkpoints.append(("CHECKPOINT_SAVE" if save else "CHECKPOINT_RESTORE", start, end, entry["step"]))


def _pairs(edges: list[tuple[str, int]]) -> tuple[list[tuple[int, int | None]], int]:
    """Start/end edges → (start, end or None) intervals in time order, and the count of ends without a start."""
    intervals, open_start, orphans = [], None, 0
    for edge, time_us in sorted(edges, key=lambda e: (e[1], e[0] == "start")):
        if edge == "start":
            if open_start is not None:
                intervals.append((open_start, None))
            open_start = time_us
        elif open_start is None:
            orphans += 1
        else:
            intervals.append((open_start, time_us))
            open_start = None
    if open_start is not None:
        intervals.append((open_start, None))
    return intervals, orphans


def _emit_job(imported: Imported, name: str, job: _Job, options: Options, seen: tuple[str, str]) -> None:
    if not job.starts:
        raise Unmappable("no job_start_time: the job cannot be placed in time")
    starts = sorted(job.starts)
    end = max(job.ends) if job.ends else None
    emit = JobEmitter(imported, PREFIX, name, options.cluster or CLUSTER, options.accelerator)
    emit.scheduler("SUBMIT", starts[0], options.chips, workload="TRAINING")
    emit.scheduler("ALLOCATE", starts[0], options.chips)
    blocking: list[tuple[int, int]] = []
    for attempt, attempt_start in enumerate(starts):
        attempt_end = starts[attempt + 1] if attempt + 1 < len(starts) else end
        if attempt:
            emit.scheduler("PREEMPT", attempt_start, 0)
            emit.scheduler("ALLOCATE", attempt_start, options.chips)

        def inside(time_us: int, first=attempt_start, last=attempt_end) -> bool:
            return first <= time_us and (last is None or time_us < last)

        for name_, (_, _, kind) in INTERVALS.items():
            intervals, orphans = _pairs(job.spans[name_])
            for start, stop in intervals:
                if inside(start):
                    emit.span(kind, start, stop, attempt=attempt)
                    if kind != "DATA_WAIT" and stop is not None:
                        blocking.append((start, stop))
            if orphans and attempt == 0:
                imported.reject(*seen, name, f"{name_} end without a start", f"{orphans} entries")
        for kind, start, stop, step in sorted(job.checkpoints, key=lambda c: c[1]):
            if inside(start):
                emit.span(kind, start, stop, step, step, attempt)
                blocking.append((start, stop))
        custom, orphans = _pairs(job.custom)
        if orphans and attempt == 0:
            imported.reject(*seen, name, "custom badput event end without a start", f"{orphans} entries")
        blocking += [(start, stop) for start, stop in custom if stop is not None and inside(start)]
        steps = sorted((t, s) for t, s in job.steps if inside(t))
        for (time_us, step), following in zip(steps, steps[1:] + [None]):
            stop = following[0] if following else attempt_end
            if stop is None:
                emit.runtime("STEP_START", time_us, step, attempt)  # still running at the as-of time
                continue
            for piece_start, piece_stop in subtract(time_us, stop, blocking):
                emit.span("STEP", piece_start, piece_stop, step, step, attempt)
    if end is not None:
        emit.scheduler("FINISH", end, 0)


def read(source: Path, options: Options) -> Imported:
    if not options.accelerator or not options.chips:
        raise SourceError(source, None, "the logs name no accelerator or chips: pass --accelerator KEY --chips N")
    if options.accelerator not in options.accelerators:
        raise SourceError(source, None, f"accelerator {options.accelerator!r} is not in the catalogue")
    if source.is_dir():
        paths = sorted(p for p in source.iterdir() if p.suffix in (".jsonl", ".json"))
    elif source.is_file():
        paths = [source]
    else:
        raise SourceError(source, None, "no such file or folder")
    imported = Imported(NAME)
    imported.provenance = {
        **PROVENANCE,
        "inputs": [file_digest(p) for p in paths],
        "accelerator": options.accelerator,
        "chips": options.chips,
    }
    jobs: dict[str, _Job] = {}
    first_seen: dict[str, tuple[str, str]] = {}
    for path in paths:
        entries, refused = _entries(path, options.max_expanded_bytes)
        for number, exc in refused:
            imported.reject(path.name, f"line {number}", "", exc.reason, exc.detail)
        for number, entry in progress(entries, f"mgm {path.name}", unit="entry"):
            name = entry.get("job_name")
            if not isinstance(name, str) or not name:
                imported.reject(path.name, f"line {number}", "", "entry without a job_name")
                continue
            job = jobs.setdefault(name, _Job())
            first_seen.setdefault(name, (path.name, f"line {number}"))
            try:
                job.add(entry)
            except Unmappable as exc:
                imported.reject(path.name, f"line {number}", name, exc.reason, exc.detail)
    names = sorted(jobs)[: options.limit] if options.limit is not None else sorted(jobs)
    for name in names:
        try:
            _emit_job(imported, name, jobs[name], options, first_seen[name])
        except Unmappable as exc:
            imported.reject(*first_seen[name], name, exc.reason, exc.detail)
    return imported
