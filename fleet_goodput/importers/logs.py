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
from dataclasses import dataclass, field, replace
from pathlib import Path

from fleet_goodput.core.config import part_key
from fleet_goodput.importers.common import (
    LATEST_US, MAX_CHIPS, MICROS, Imported, JobEmitter, Options, SourceError, Unmappable, UsageError, assumed_peak,
    bounded_lines, event_time_us, file_digest, subtract, too_long, utc_us,
)
from fleet_goodput.importers.log_profiles import Profile, ProfileError, load_profiles

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
# How a save or restore whose end the log states neither by a timestamp nor by a duration is ended:
# at the start of the next iteration block (the loop resumed), else at the attempt's last time.
ASSUMED_ENDS = ("resumed", "last known time")
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


@dataclass
class _Line:
    file: str
    number: int
    time_us: int | None
    kinds: dict[str, dict]
    precision: str | None = None


@dataclass
class _Span:
    """A checkpoint save or restore. Its start is a timestamp of the log or the last known time;
    its end a timestamp, the start plus a stated duration, or the last known time (`end_from`)."""

    step: int
    start_us: int
    start_stamped: bool
    end_us: int | None = None
    end_from: str | None = None  # "timestamp", "duration", or (`ASSUMED_ENDS`) "resumed" or "last known time"
    confirmed: bool = False
    confirmed_us: int | None = None
    done_line: bool = False  # a save_done line: durable where it ends, unless a save_end shows it asynchronous

    @classmethod
    def opened(cls, step: int, line: _Line, now_us: int) -> _Span:
        """Begun at `line`: at its timestamp, never before the last known time (time only goes forward)."""
        return cls(step, now_us if line.time_us is None else max(line.time_us, now_us), line.time_us is not None)

    def ended(self, line: _Line, now_us: int) -> None:
        """An end line: its timestamp, else the last known time unless a better end is known."""
        if line.time_us is not None:
            self.end_us, self.end_from = max(line.time_us, self.start_us), "timestamp"
        elif self.end_from is None:
            self.end_us, self.end_from = max(now_us, self.start_us), "last known time"

    def lasted(self, ms: float) -> None:
        """A stated duration: better than the last known time, not than a timestamp."""
        if self.end_from != "timestamp":
            self.end_us, self.end_from = self.start_us + round(ms * 1000), "duration"

    def close(self, now_us: int, end_from: str = "last known time") -> None:
        """No end stated: the span ends at `now_us`, the next time the log gives after it (where the
        training loop resumed, or the attempt's last time), never before it began."""
        if self.end_from is None:
            self.end_us, self.end_from = max(now_us, self.start_us), end_from

    @property
    def assumed_end(self) -> bool:
        return self.end_from in ASSUMED_ENDS

    @property
    def stamped(self) -> bool:
        return self.start_stamped and self.end_from == "timestamp"


@dataclass
class _Block:
    first_step: int
    last_step: int
    start_us: int
    end_us: int
    step_s: float
    tflops: float | None
    stamped: bool  # it ends at a timestamp of its own line


@dataclass
class _Attempt:
    file: str
    lines: list[_Line] = field(default_factory=list)
    start_us: int = 0
    last_us: int = 0
    finished: bool = False
    blocks: list[_Block] = field(default_factory=list)
    saves: list[_Span] = field(default_factory=list)
    restores: list[_Span] = field(default_factory=list)
    resumed_at: int | None = None  # the step a log that starts mid-run resumed from (`_resumes_mid_run`)


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
        raise UsageError("two log files of one name: " + ", ".join(
            str(path) for path in paths.values() if names[path.name] > 1) + " (give one, or rename a copy)")
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


def _read_lines(path: Path, profile: Profile, imported: Imported, job: str, limit: int) -> list[_Line]:
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
                    lines.append(_Line(path.name, number, time_us, numbers, precision))
        except UnicodeDecodeError as exc:
            raise SourceError(path, None, f"not UTF-8 text at byte {exc.start}") from exc
    return lines


