"""A training log's attempts, walked line by line into iteration blocks, checkpoint saves and restores.

fleet_goodput/importers/logs.py reads the files into lines (LogLine) and
attempts (Attempt) and turns what SpanBuilder finds into events; here the
times of each block, save and restore are worked out from timestamps, stated
durations and step times, and a clock that only moves forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet_goodput.importers.common import Imported
from fleet_goodput.importers.log_profiles import Profile
from fleet_goodput.importers.reading import LATEST_US, MICROS

# How a save or restore whose end the log states neither by a timestamp nor by a duration is ended:
# at the start of the next iteration block (the loop resumed), else at the attempt's last time.
ASSUMED_ENDS = ("resumed", "last known time")


@dataclass
class LogLine:
    file: str
    number: int
    time_us: int | None
    kinds: dict[str, dict]
    precision: str | None = None


@dataclass
class Span:
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
    def opened(cls, step: int, line: LogLine, now_us: int) -> Span:
        """Begun at `line`: at its timestamp, never before the last known time (time only goes forward)."""
        return cls(step, now_us if line.time_us is None else max(line.time_us, now_us), line.time_us is not None)

    def ended(self, line: LogLine, now_us: int) -> None:
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
class Block:
    first_step: int
    last_step: int
    start_us: int
    end_us: int
    step_s: float
    tflops: float | None
    stamped: bool  # it ends at a timestamp of its own line


@dataclass
class Attempt:
    file: str
    lines: list[LogLine] = field(default_factory=list)
    start_us: int = 0
    last_us: int = 0
    finished: bool = False
    blocks: list[Block] = field(default_factory=list)
    saves: list[Span] = field(default_factory=list)
    restores: list[Span] = field(default_factory=list)
    resumed_at: int | None = None  # the step a log that starts mid-run resumed from (`_resumes_mid_run`)


class Clock:
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


class SpanBuilder:
    """Walks one job's attempts line by line into blocks, saves and restores with their times."""

    def __init__(self, imported: Imported, profile: Profile, job: str):
        self.imported, self.profile, self.job = imported, profile, job
        self.lag_us = 0  # the most a timestamp fell behind a time derived from step times
        self.clamped_us = 0  # block time cut where steps x step time reach back past the previous event
        self.previous = profile.first_step - 1  # the step the attempt's next block follows
        self.open_save: Span | None = None
        self.open_restore: Span | None = None
        self.bar: ProgressBar | None = None  # the progress bar of the attempt's current epoch, if its lines are one

    def reject(self, line: LogLine, reason: str, detail: str = "") -> None:
        self.imported.reject(line.file, f"line {line.number}", self.job, reason, detail)

    @staticmethod
    def start_of(attempt: Attempt, floor_us: int | None, fallback_us: int) -> int:
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

    def build(self, attempt: Attempt) -> None:
        clock = Clock(attempt.start_us)
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

    def _resumes_mid_run(self, attempt: Attempt, line: LogLine) -> bool:
        """A log cut from a running job (no start line before its first iteration line, where the
        profile has a start line) takes that line's iteration as the point it resumed from: the line
        reports steps the excerpt does not show, so counting first_step..N would invent them."""
        step = line.kinds["iteration"]["step"]
        if (
            attempt.blocks
            or attempt.resumed_at is not None
            or "start" not in self.profile.lines
            or step <= self.profile.first_step
            or line.kinds["iteration"].get("elapsed") is not None
        ):
            # (a progress bar's elapsed clock places the steps it counts since its epoch began)
            return False
        attempt.resumed_at = self.previous = step
        return True

    def _bar(self, attempt: Attempt, line: LogLine, groups: dict, clock: Clock) -> Block | None:
        """A progress bar's line (tqdm as Lightning draws it, `Epoch 0: 40%|…| 20/50 [09:20<14:00, …]`):
        the steps since its last line, over the time its elapsed clock moved since then."""
        epoch, elapsed_us = groups.get("epoch"), round(groups["elapsed"] * MICROS)
        bar = self.bar
        if bar is None or bar.epoch != epoch:  # a new epoch counts its steps from 1 again
            offset = self.previous - (self.profile.first_step - 1) if bar is not None else 0
            bar = self.bar = ProgressBar(epoch, clock.now_us, 0, offset)
        step, previous = groups["step"] + bar.offset, self.previous
        if step == previous:  # a refresh of the bar (its postfix changed): no step since its last line
            return None
        if step < previous or elapsed_us < bar.elapsed_us:
            self.reject(
                line,
                "progress bar goes back without a restart or checkpoint load: its steps are unknown",
                f"step {step} after {previous}, elapsed {elapsed_us / MICROS:g} s after {bar.elapsed_us / MICROS:g} s",
            )
            return None
        start_us = max(bar.anchor_us + bar.elapsed_us, clock.now_us)
        end_us = max(bar.anchor_us + elapsed_us, start_us)
        if end_us >= LATEST_US:
            self.reject(
                line,
                "iteration block reaches past 2100: its steps or step time are not plausible",
                f"elapsed {elapsed_us / MICROS:g} s",
            )
            return None
        self.previous, bar.elapsed_us = step, elapsed_us
        clock.advance_to(end_us)
        clock.observe(line.time_us)  # a logger line printed after the bar, on the same line
        block = Block(
            previous + 1,
            step,
            start_us,
            end_us,
            (end_us - start_us) / MICROS / (step - previous),
            groups.get("tflops"),
            False,
        )
        attempt.blocks.append(block)
        return block

    def _iteration_after_spans(self, attempt: Attempt, line: LogLine, clock: Clock) -> None:
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

    def _restore(self, attempt: Attempt, line: LogLine, now_us: int) -> None:
        kinds = line.kinds
        if "restore_start" in kinds or "restore_end" in kinds:
            step = (kinds.get("restore_start") or kinds["restore_end"])["step"]
            if self.open_restore is None or self.open_restore.step != step:
                self.open_restore = Span.opened(step, line, now_us)
                attempt.restores.append(self.open_restore)
            if "restore_end" in kinds:
                self.open_restore.confirmed = True
                self.open_restore.ended(line, now_us)
                self.previous = step
        if "restore_ms" in kinds and self.open_restore is not None:
            self.open_restore.lasted(kinds["restore_ms"]["ms"])

    def _save(self, attempt: Attempt, line: LogLine, now_us: int) -> None:
        kinds = line.kinds
        if "save_start" in kinds:
            self.open_save = Span.opened(kinds["save_start"]["step"], line, now_us)
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
                self.open_save = Span.opened(step, line, now_us)
                if attempt.blocks:
                    self.open_save.start_us = min(attempt.blocks[-1].end_us, self.open_save.start_us)
                    self.open_save.start_stamped = attempt.blocks[-1].stamped
                attempt.saves.append(self.open_save)
                self.open_save.ended(line, now_us)
            else:
                self.open_save.ended(line, now_us)
        if "save_durable" in kinds:
            self._confirm(attempt, line, kinds["save_durable"]["step"], now_us)

    def _save_done(self, attempt: Attempt, line: LogLine, groups: dict, now_us: int) -> None:
        """A save that ends at this line (or, without its timestamp, at the last known time plus its
        duration), having lasted its stated duration, and is durable there: a synchronous save."""
        duration_us = round(groups["ms"] * 1000) if groups.get("ms") is not None else round(groups["seconds"] * MICROS)
        end_us = now_us + duration_us if line.time_us is None else max(line.time_us, now_us)
        save = self.open_save
        if save is None or save.step != groups["step"] or save.end_from is not None:  # no start line before it
            save = self.open_save = Span(groups["step"], max(end_us - duration_us, now_us), line.time_us is not None)
            attempt.saves.append(save)
        save.end_us, save.end_from = end_us, "timestamp" if line.time_us is not None else "duration"
        save.confirmed, save.confirmed_us, save.done_line = True, end_us, True

    def _confirm(self, attempt: Attempt, line: LogLine, step: int, now_us: int) -> None:
        for save in reversed(attempt.saves):
            if save.step == step:
                save.confirmed, save.confirmed_us = True, now_us if line.time_us is None else line.time_us
                if save.end_from is None and line.time_us is not None:  # a synchronous save ends here
                    save.ended(line, now_us)
                return
        self.reject(line, "a checkpoint confirmed without its save in this attempt", f"step {step}")

    def _iteration(self, attempt: Attempt, line: LogLine, groups: dict, clock: Clock) -> Block | None:
        """The block of steps since the previous iteration line (or restore), ending at this line
        (None: the line is rejected, or a progress bar's refresh)."""
        if groups.get("elapsed") is not None:
            return self._bar(attempt, line, groups, clock)
        step, tflops, previous = groups["step"], groups.get("tflops"), self.previous
        self.previous = step
        step_us = round(groups["ms"] * 1000) if groups.get("ms") is not None else round(groups["seconds"] * MICROS)
        if step <= previous:
            self.reject(
                line,
                "iteration does not follow the one before and no restart or checkpoint load "
                "is logged between them: its first step is unknown",
                f"step {step} after {previous}",
            )
            return None
        duration_us = (step - previous) * step_us
        if clock.now_us + duration_us >= LATEST_US:
            self.reject(
                line,
                "iteration block reaches past 2100: its steps or step time are not plausible",
                f"{step - previous} steps of {step_us / MICROS:g} s",
            )
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
        block = Block(previous + 1, step, start_us, end_us, step_us / MICROS, tflops, line.time_us is not None)
        attempt.blocks.append(block)
        return block


@dataclass
class ProgressBar:
    """A progress bar's epoch: it began at `anchor_us` (the last known time before its first line),
    and its clock had reached `elapsed_us` at its last line; its count adds to `offset` steps."""

    epoch: str | None
    anchor_us: int
    elapsed_us: int
    offset: int
