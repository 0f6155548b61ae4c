"""A job's scheduling stated by hand → its SUBMIT, ALLOCATE and end events.

For a one-off job that no cluster exporter reports and that ran without the
recorder's `Scheduling` (docs/recorder.md): a short YAML (or JSON) statement
of the job and its attempts, each a stretch on all its chips.

    job: llama-7b-0412
    accelerator: h100            # a key of the accelerator catalogue
    chips: 8
    cluster: my-box              # optional (default: local)
    workload: TRAINING           # optional (default); team, framework: optional
    submit: 2026-01-01T09:55:00Z # optional (default: the first attempt's start)
    attempts:
      - start: 2026-01-01T10:00:00Z
        end: 2026-01-01T11:00:00Z
        ended: PREEMPT           # FINISH, FAIL, CANCEL or PREEMPT (restarted later)
        reason: spot VM reclaimed
      - start: 2026-01-01T11:05:00Z
        end: 2026-01-01T13:00:00Z  # the last attempt ends FINISH unless `ended` says; no `end`: still running

Mapping: SUBMIT of `chips` at `submit` (with workload, team, framework);
ALLOCATE of `chips` at each attempt's start; at its end its `ended` (0 chips)
with its `reason`. An attempt but the last ends PREEMPT unless it says, as the
job continued after it. A statement that contradicts itself (times out of
order, an end before the last attempt, an accelerator the catalogue lacks)
is refused with the reason, and nothing is written.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from fleet_goodput.core.timeutil import parse_time_us
from fleet_goodput.importers.common import Imported, JobEmitter, Options, SourceError
from fleet_goodput.importers.reading import file_digest, read_text

NAME = "job"
HELP = "a job's scheduling stated by hand (YAML: job, accelerator, chips, attempts) → SUBMIT, ALLOCATE, end"
PREFIX = "stated"
MANY_SOURCES = True
ENDS = ("FINISH", "FAIL", "CANCEL", "PREEMPT")
WORKLOADS = ("TRAINING", "SERVING", "BULK_INFERENCE")
FIELDS = {"job", "accelerator", "chips", "cluster", "workload", "team", "framework", "submit", "attempts"}
ATTEMPT_FIELDS = {"start", "end", "ended", "reason"}
MAX_STATEMENT_BYTES = 1 << 20  # a statement is a few lines; a megabyte is not one

PROVENANCE = {
    "source": "a job's scheduling stated by hand (fleet_goodput/importers/job.py)",
    "licence": "as the user's own statement",
    "mapping": [
        "submit (default: the first attempt's start) -> SUBMIT of chips, with workload, team, framework",
        "each attempt: start -> ALLOCATE of chips; end -> its `ended` (FINISH, FAIL, CANCEL, PREEMPT; default "
        "PREEMPT but for the last, FINISH) with its reason",
    ],
    "cannot_tell": [
        "what ran on the chips: combine with the job's runtime stream (recorder, logs) under the same job id",
        "partial allocations and queues: each attempt holds all its chips",
    ],
}


def read(sources: list[Path], options: Options) -> Imported:
    imported = Imported(NAME)
    files = []
    for source in sources:
        paths = (
            sorted(p for p in source.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
            if source.is_dir()
            else [source]
        )
        for path in paths:
            _read_statement(path, options, imported)
            files.append(file_digest(path))
    imported.provenance = {**PROVENANCE, "files": files}
    return imported


def _read_statement(path: Path, options: Options, imported: Imported) -> None:
    import yaml  # here, as core/config.py does: `mpg --help` lists `mpg import` without it

    try:
        statement = yaml.safe_load(read_text(path, MAX_STATEMENT_BYTES))
    except yaml.YAMLError as exc:
        raise SourceError(path, None, f"not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(statement, dict):
        raise SourceError(path, None, "a statement is a mapping of job, accelerator, chips and attempts")
    unknown = set(statement) - FIELDS
    if unknown:
        raise SourceError(
            path, None, f"unknown field(s) {', '.join(sorted(map(str, unknown)))}; expected {', '.join(sorted(FIELDS))}"
        )
    job, accelerator = _text(path, statement, "job"), _text(path, statement, "accelerator")
    if accelerator not in options.accelerators:
        raise SourceError(path, "accelerator", f"{accelerator!r} is not in the accelerator catalogue")
    chips = statement.get("chips")
    if isinstance(chips, bool) or not isinstance(chips, int) or not 0 < chips < 2**31:
        raise SourceError(path, "chips", f"chips must be a positive whole number, not {chips!r}")
    workload = statement.get("workload", "TRAINING")
    if workload not in WORKLOADS:
        raise SourceError(path, "workload", f"unknown workload {workload!r}; expected one of {', '.join(WORKLOADS)}")
    attempts = statement.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        raise SourceError(path, "attempts", "a list of at least one attempt (start, end, ended) is required")
    stretches = [
        _attempt(path, number, attempt, number == len(attempts)) for number, attempt in enumerate(attempts, start=1)
    ]
    submit_us = _time(path, "submit", statement["submit"]) if statement.get("submit") is not None else stretches[0][0]
    previous_us, previous = submit_us, "submit"
    for number, (start_us, end_us, _, _) in enumerate(stretches, start=1):
        if start_us < previous_us:
            raise SourceError(path, f"attempt {number}", f"starts before the {previous}")
        previous_us, previous = (end_us, f"end of attempt {number}") if end_us is not None else (start_us, "")
    emit = JobEmitter(imported, PREFIX, job, _text(path, statement, "cluster", "local"), accelerator)
    emit.scheduler(
        "SUBMIT",
        submit_us,
        chips,
        workload=workload,
        team=_text(path, statement, "team", None),
        framework=_text(path, statement, "framework", None),
    )
    for start_us, end_us, ended, reason in stretches:
        emit.scheduler("ALLOCATE", start_us, chips)
        if end_us is not None:
            emit.scheduler(ended, end_us, 0, reason=reason)


def _attempt(path: Path, number: int, attempt, last: bool) -> tuple[int, int | None, str, str | None]:
    """(start µs, end µs or None: still running, how it ended, the reason) of one attempt."""
    where = f"attempt {number}"
    if not isinstance(attempt, dict) or "start" not in attempt or set(attempt) - ATTEMPT_FIELDS:
        raise SourceError(path, where, "an attempt is a mapping of start (required), end, ended and reason")
    start_us = _time(path, where, attempt["start"])
    end_us = _time(path, where, attempt["end"]) if attempt.get("end") is not None else None
    ended = attempt.get("ended", "FINISH" if last else "PREEMPT")
    if ended not in ENDS:
        raise SourceError(path, where, f"unknown end {ended!r}; expected one of {', '.join(ENDS)}")
    if end_us is None and not last:
        raise SourceError(path, where, "only the last attempt may still be running (no end)")
    if end_us is not None and end_us < start_us:
        raise SourceError(path, where, "ends before it starts")
    if not last and ended != "PREEMPT":
        raise SourceError(path, where, f"ends the job ({ended}) but attempts follow it")
    reason = attempt.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise SourceError(path, where, "reason must be text")
    return start_us, end_us, ended, reason if reason is None else reason[:256]


def _time(path: Path, where: str, value) -> int:
    """An ISO-8601 time (YAML may have read it as a datetime already; without a zone, UTC) in µs."""
    if isinstance(value, datetime):
        value = (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
    try:
        return parse_time_us(str(value))
    except ValueError as exc:
        raise SourceError(path, where, str(exc)) from None


def _text(path: Path, statement: dict, name: str, default: str | None = "") -> str | None:
    value = statement.get(name, default)
    if value == "" or (value is not None and not isinstance(value, str)):
        raise SourceError(path, name, f"{name} must be named, as text")
    return value