def _attempts(files: list[list[_Line]]) -> list[_Attempt]:
    """Each file's lines (the files in time order) as attempts: a file begins one, and so does a
    `start` line after training began in it (a launcher that restarts the job into the same log)."""
    attempts = []
    for lines in files:
        attempt = _Attempt(lines[0].file)
        attempts.append(attempt)
        trained = False
        for line in lines:
            if "start" in line.kinds and trained:
                attempt, trained = _Attempt(line.file), False
                attempts.append(attempt)
            trained = trained or bool(TRAINING_KINDS & set(line.kinds))
            attempt.lines.append(line)
    return attempts


class _Clock:
    """The last known time of an attempt: timestamps move it forward, never back; derived times add to it."""

    def __init__(self, start_us: int):
        self.now_us = start_us
        self.lag_us = 0  # the most a timestamp fell behind a derived time

    def observe(self, stamp_us: int | None) -> None:
        """A timestamp of the log."""
        if stamp_us is not None:
            self.lag_us = max(self.lag_us, self.now_us - stamp_us)
            self.advance_to(stamp_us)

    def advance_to(self, time_us: int | None) -> None:
        """A time derived from the log (the end of a save or a restore)."""
        if time_us is not None:
            self.now_us = max(self.now_us, time_us)


class _Builder:
    """Walks one job's attempts line by line into blocks, saves and restores with their times."""

    def __init__(self, imported: Imported, profile: Profile, job: str):
        self.imported, self.profile, self.job = imported, profile, job
        self.lag_us = 0  # the most a timestamp fell behind a time derived from step times
        self.clamped_us = 0  # block time cut where steps x step time reach back past the previous event
        self.previous = profile.first_step - 1  # the step the attempt's next block follows
        self.open_save: _Span | None = None
        self.open_restore: _Span | None = None
        self.bar: _Bar | None = None  # the progress bar of the attempt's current epoch, if its lines are one

    def reject(self, line: _Line, reason: str, detail: str = "") -> None:
        self.imported.reject(line.file, f"line {line.number}", self.job, reason, detail)

    @staticmethod
    def start_of(attempt: _Attempt, floor_us: int | None, fallback_us: int) -> int:
        """The attempt's first timestamp less the startup the log states before it (`fallback_us`
        when it has none), never before the attempt before it ended (`floor_us`)."""
        startup_us, first = 0, None
        for line in attempt.lines:
            if "startup_seconds" in line.kinds:
                startup_us = round(line.kinds["startup_seconds"]["seconds"] * MICROS)
            if line.time_us is not None:
                first = line.time_us
                break
        start = fallback_us if first is None else first - startup_us
        return start if floor_us is None else max(start, floor_us)

    def build(self, attempt: _Attempt) -> None:
        clock = _Clock(attempt.start_us)
        self.previous = self.profile.first_step - 1
        self.open_save = self.open_restore = self.bar = None
        started = False  # a start line or a checkpoint load came before the first iteration line
        for line in attempt.lines:
            started = started or bool({"start", "restore_start", "restore_end"} & set(line.kinds))
            if "iteration" in line.kinds:
                if not started and self._resumes_mid_run(attempt, line):
                    clock.observe(line.time_us)
                    continue
                self._iteration_after_spans(attempt, line, clock)
                continue
            self._restore(attempt, line, clock.now_us)
            self._save(attempt, line, clock.now_us)
            clock.observe(line.time_us)
            attempt.finished = attempt.finished or "end" in line.kinds
        for span in attempt.saves + attempt.restores:
            span.close(clock.now_us)
            clock.advance_to(span.end_us)
        attempt.last_us = clock.now_us
        self.lag_us = max(self.lag_us, clock.lag_us)

    def _resumes_mid_run(self, attempt: _Attempt, line: _Line) -> bool:
        """A log cut from a running job (no start line before its first iteration line, where the
        profile has a start line) takes that line's iteration as the point it resumed from: the line
        reports steps the excerpt does not show, so counting first_step..N would invent them."""
        step = line.kinds["iteration"]["step"]
        if attempt.blocks or attempt.resumed_at is not None or "start" not in self.profile.lines \
                or step <= self.profile.first_step or line.kinds["iteration"].get("elapsed") is not None:
            # (a progress bar's elapsed clock places the steps it counts since its epoch began)
            return False
        attempt.resumed_at = self.previous = step
        return True

    def _bar(self, attempt: _Attempt, line: _Line, groups: dict, clock: _Clock) -> _Block | None:
        """A progress bar's line (tqdm as Lightning draws it, `Epoch 0: 40%|…| 20/50 [09:20<14:00, …]`):
        the steps since its last line, over the time its elapsed clock moved since then."""
        epoch, elapsed_us = groups.get("epoch"), round(groups["elapsed"] * MICROS)
        bar = self.bar
        if bar is None or bar.epoch != epoch:  # a new epoch counts its steps from 1 again
            offset = self.previous - (self.profile.first_step - 1) if bar is not None else 0
            bar = self.bar = _Bar(epoch, clock.now_us, 0, offset)
        step, previous = groups["step"] + bar.offset, self.previous
        if step == previous:  # a refresh of the bar (its postfix changed): no step since its last line
            return None
        if step < previous or elapsed_us < bar.elapsed_us:
            self.reject(line, "progress bar goes back without a restart or checkpoint load: its steps are unknown",
                        f"step {step} after {previous}, elapsed {elapsed_us / MICROS:g} s after "
                        f"{bar.elapsed_us / MICROS:g} s")
            return None
        start_us = max(bar.anchor_us + bar.elapsed_us, clock.now_us)
        end_us = max(bar.anchor_us + elapsed_us, start_us)
        if end_us >= LATEST_US:
            self.reject(line, "iteration block reaches past 2100: its steps or step time are not plausible",
                        f"elapsed {elapsed_us / MICROS:g} s")
            return None
        self.previous, bar.elapsed_us = step, elapsed_us
        clock.advance_to(end_us)
        clock.observe(line.time_us)  # a logger line printed after the bar, on the same line
        block = _Block(previous + 1, step, start_us, end_us, (end_us - start_us) / MICROS / (step - previous),
                       groups.get("tflops"), False)
        attempt.blocks.append(block)
        return block

    def _iteration_after_spans(self, attempt: _Attempt, line: _Line, clock: _Clock) -> None:
        """An iteration line after a save or restore: one that states its end is over before the block
        begins; one that does not ends where the training loop resumed, the block's start (a sync save
        blocks the loop until it is written, and Megatron's step time excludes it)."""
        unended = []
        for span in (self.open_save, self.open_restore):
            if span is not None and span.end_from is None:
                unended.append(span)
            elif span is not None:
                clock.advance_to(span.end_us)
        self.open_save = self.open_restore = None
        block = self._iteration(attempt, line, line.kinds["iteration"], clock)
        for span in unended:
            span.close(clock.now_us if block is None else block.start_us, "resumed")

    def _restore(self, attempt: _Attempt, line: _Line, now_us: int) -> None:
        kinds = line.kinds
        if "restore_start" in kinds or "restore_end" in kinds:
            step = (kinds.get("restore_start") or kinds["restore_end"])["step"]
            if self.open_restore is None or self.open_restore.step != step:
                self.open_restore = _Span.opened(step, line, now_us)
                attempt.restores.append(self.open_restore)
            if "restore_end" in kinds:
                self.open_restore.confirmed = True
                self.open_restore.ended(line, now_us)
                self.previous = step
        if "restore_ms" in kinds and self.open_restore is not None:
            self.open_restore.lasted(kinds["restore_ms"]["ms"])

    def _save(self, attempt: _Attempt, line: _Line, now_us: int) -> None:
        kinds = line.kinds
        if "save_start" in kinds:
            self.open_save = _Span.opened(kinds["save_start"]["step"], line, now_us)
            attempt.saves.append(self.open_save)
        if "save_ms" in kinds and self.open_save is not None:
            self.open_save.lasted(kinds["save_ms"]["ms"])
        if "save_done" in kinds:
            self._save_done(attempt, line, kinds["save_done"], now_us)
        if "save_end" in kinds:
            step = kinds["save_end"]["step"]
            if self.open_save is not None and self.open_save.step == step and self.open_save.done_line:
                # The save just reported done was an asynchronous one's blocking part: durable only once confirmed.
                self.open_save.confirmed, self.open_save.confirmed_us, self.open_save.done_line = False, None, False
            elif self.open_save is None or self.open_save.step != step:
                # No line at its start: the save began where the training loop stopped.
                self.open_save = _Span.opened(step, line, now_us)
                if attempt.blocks:
                    self.open_save.start_us = min(attempt.blocks[-1].end_us, self.open_save.start_us)
                    self.open_save.start_stamped = attempt.blocks[-1].stamped
                attempt.saves.append(self.open_save)
                self.open_save.ended(line, now_us)
            else:
                self.open_save.ended(line, now_us)
        if "save_durable" in kinds:
            self._confirm(attempt, line, kinds["save_durable"]["step"], now_us)

    def _save_done(self, attempt: _Attempt, line: _Line, groups: dict, now_us: int) -> None:
        """A save that ends at this line (or, without its timestamp, at the last known time plus its
        duration), having lasted its stated duration, and is durable there: a synchronous save."""
        duration_us = round(groups["ms"] * 1000) if groups.get("ms") is not None else round(groups["seconds"] * MICROS)
        end_us = now_us + duration_us if line.time_us is None else max(line.time_us, now_us)
        save = self.open_save
        if save is None or save.step != groups["step"] or save.end_from is not None:  # no start line before it
            save = self.open_save = _Span(groups["step"], max(end_us - duration_us, now_us), line.time_us is not None)
            attempt.saves.append(save)
        save.end_us, save.end_from = end_us, "timestamp" if line.time_us is not None else "duration"
        save.confirmed, save.confirmed_us, save.done_line = True, end_us, True

    def _confirm(self, attempt: _Attempt, line: _Line, step: int, now_us: int) -> None:
        for save in reversed(attempt.saves):
            if save.step == step:
                save.confirmed, save.confirmed_us = True, now_us if line.time_us is None else line.time_us
                if save.end_from is None and line.time_us is not None:  # a synchronous save ends here
                    save.ended(line, now_us)
                return
        self.reject(line, "a checkpoint confirmed without its save in this attempt", f"step {step}")

    def _iteration(self, attempt: _Attempt, line: _Line, groups: dict, clock: _Clock) -> _Block | None:
        """The block of steps since the previous iteration line (or restore), ending at this line
        (None: the line is rejected, or a progress bar's refresh)."""
        if groups.get("elapsed") is not None:
            return self._bar(attempt, line, groups, clock)
        step, tflops, previous = groups["step"], groups.get("tflops"), self.previous
        self.previous = step
        step_us = round(groups["ms"] * 1000) if groups.get("ms") is not None else round(groups["seconds"] * MICROS)
        if step <= previous:
            self.reject(line, "iteration does not follow the one before and no restart or checkpoint load "
                        "is logged between them: its first step is unknown", f"step {step} after {previous}")
            return None
        duration_us = (step - previous) * step_us
        if clock.now_us + duration_us >= LATEST_US:
            self.reject(line, "iteration block reaches past 2100: its steps or step time are not plausible",
                        f"{step - previous} steps of {step_us / MICROS:g} s")
            return None
        if line.time_us is None:
            start_us, end_us = clock.now_us, clock.now_us + duration_us
        else:
            floor_us = clock.now_us  # the block began after whatever the log placed before it
            clock.observe(line.time_us)
            end_us = clock.now_us
            start_us = max(end_us - duration_us, floor_us)
            self.clamped_us += start_us - (end_us - duration_us)
        clock.now_us = end_us
        block = _Block(previous + 1, step, start_us, end_us, step_us / MICROS, tflops, line.time_us is not None)
        attempt.blocks.append(block)
        return block


