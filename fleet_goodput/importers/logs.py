"""A training job's stdout (Megatron-LM, NeMo, or a profile of your own) → scheduler, runtime and profiler events.

SOURCE... are the log files of ONE job, or folders of them (one per launch: a
restarted job writes a new file, or appends to the same one). The files are put
in order by their first timestamp, not by their names or the order given.
`--profile NAME` picks the patterns (log_profiles.py, configs/log_profiles.yaml).
The job, accelerator and chips come from the log where its profile reads them
(world size, device name, run name), else from `--job ID --accelerator KEY
--chips N`; a flag overrides the log (a caveat where they differ), but --chips
fewer than the log's world size is refused, and what neither gives is a
UsageError naming the flag (exit 2). `--submit TIME` gives the submission time
(default: the log's first time, no queueing). Mapping:

    each file, and each `start` line after some training in a file, is an attempt:
    SUBMIT + ALLOCATE before the first; PREEMPT 0 at the end of one and ALLOCATE at the next
    INIT               an attempt's start (its first timestamp, less `startup_seconds`) to its first
                       iteration block, around its checkpoint load
    STEP               each iteration line: its block of steps (previous step + 1 .. step), lasting
                       steps x time per step and ending at the line's timestamp; a line without a
                       timestamp continues from the last known time
    CHECKPOINT_SAVE    save_start (or the end of the last block) to save_end, save_start + save_ms,
                       or a timestamped save_durable, else (no duration stated) the next block's start
                       or the attempt's last time, with a caveat; only saves that save_durable confirms
    CHECKPOINT_RESTORE restore_start to restore_end (its timestamp, restore_start + restore_ms)
    profiler           a stated TFLOP/s per GPU: an ANALYTIC sample per block, ideal FLOPs of one
                       step = TFLOP/s x 1e12 x time per step x chips
    FINISH             at the `end` line; a log that stops without it: FAIL at its last time

See docs/importers.md, "logs".
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from fleet_goodput.core.config import part_key
from fleet_goodput.importers.common import (
    Imported,
    JobEmitter,
    Options,
    SourceError,
    Unmappable,
    UsageError,
    assumed_peak,
)
from fleet_goodput.importers.log_profiles import Profile, ProfileError, load_profiles
from fleet_goodput.importers.log_timeline import Attempt, LogLine, SpanBuilder
from fleet_goodput.importers.reading import (
    LATEST_US,
    MAX_CHIPS,
    MICROS,
    bounded_lines,
    event_time_us,
    file_digest,
    too_long,
    utc_us,
)
from fleet_goodput.importers.spans import subtract

NAME = "logs"
HELP = "a training job's stdout (--profile megatron, nemo or nemo1, or --profiles FILE of your own) → all three streams"
PREFIX = "logs"
MANY_SOURCES = True  # `mpg import logs run1.log run2.log`: the files of one job's launches
CLUSTER = "logs"
# A later timestamp may lag a time derived from step times by this much without a caveat:
# NeMo's timestamps are cut to the second, and step times are rounded to 0.1 ms.
SLACK_US = MICROS
UNNAMED = ""  # the job of a rejection or caveat before the job's id is known (`_identity`)
# Named groups holding numbers (log_profiles.LINE_KINDS), and the largest step an Avro long holds.
NUMBERS = {"step", "ms", "seconds", "tflops", "chips", "elapsed"}
MAX_STEP = 2**63 - 1
# Lines that show a process training: a `start` line after one of them is a restart.
TRAINING_KINDS = {"iteration", "save_start", "save_end", "save_durable", "save_done", "restore_start", "restore_end"}

PROVENANCE = {
    "licence": "as the user's own logs",
    "mapping": [
        "each log file, and each `start` line after training began, is an attempt: SUBMIT + ALLOCATE before the "
        "first, PREEMPT 0 at the end of one and ALLOCATE at the next; FINISH at the `end` line, else FAIL at the "
        "last time",
        "INIT from an attempt's start (first timestamp less startup_seconds) to its first block, around restores",
        "STEP: each iteration line is the block of steps since the previous one, ending at the line's timestamp "
        "(or continuing from the last known time), lasting steps x the stated time per step",
        "CHECKPOINT_SAVE from its start line (or the end of the last block) to the end of its blocking part "
        "(not stated: to the next block's start or the attempt's last time); durable only when the log confirms it",
        "CHECKPOINT_RESTORE from its start line to its end (timestamp or stated duration), resumed step = its step",
        "stated TFLOP/s per GPU -> an ANALYTIC profiler sample per block: TFLOP/s x 1e12 x step time x chips",
    ],
    "cannot_tell": [
        "the job, accelerator and chips where the log does not print them (given on the command line: "
        "SOURCE.json read_from says which came from where), and queueing before the log starts (--submit, else none)",
        "the time zone of the log's timestamps: read as UTC",
        "where lines carry no timestamp, times are derived from the stated step times since the last timestamp",
        "time between one launch's last line and the next launch's start: the job held no chips (queued) as far as the log knows",
        "evaluation and other work between iteration lines have no category: idle",
        "the precision of the model's matrix math, unless a line of the profile's `precision` states it: bf16",
    ],
}


def _paths(sources: list[Path]) -> list[Path]:
    """The log files of SOURCE...: each file given, and every file of each folder given but hidden ones;
    a file given twice (itself and in its folder) is read once."""
    paths = {}
    for source in sources:
        if source.is_dir():
            found = sorted(p for p in source.iterdir() if p.is_file() and not p.name.startswith("."))
        elif source.is_file():
            found = [source]
        else:
            raise SourceError(source, None, "no such file or folder")
        for path in found:
            paths.setdefault(path.resolve(), path)
    names = Counter(path.name for path in paths.values())
    if any(count > 1 for count in names.values()):  # rejections and caveats name a file by its name
        raise UsageError(
            "two log files of one name: "
            + ", ".join(str(path) for path in paths.values() if names[path.name] > 1)
            + " (give one, or rename a copy)"
        )
    return sorted(paths.values(), key=lambda path: (path.name, str(path)))


def _stamp(profile: Profile, text: str) -> int:
    """A timestamp of the log in µs: `time_format`, optionally followed by a fraction of a second
    (after a dot, or a comma as Python's logging writes it)."""
    try:
        time_us = utc_us(text, profile.time_format)
    except Unmappable:
        whole, dot, fraction = text.replace(",", ".").rpartition(".")
        if not dot or not fraction.isdigit():
            raise
        time_us = utc_us(whole, profile.time_format) + int(fraction.ljust(6, "0")[:6])
    return event_time_us(time_us, "timestamp")


def _read_lines(path: Path, profile: Profile, imported: Imported, job: str, limit: int) -> list[LogLine]:
    """The lines of `path` that the profile recognises or that carry a timestamp; the rest are
    passed over, and those it cannot read are rejected with the reason."""
    lines = []

    def reject(number: int, reason: str, detail: str = "") -> None:
        imported.reject(path.name, f"line {number}", job, reason, detail)

    with open(path, encoding="utf-8") as handle:
        try:
            for number, text in bounded_lines(handle, limit):
                if text is None:
                    reject(number, too_long(limit).reason, too_long(limit).detail)
                    continue
                cut = not text.endswith("\n")
                text = text.rstrip("\r\n")
                read = profile.read(text)
                kinds, malformed = read.kinds, read.malformed
                if cut and (kinds or malformed):
                    reject(number, "the log ends inside this line (cut short)", text[-80:])
                    continue
                for kind in malformed:
                    reject(number, f"a malformed {kind} line: the {profile.name} pattern does not match it", text[:200])
                try:
                    numbers = {kind: _numbers(groups) for kind, groups in kinds}
                    stamp_text = read.time_text
                    time_us = None if stamp_text is None else _stamp(profile, stamp_text)
                except Unmappable as exc:
                    reject(number, exc.reason, exc.detail)
                    continue
                precision = read.precision
                if numbers or time_us is not None or precision is not None:
                    lines.append(LogLine(path.name, number, time_us, numbers, precision))
        except UnicodeDecodeError as exc:
            raise SourceError(path, None, f"not UTF-8 text at byte {exc.start}") from exc
    return lines


def _attempts(files: list[list[LogLine]]) -> list[Attempt]:
    """Each file's lines (the files in time order) as attempts: a file begins one, and so does a
    `start` line after training began in it (a launcher that restarts the job into the same log)."""
    attempts = []
    for lines in files:
        attempt = Attempt(lines[0].file)
        attempts.append(attempt)
        trained = False
        for line in lines:
            if "start" in line.kinds and trained:
                attempt, trained = Attempt(line.file), False
                attempts.append(attempt)
            trained = trained or bool(TRAINING_KINDS & set(line.kinds))
            attempt.lines.append(line)
    return attempts


def _elapsed(text: str) -> float:
    """tqdm's elapsed time, `MM:SS` or `H:MM:SS` (hours past 24 as they are), in seconds."""
    parts = [int(part) for part in text.split(":")]
    if len(parts) not in (2, 3) or any(part >= 60 for part in parts[1:]):
        raise Unmappable("a progress bar's elapsed time that is not MM:SS or H:MM:SS", text[:40])
    return float(sum(part * 60**power for power, part in enumerate(reversed(parts))))


def _numbers(groups: dict) -> dict:
    """A line's named groups with its numbers read: steps as whole numbers an Avro long holds,
    times and rates as positive numbers; Unmappable for anything else."""
    numbers = {}
    for name, text in groups.items():
        if text is None or name not in NUMBERS:
            numbers[name] = text
        elif name == "step":
            numbers[name] = int(text)
            if numbers[name] > MAX_STEP:
                raise Unmappable("a step number larger than the contract holds", text[:40])
        elif name == "elapsed":
            numbers[name] = _elapsed(text)
        elif name == "chips":
            numbers[name] = int(text)
            if not 1 <= numbers[name] <= MAX_CHIPS:
                raise Unmappable(f"a world size that is not from 1 to {MAX_CHIPS:,} chips", text[:40])
        else:
            numbers[name] = _positive(text)
    return numbers


def _positive(text: str) -> float:
    """A stated time or rate: a positive number, small enough that its µs fit the contract."""
    value = float(text)
    if not math.isfinite(value) or value <= 0 or value * MICROS >= LATEST_US:
        raise Unmappable("a time or rate that is not a positive number", text[:40])
    return value


def _precision(profile: Profile, attempts: list[Attempt]) -> str | None:
    """The precision the job's log states, the profile's order deciding between several; None if it states none."""
    stated = {line.precision for attempt in attempts for line in attempt.lines if line.precision}
    return next((name for name, _ in profile.precisions if name in stated), None)


def _emit(
    imported: Imported,
    attempts: list[Attempt],
    options: Options,
    identity: _Identity,
    builder: SpanBuilder,
    files: list[str],
    precision: str | None,
) -> None:
    job, chips = identity.job, identity.chips
    emit = JobEmitter(imported, PREFIX, job, options.cluster or CLUSTER, identity.accelerator)
    emit.scheduler(
        "SUBMIT",
        attempts[0].start_us if options.submit_us is None else options.submit_us,
        chips,
        workload="TRAINING",
        framework=builder.profile.name,
    )
    for number, attempt in enumerate(attempts):
        if number:
            emit.scheduler("PREEMPT", attempts[number - 1].last_us, 0)
        emit.scheduler("ALLOCATE", attempt.start_us, chips)
        _emit_attempt(emit, number, attempt, identity, precision)
    last = attempts[-1]
    if last.finished:
        emit.scheduler("FINISH", last.last_us, 0)
    else:
        emit.scheduler("FAIL", last.last_us, 0)
        imported.caveat(
            last.file,
            job,
            "the log stops without its end line: the job is taken as failed at its last time, its unsaved steps lost",
        )
    _job_caveats(imported, job, files[0], attempts, builder, precision, assumed_peak(options, identity.accelerator))


def _emit_attempt(emit: JobEmitter, number: int, attempt: Attempt, identity: _Identity, precision: str | None) -> None:
    """The runtime and profiler events of one attempt, with the caveats on its saves."""
    imported, job = emit.imported, emit.job_id
    confirmed = [save for save in attempt.saves if save.confirmed]
    restores = [restore for restore in attempt.restores if restore.confirmed]
    holes = [(span.start_us, span.end_us) for span in restores + confirmed]
    init_end = attempt.blocks[0].start_us if attempt.blocks else attempt.last_us
    if attempt.resumed_at is not None:  # cut from a running job: no initialisation in what the log shows
        init_end = attempt.start_us
        imported.caveat(
            attempt.file,
            job,
            "the log starts mid-run (no start line before its first iteration "
            "line): that iteration is where it resumed; the steps before it are not counted",
            f"iteration {attempt.resumed_at}",
        )
    for start, end in subtract(attempt.start_us, init_end, holes):
        emit.span("INIT", start, end, attempt=number)
    for restore in restores:
        emit.span("CHECKPOINT_RESTORE", restore.start_us, restore.end_us, restore.step, restore.step, number)
    for save in confirmed:
        emit.span("CHECKPOINT_SAVE", save.start_us, save.end_us, save.step, save.step, number)
        if save.assumed_end:
            until = "the training loop resumed" if save.end_from == "resumed" else "the attempt's last time"
            imported.caveat(
                attempt.file,
                job,
                "checkpoint save of no stated duration (no timer line, no timestamp "
                "at its end): taken to last until the log's next time",
                f"step {save.step}: until {until}, {(save.end_us - save.start_us) / MICROS:.1f} s",
            )
        if save.confirmed_us - save.end_us > SLACK_US:
            imported.caveat(
                attempt.file,
                job,
                "asynchronous save: durable at the end of its blocking part, before the log confirms it (optimistic)",
                f"step {save.step}, {(save.confirmed_us - save.end_us) / MICROS:.1f} s early",
            )
    for save in attempt.saves:
        if not save.confirmed:
            imported.caveat(
                attempt.file,
                job,
                "checkpoint save never confirmed in its attempt: not durable, its time is idle",
                f"step {save.step}",
            )
    for block in attempt.blocks:
        emit.span("STEP", block.start_us, block.end_us, block.first_step, block.last_step, number)
        if block.tflops is not None:
            emit.profile(
                block.start_us,
                block.last_step,
                block.step_s,
                identity.chips,
                block.tflops * 1e12 * block.step_s * identity.working_chips,
                "ANALYTIC",
                precision,
            )


def _job_caveats(
    imported: Imported,
    job: str,
    file: str,
    attempts: list[Attempt],
    builder: SpanBuilder,
    precision: str | None,
    bf16_peak: str,
) -> None:
    """What the job's figures rest on that the log did not state."""
    if not any(block.tflops is not None for attempt in attempts for block in attempt.blocks):
        imported.caveat(file, job, "PG unknown: the log states no TFLOP/s per GPU")
    elif precision is None:
        imported.caveat(file, job, "precision not stated in the log: bf16 assumed", bf16_peak)
    derived = {
        what: sum(not item.stamped for attempt in attempts for item in getattr(attempt, what))
        for what in ("blocks", "saves", "restores")
    }
    if any(derived.values()):
        imported.caveat(
            file,
            job,
            "times derived, not stated: placed from the last timestamp by step times and stated durations",
            f"{derived['blocks']} iteration blocks, {derived['saves']} "
            f"checkpoint saves, {derived['restores']} restores",
        )
    if builder.lag_us > SLACK_US:
        imported.caveat(
            file,
            job,
            "times derived from step times ran ahead of the log's timestamps",
            f"by up to {builder.lag_us / MICROS:.1f} s",
        )
    if builder.clamped_us > SLACK_US:
        imported.caveat(
            file,
            job,
            "iteration blocks cut where steps x step time reach back past the previous event",
            f"{builder.clamped_us / MICROS:.1f} s in all",
        )


def _check(source: Path, options: Options) -> Profile:
    if not options.profile:
        raise UsageError(
            "a log does not say which framework wrote it: pass --profile NAME "
            "(megatron, nemo, nemo1, or one of --profiles FILE)"
        )
    if options.accelerator is not None and options.accelerator not in options.accelerators:
        raise UsageError(f"--accelerator {options.accelerator!r} is not a key of the accelerator catalogue")
    try:
        profiles = load_profiles(options.profiles)
    except ProfileError as exc:  # the file named by --profiles: an argument, not the source
        raise UsageError(f"--profiles {options.profiles}: {exc}" if options.profiles else str(exc)) from exc
    if options.profile not in profiles:
        raise UsageError(f"no log profile {options.profile!r} (known: {', '.join(sorted(profiles))})")
    return profiles[options.profile]


@dataclass(frozen=True)
class _Identity:
    """The job, its accelerator and its chips: from the flags, else from what the log prints."""

    job: str
    accelerator: str
    chips: int
    working_chips: int  # the chips a stated TFLOP/s per GPU is of: the log's world size, else `chips`
    sources: dict  # each of job, accelerator, chips → the flag or the log line it comes from


def _identity(source: Path, lines: list[LogLine], options: Options, imported: Imported) -> _Identity:
    """What the log prints of its job, device and world size, checked against the flags: a flag
    overrides the log (a caveat where they differ), but --chips fewer than the world size the log
    trains on is refused; what neither gives is a UsageError naming the flag."""

    def stated(kind: str, group: str) -> list[tuple]:
        return [(line.kinds[kind][group], f"{line.file} line {line.number}") for line in lines if kind in line.kinds]

    missing, sources, first_file = [], {}, lines[0].file if lines else str(source)
    names = stated("job", "name")
    job = options.job or (names[0][0] if names else None)
    sources["job"] = "--job" if options.job else names[0][1] if names else None
    if job is None:
        missing.append(("its job", "--job ID"))

    sizes = stated("world_size", "chips")
    world, world_at = max(sizes, default=(None, None))
    if len({size for size, _ in sizes}) > 1:
        imported.caveat(
            first_file,
            job or UNNAMED,
            "the log prints several world sizes: the largest is taken as the job's chips",
            ", ".join(f"{size} ({where})" for size, where in sizes),
        )
    chips = options.chips or world
    sources["chips"] = "--chips" if options.chips else world_at
    if chips is None:
        missing.append(("its world size", "--chips N"))
    elif world is not None and chips < world:
        raise UsageError(
            f"--chips {chips} is fewer than the world size the log prints ({world}, {world_at}): a job "
            "holds at least the chips it trains on; leave --chips out to take the log's"
        )
    elif world is not None and chips > world:
        imported.caveat(
            first_file,
            job or UNNAMED,
            "--chips is more than the log's world size: the chips it does not "
            "train on count as held, none of their time productive",
            f"--chips {chips}, world size {world} ({world_at})",
        )

    devices = stated("accelerator", "name")
    keys = {name: part_key(options.part_names, name) for name, _ in devices}
    if options.accelerator:
        accelerator, sources["accelerator"] = options.accelerator, "--accelerator"
        other = sorted(
            f"{name!r} ({key or 'not in the catalogue'})" for name, key in keys.items() if key != accelerator
        )
        if other:
            imported.caveat(
                first_file,
                job or UNNAMED,
                "--accelerator differs from the device the log names: the flag's key is used",
                f"--accelerator {accelerator}; the log: {', '.join(other)}",
            )
    elif devices and len(set(keys.values())) == 1 and None not in keys.values():
        accelerator, sources["accelerator"] = next(iter(keys.values())), devices[0][1]
    else:
        accelerator = None
        missing.append(
            (
                f"a device of the catalogue (it names {', '.join(map(repr, sorted(keys)))})"
                if keys
                else "its accelerator",
                "--accelerator KEY",
            )
        )
    if missing:
        raise UsageError(
            f"{source}: the log does not say "
            + ", nor ".join(what for what, _ in missing)
            + ": pass "
            + " ".join(flag for _, flag in missing)
        )
    return _Identity(job, accelerator, chips, world or chips, sources)


def read(sources: list[Path] | Path, options: Options) -> Imported:
    sources = sources if isinstance(sources, list) else [sources]
    source = Path(" ".join(str(s) for s in sources))  # how errors name SOURCE...
    profile = _check(source, options)
    paths = _paths(sources)
    imported = Imported(NAME)
    imported.provenance = {
        "source": f"{profile.name} logs: {profile.description}",
        **PROVENANCE,
        "profile": profile.name,
        "inputs": [file_digest(p) for p in paths],
    }
    placed = []
    for path in paths:
        lines = _read_lines(path, profile, imported, UNNAMED, options.max_expanded_bytes)
        stamps = [line.time_us for line in lines if line.time_us is not None]
        if not any("iteration" in line.kinds for line in lines):
            imported.reject(path.name, "file", UNNAMED, f"no iteration line of the {profile.name} profile")
        elif stamps:
            placed.append((stamps[0], path.name, lines))
        elif options.submit_us is not None and len(paths) == 1:
            placed.append((options.submit_us, path.name, lines))
        else:
            imported.reject(
                path.name,
                "file",
                UNNAMED,
                "no timestamp: the log cannot be placed in time (--submit TIME places a single log without timestamps)",
            )
    if not placed:
        reasons = "; ".join(sorted({f"{r.file}: {r.reason}" for r in imported.rejections if r.where == "file"}))
        raise SourceError(
            source, None, f"nothing to import with the {profile.name} profile: " + (reasons or "no log file")
        )
    placed.sort(key=lambda item: (item[0], item[1]))
    _drop_overlapping(imported, placed, UNNAMED)
    identity = _identity(source, [line for _, _, lines in placed for line in lines], options, imported)
    imported.provenance.update(
        job=identity.job, accelerator=identity.accelerator, chips=identity.chips, read_from=identity.sources
    )
    # What was rejected or caveated before the job was known names it now.
    imported.rejections = [replace(r, item=identity.job) if r.item == UNNAMED else r for r in imported.rejections]
    imported.caveats = [replace(c, item=identity.job) if c.item == UNNAMED else c for c in imported.caveats]
    builder = SpanBuilder(imported, profile, identity.job)
    attempts = _attempts([lines for _, _, lines in placed])
    floor = None
    for attempt in attempts:
        attempt.start_us = builder.start_of(attempt, floor, placed[0][0] if floor is None else floor)
        builder.build(attempt)
        floor = attempt.last_us
    if options.submit_us is not None and options.submit_us > attempts[0].start_us:
        raise SourceError(source, None, "--submit is after the log's first time: the job ran before it was submitted")
    if not any(attempt.blocks for attempt in attempts):
        raise SourceError(
            source, None, f"no iteration of the {profile.name} profile could be placed: nothing to import"
        )
    precision = _precision(profile, attempts)
    imported.provenance["precision"] = precision or "not stated: bf16 assumed"
    _emit(imported, attempts, options, identity, builder, [name for _, name, _ in placed], precision)
    return imported


def _drop_overlapping(imported: Imported, placed: list, job: str) -> None:
    """A file that starts before the one before it ends is another rank's (or a copy): rejected whole."""
    kept, last_us = [], None
    for first_us, name, lines in placed:
        if last_us is not None and first_us < last_us:
            imported.reject(
                name,
                "file",
                job,
                "overlaps the log before it in time: several ranks' logs, or a copy? "
                "give the log of one rank (Megatron prints iterations on the last rank)",
            )
            continue
        kept.append((first_us, name, lines))
        last_us = (
            max(line.time_us for line in lines if line.time_us is not None)
            if any(line.time_us is not None for line in lines)
            else first_us
        )
    placed[:] = kept