@dataclass
class _Bar:
    """A progress bar's epoch: it began at `anchor_us` (the last known time before its first line),
    and its clock had reached `elapsed_us` at its last line; its count adds to `offset` steps."""

    epoch: str | None
    anchor_us: int
    elapsed_us: int
    offset: int


def _elapsed(text: str) -> float:
    """tqdm's elapsed time, `MM:SS` or `H:MM:SS` (hours past 24 as they are), in seconds."""
    parts = [int(part) for part in text.split(":")]
    if len(parts) not in (2, 3) or any(part >= 60 for part in parts[1:]):
        raise Unmappable("a progress bar's elapsed time that is not MM:SS or H:MM:SS", text[:40])
    return float(sum(part * 60 ** power for power, part in enumerate(reversed(parts))))


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


def _precision(profile: Profile, attempts: list[_Attempt]) -> str | None:
    """The precision the job's log states, the profile's order deciding between several; None if it states none."""
    stated = {line.precision for attempt in attempts for line in attempt.lines if line.precision}
    return next((name for name, _ in profile.precisions if name in stated), None)


def _emit(imported: Imported, attempts: list[_Attempt], options: Options, identity: _Identity, builder: _Builder,
          files: list[str], precision: str | None) -> None:
    job, chips = identity.job, identity.chips
    emit = JobEmitter(imported, PREFIX, job, options.cluster or CLUSTER, identity.accelerator)
    emit.scheduler("SUBMIT", attempts[0].start_us if options.submit_us is None else options.submit_us, chips,
                   workload="TRAINING", framework=builder.profile.name)
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
        imported.caveat(last.file, job, "the log stops without its end line: the job is taken as failed at "
                        "its last time, its unsaved steps lost")
    _job_caveats(imported, job, files[0], attempts, builder, precision, assumed_peak(options, identity.accelerator))


def _emit_attempt(emit: JobEmitter, number: int, attempt: _Attempt, identity: _Identity,
                  precision: str | None) -> None:
    """The runtime and profiler events of one attempt, with the caveats on its saves."""
    imported, job = emit.imported, emit.job_id
    confirmed = [save for save in attempt.saves if save.confirmed]
    restores = [restore for restore in attempt.restores if restore.confirmed]
    holes = [(span.start_us, span.end_us) for span in restores + confirmed]
    init_end = attempt.blocks[0].start_us if attempt.blocks else attempt.last_us
    if attempt.resumed_at is not None:  # cut from a running job: no initialisation in what the log shows
        init_end = attempt.start_us
        imported.caveat(attempt.file, job, "the log starts mid-run (no start line before its first iteration "
                        "line): that iteration is where it resumed; the steps before it are not counted",
                        f"iteration {attempt.resumed_at}")
    for start, end in subtract(attempt.start_us, init_end, holes):
        emit.span("INIT", start, end, attempt=number)
    for restore in restores:
        emit.span("CHECKPOINT_RESTORE", restore.start_us, restore.end_us, restore.step, restore.step, number)
    for save in confirmed:
        emit.span("CHECKPOINT_SAVE", save.start_us, save.end_us, save.step, save.step, number)
        if save.assumed_end:
            until = "the training loop resumed" if save.end_from == "resumed" else "the attempt's last time"
            imported.caveat(attempt.file, job, "checkpoint save of no stated duration (no timer line, no timestamp "
                            "at its end): taken to last until the log's next time", f"step {save.step}: until "
                            f"{until}, {(save.end_us - save.start_us) / MICROS:.1f} s")
        if save.confirmed_us - save.end_us > SLACK_US:
            imported.caveat(attempt.file, job, "asynchronous save: durable at the end of its blocking part, "
                            "before the log confirms it (optimistic)",
                            f"step {save.step}, {(save.confirmed_us - save.end_us) / MICROS:.1f} s early")
    for save in attempt.saves:
        if not save.confirmed:
            imported.caveat(attempt.file, job, "checkpoint save never confirmed in its attempt: not durable, "
                            "its time is idle", f"step {save.step}")
    for block in attempt.blocks:
        emit.span("STEP", block.start_us, block.end_us, block.first_step, block.last_step, number)
        if block.tflops is not None:
            emit.profile(block.start_us, block.last_step, block.step_s, identity.chips,
                         block.tflops * 1e12 * block.step_s * identity.working_chips, "ANALYTIC", precision)


def _job_caveats(imported: Imported, job: str, file: str, attempts: list[_Attempt], builder: _Builder,
                 precision: str | None, bf16_peak: str) -> None:
    """What the job's figures rest on that the log did not state."""
    if not any(block.tflops is not None for attempt in attempts for block in attempt.blocks):
        imported.caveat(file, job, "PG unknown: the log states no TFLOP/s per GPU")
    elif precision is None:
        imported.caveat(file, job, "precision not stated in the log: bf16 assumed", bf16_peak)
    derived = {what: sum(not item.stamped for attempt in attempts for item in getattr(attempt, what))
               for what in ("blocks", "saves", "restores")}
    if any(derived.values()):
        imported.caveat(file, job, "times derived, not stated: placed from the last timestamp by step times "
                        "and stated durations", f"{derived['blocks']} iteration blocks, {derived['saves']} "
                        f"checkpoint saves, {derived['restores']} restores")
    if builder.lag_us > SLACK_US:
        imported.caveat(file, job, "times derived from step times ran ahead of the log's timestamps",
                        f"by up to {builder.lag_us / MICROS:.1f} s")
    if builder.clamped_us > SLACK_US:
        imported.caveat(file, job, "iteration blocks cut where steps x step time reach back past the "
                        "previous event", f"{builder.clamped_us / MICROS:.1f} s in all")


def _check(source: Path, options: Options) -> Profile:
    if not options.profile:
        raise UsageError("a log does not say which framework wrote it: pass --profile NAME "
                         "(megatron, nemo, nemo1, or one of --profiles FILE)")
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


def _identity(source: Path, lines: list[_Line], options: Options, imported: Imported) -> _Identity:
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
        imported.caveat(first_file, job or UNNAMED, "the log prints several world sizes: the largest is taken as the "
                        "job's chips", ", ".join(f"{size} ({where})" for size, where in sizes))
    chips = options.chips or world
    sources["chips"] = "--chips" if options.chips else world_at
    if chips is None:
        missing.append(("its world size", "--chips N"))
    elif world is not None and chips < world:
        raise UsageError(f"--chips {chips} is fewer than the world size the log prints ({world}, {world_at}): a job "
                         "holds at least the chips it trains on; leave --chips out to take the log's")
    elif world is not None and chips > world:
        imported.caveat(first_file, job or UNNAMED, "--chips is more than the log's world size: the chips it does not "
                        "train on count as held, none of their time productive",
                        f"--chips {chips}, world size {world} ({world_at})")

    devices = stated("accelerator", "name")
    keys = {name: part_key(options.part_names, name) for name, _ in devices}
    if options.accelerator:
        accelerator, sources["accelerator"] = options.accelerator, "--accelerator"
        other = sorted(f"{name!r} ({key or 'not in the catalogue'})" for name, key in keys.items()
                       if key != accelerator)
        if other:
            imported.caveat(first_file, job or UNNAMED, "--accelerator differs from the device the log names: the "
                            "flag's key is used", f"--accelerator {accelerator}; the log: {', '.join(other)}")
    elif devices and len(set(keys.values())) == 1 and None not in keys.values():
        accelerator, sources["accelerator"] = next(iter(keys.values())), devices[0][1]
    else:
        accelerator = None
        missing.append((f"a device of the catalogue (it names {', '.join(map(repr, sorted(keys)))})" if keys
                        else "its accelerator", "--accelerator KEY"))
    if missing:
        raise UsageError(f"{source}: the log does not say " + ", nor ".join(what for what, _ in missing)
                         + ": pass " + " ".join(flag for _, flag in missing))
    return _Identity(job, accelerator, chips, world or chips, sources)


def read(sources: list[Path] | Path, options: Options) -> Imported:
    sources = sources if isinstance(sources, list) else [sources]
    source = Path(" ".join(str(s) for s in sources))  # how errors name SOURCE...
    profile = _check(source, options)
    paths = _paths(sources)
    imported = Imported(NAME)
    imported.provenance = {"source": f"{profile.name} logs: {profile.description}", **PROVENANCE,
                           "profile": profile.name, "inputs": [file_digest(p) for p in paths]}
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
            imported.reject(path.name, "file", UNNAMED, "no timestamp: the log cannot be placed in time "
                            "(--submit TIME places a single log without timestamps)")
    if not placed:
        reasons = "; ".join(sorted({f"{r.file}: {r.reason}" for r in imported.rejections if r.where == "file"}))
        raise SourceError(source, None, f"nothing to import with the {profile.name} profile: "
                          + (reasons or "no log file"))
    placed.sort(key=lambda item: (item[0], item[1]))
    _drop_overlapping(imported, placed, UNNAMED)
    identity = _identity(source, [line for _, _, lines in placed for line in lines], options, imported)
    imported.provenance.update(job=identity.job, accelerator=identity.accelerator, chips=identity.chips,
                               read_from=identity.sources)
    # What was rejected or caveated before the job was known names it now.
    imported.rejections = [replace(r, item=identity.job) if r.item == UNNAMED else r for r in imported.rejections]
    imported.caveats = [replace(c, item=identity.job) if c.item == UNNAMED else c for c in imported.caveats]
    builder = _Builder(imported, profile, identity.job)
    attempts = _attempts([lines for _, _, lines in placed])
    floor = None
    for attempt in attempts:
        attempt.start_us = builder.start_of(attempt, floor, placed[0][0] if floor is None else floor)
        builder.build(attempt)
        floor = attempt.last_us
    if options.submit_us is not None and options.submit_us > attempts[0].start_us:
        raise SourceError(source, None, "--submit is after the log's first time: the job ran before it was submitted")
    if not any(attempt.blocks for attempt in attempts):
        raise SourceError(source, None, f"no iteration of the {profile.name} profile could be placed: nothing to import")
    precision = _precision(profile, attempts)
    imported.provenance["precision"] = precision or "not stated: bf16 assumed"
    _emit(imported, attempts, options, identity, builder, [name for _, name, _ in placed], precision)
    return imported


def _drop_overlapping(imported: Imported, placed: list, job: str) -> None:
    """A file that starts before the one before it ends is another rank's (or a copy): rejected whole."""
    kept, last_us = [], None
    for first_us, name, lines in placed:
        if last_us is not None and first_us < last_us:
            imported.reject(name, "file", job, "overlaps the log before it in time: several ranks' logs, or a copy? "
                            "give the log of one rank (Megatron prints iterations on the last rank)")
            continue
        kept.append((first_us, name, lines))
        last_us = max(line.time_us for line in lines if line.time_us is not None) if any(
            line.time_us is not None for line in lines) else first_us
    placed[:] = kept
