"""A job's step time until it is known what it was worth (docs/metric.md section 3).

Step time is attributed as it runs (fleet_goodput/core/timeline.py), but whether it is progress is
known only later: a checkpoint saving its steps makes it productive, a disruption first makes it
lost. `StepLedger` keeps the job's step spans until then, moves their time to the category they
resolve to, and values productive step time in ideal chip-seconds once a profiler sample says what a
step is worth.

Progress is counted once: a step already preserved is never productive again.
For every workload but SERVING (whose steps are requests, numbered afresh by a
restarted server, not work that can be redone):

- The preserved step is the highest step made durable by a
  CHECKPOINT_SAVE_END or ending a productive step span.
- A step span whose last step (its first, when its end is unknown) is at or
  below the step preserved when it started only redoes preserved work: where
  it would become productive, it is `lost`. A span reaching past it is
  productive, and its ideal counts only its steps past the highest step
  already counted productive, so no step's ideal is counted twice.
- Steps that go back are an implicit restore: a STEP_START below the step
  the runtime last reported (the last step of the span before, the first of
  one left open, or the step a CHECKPOINT_RESTORE_END resumed from), or at
  the first step of a span it left open (it restarted that step). The runtime
  restarted without restoring, so every step span not yet preserved is
  `lost`, as on a disruption. A STEP_START at the step that the span before
  ENDed at continues that step (an emitter may split a step around a pause).

A STEP_RUN's step spans (fleet_goodput/core/step_runs.py) are kept as one `StepRun` until they
resolve, and resolve as its spans would one by one, each `StepSpan` in turn.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from fleet_goodput.core import step_runs
from fleet_goodput.core.config import peak_of
from fleet_goodput.core.events import Sample, Submit
from fleet_goodput.core.figure_vector import FIGURES, IDEAL
from fleet_goodput.core.windows import add_by_window, add_over_windows, split_at_windows

_INDEX = {name: i for i, name in enumerate(FIGURES)}
# Productive spans valued together at most (`_valued_spans`). Their values go through Python lists, about
# 150 bytes a span: one job's 1.5M spans valued at once took 250 MiB (a job of 3M runtime events, one
# run); in groups of this many, a few MiB, for the same handful of numpy calls a group.
VALUED_AT_ONCE = 65_536
_PENDING, _PROFILED_PRODUCTIVE = _INDEX["pending"], _INDEX["profiled_productive"]


@dataclass
class StepSpan:
    """A STEP_START..STEP_END span: its step range and the pieces of step time it got."""

    start_us: int
    first_step: int | None
    last_step: int | None = None
    closed: bool = False
    pieces: list = field(default_factory=list)  # [start_us, end_us, reported_as_pending]
    total_us: int = 0  # every piece it ever had, resolved or not: the base for sharing its ideal
    preserved_before: int | None = None  # the job's preserved step when the span started
    new_from_step: int | None = None  # when productive: the first step no productive span counted before

    @property
    def steps(self) -> int | None:
        """The steps its ideal counts: its own from `new_from_step` on (None: unknown)."""
        if self.first_step is None or self.last_step is None or self.last_step < self.first_step:
            return None
        first = self.first_step if self.new_from_step is None else max(self.first_step, self.new_from_step)
        return max(0, self.last_step - first + 1)


@dataclass
class StepRun:
    """Closed step spans applied at once (fleet_goodput/core/step_runs.py): span i ran [starts[i],
    ends[i]) from step first[i] to last[i] as one piece, all started with the same preserved step,
    and their steps never go back. Resolving one resolves each of its spans as `StepSpan`s would
    be, cut where they would be resolved differently."""

    starts: np.ndarray
    ends: np.ndarray
    first: np.ndarray
    last: np.ndarray
    preserved_before: int | None
    reported_pending: bool = False
    resolved: bool = False
    steps: np.ndarray | None = None  # when productive: the steps each span's ideal counts
    # Python ints of what resolving it reads most (`RunFacts`), so that resolving a run whole costs
    # no numpy call. Never pickled, so a key's saved state keeps its layout: found again when asked.
    _facts: step_runs.RunFacts | None = field(default=None, repr=False, compare=False)

    def facts(self) -> step_runs.RunFacts:
        if self._facts is None:
            self._facts = step_runs.run_facts(self.starts, self.ends, self.first, self.last)
        return self._facts

    def __getstate__(self) -> dict:
        return {name: value for name, value in self.__dict__.items() if name != "_facts"}

    @property
    def start_us(self) -> int:
        return self.facts().start_us

    @property
    def end_us(self) -> int:
        return self.facts().end_us

    @property
    def pieces(self) -> list:
        """Its spans' pieces, as `StepSpan.pieces` (none once resolved)."""
        if self.resolved:
            return []
        return [[start, end, self.reported_pending] for start, end in zip(self.starts.tolist(), self.ends.tolist())]

    def add_to(self, deltas: dict, index: int, chips: int, window_us: int) -> None:
        """Add `chips` × each span's time to figure `index` of the windows it ran in."""
        facts = self.facts()
        window = facts.start_us - facts.start_us % window_us
        if facts.end_us <= window + window_us:  # all in one window
            deltas[window][index] += chips * facts.span_us
            return
        add_by_window(deltas, index, chips, self.starts, self.ends, window_us)

    def split(self, count: int) -> tuple[StepRun | None, StepRun | None]:
        """Its first `count` spans and the rest (None where there are none)."""
        if count <= 0:
            return None, self
        if count >= len(self.first):
            return self, None

        def part(first, stop):
            if stop <= first:
                return None
            return StepRun(
                self.starts[first:stop],
                self.ends[first:stop],
                self.first[first:stop],
                self.last[first:stop],
                self.preserved_before,
                self.reported_pending,
            )

        return part(0, count), part(count, len(self.first))

    def spans_up_to(self, step: int | None) -> int:
        """How many of its spans (a prefix: last steps never go back) end at or below `step`."""
        if step is None:
            return 0
        facts = self.facts()
        if step >= facts.last_step:
            return len(self.last)
        if step < facts.first_end_step:
            return 0
        return int(self.last.searchsorted(step, side="right"))


def _highest(step: int | None, other: int | None) -> int | None:
    return step if other is None else other if step is None else max(step, other)


class StepLedger:
    """One job's step spans from their start until they resolve, and what resolving them counted.

    It owns the step span open (`open_step`) and the closed ones awaiting a checkpoint or a
    disruption (`unresolved`); the steps that decide what they resolve to: the highest made durable
    by a checkpoint (`durable_step`), the highest counted productive (`counted_step`), and the step
    the runtime last reported being at (`reported_step`); and the productive step time awaiting its
    ideal chip-seconds (`productive`, valued at the timeline's flush). Resolving a span moves its
    time from pending (where it was reported so) to its category in `deltas`, the timeline's
    per-window figures, which it shares. Its job's `submit` says its chips and workload.
    """

    def __init__(self, window_us: int, peak_flops: dict[str, float], deltas: dict[int, list]):
        self.window_us = window_us
        self.peak_flops = peak_flops
        self.deltas = deltas
        self.submit: Submit | None = None
        self.open_step: StepSpan | None = None
        self.unresolved: list[StepSpan | StepRun] = []
        self.durable_step: int | None = None
        self.counted_step: int | None = None
        self.reported_step: int | None = None
        self.productive: list[tuple[int, int, StepSpan | StepRun]] = []  # (start, end, span): awaiting ideal

    # ---- its saved state ----------------------------------------------------
    # A JobTimeline saves it among its own attributes, under the names they had when they were the
    # timeline's: the layout of a key's saved state (fleet_goodput/core/session.py) stays as it was.
    def saved(self) -> dict:
        return {
            "open_step": self.open_step,
            "unresolved": self.unresolved,
            "durable_step": self.durable_step,
            "counted_step": self.counted_step,
            "reported_step": self.reported_step,
            "_productive": self.productive,
        }

    def restore(self, state: dict) -> None:
        """Take back what `saved` gave out of a timeline's saved `state` (they leave it)."""
        self.open_step = state.pop("open_step")
        self.unresolved = state.pop("unresolved")
        self.durable_step = state.pop("durable_step")
        self.counted_step = state.pop("counted_step")
        self.reported_step = state.pop("reported_step")
        self.productive = state.pop("_productive")
        self.submit = state["submit"]

    # ---- spans opening and closing -------------------------------------------
    def awaiting(self) -> list[StepSpan | StepRun]:
        """The spans not resolved yet: the closed ones, then the one open."""
        return self.unresolved + ([self.open_step] if self.open_step is not None else [])

    def preserved_step(self) -> int | None:
        return _highest(self.durable_step, self.counted_step)

    def open(self, time_us: int, first_step: int | None, left_open: bool) -> bool:
        """Open a step span at `first_step`, the runtime's STEP_START; True where its steps went back
        (an implicit restore, module docstring): every span not yet preserved is then lost."""
        reported = self.reported_step
        went_back = (
            first_step is not None
            and reported is not None
            and self._redone_steps_are_not_progress()
            and (first_step < reported or (first_step == reported and left_open))
        )
        if went_back:
            self.resolve_all("lost")
        if first_step is not None:
            self.reported_step = first_step
        self.open_step = StepSpan(start_us=time_us, first_step=first_step, preserved_before=self.preserved_step())
        return went_back

    def implausible_end(self, last_step: int | None, time_us: int) -> str | None:
        """Why a STEP_END at `last_step` cannot end the open span (None: it can)."""
        span = self.open_step
        if last_step is None or span.first_step is None:
            return None
        if last_step < span.first_step:
            return (
                f"STEP_END at step {last_step} is before its STEP_START's step {span.first_step}: "
                "step numbers going backwards"
            )
        steps, duration_us = last_step - span.first_step + 1, time_us - span.start_us
        # A span of no length takes no time, so its steps claim no rate: a block of steps a log stamps
        # with one time (coarse timestamps, a block cut to zero length) is a span of no length.
        if duration_us > 0 and steps > duration_us:
            return (
                f"STEP_END claims {steps} steps in {duration_us} µs: "
                "more than one step per microsecond is not plausible"
            )
        return None

    def close(self, last_step: int | None) -> None:
        """Close the open span at `last_step` (None: unknown, its end not seen)."""
        span, self.open_step = self.open_step, None
        span.last_step = last_step
        span.closed = True
        if last_step is not None:
            self.reported_step = last_step
        self._await(span)

    def add_run(self, shape: step_runs.RunShape) -> None:
        """A STEP_RUN's step spans, closed at once (`shape`, as `step_runs.shapes` found it)."""
        self.reported_step = shape.facts.last_step
        self._await(
            StepRun(shape.starts, shape.ends, shape.firsts, shape.lasts, self.preserved_step(), _facts=shape.facts)
        )

    def _await(self, span: StepSpan | StepRun) -> None:
        if self.submit.workload in ("SERVING", "BULK_INFERENCE"):
            self._resolve(span, "productive")  # a served request is progress once answered
        else:
            self.unresolved.append(span)

    # ---- resolving step time ---------------------------------------------
    def resolve_all(self, category: str) -> None:
        """Every span not resolved yet is `category` (a disruption: lost; the job finishing: productive)."""
        for span in self.unresolved:
            self._resolve(span, category)
        self.unresolved = []
        if self.open_step is not None:
            self._resolve(self.open_step, category)

    def made_durable(self, durable_step: int | None) -> None:
        """A checkpoint made `durable_step` durable (None: unknown, all): spans up to it are preserved."""
        still = []
        for span in self.unresolved:
            if isinstance(span, StepRun):
                durable, rest = span.split(len(span.last) if durable_step is None else span.spans_up_to(durable_step))
                self._resolve(durable, "productive")
                still += [rest] if rest else []
            elif durable_step is None or (span.last_step is not None and span.last_step <= durable_step):
                self._resolve(span, "productive")
            else:
                still.append(span)
        self.unresolved = still
        if durable_step is not None:
            self.durable_step = _highest(self.durable_step, durable_step)

    def restored(self, restored_step: int) -> None:
        """The runtime resumed from `restored_step`, which throws away every step after it."""
        for span in self.unresolved:
            if isinstance(span, StepRun):
                covered, rest = span.split(span.spans_up_to(restored_step))
                self._resolve(covered, "productive")
                self._resolve(rest, "lost")
                continue
            covered = span.last_step is not None and span.last_step <= restored_step
            self._resolve(span, "productive" if covered else "lost")
        self.unresolved = []
        self.reported_step = restored_step

    def _redone_steps_are_not_progress(self) -> bool:
        return self.submit.workload != "SERVING"

    def _resolve(self, span: StepSpan | StepRun | None, category: str) -> None:
        if span is None:
            return
        if isinstance(span, StepRun):
            self._resolve_run(span, category)
            return
        if category == "productive" and span.pieces and self._redone_steps_are_not_progress():
            category = self._count_new_progress(span)
        chips, window_us, deltas = self.submit.chips, self.window_us, self.deltas
        index = _INDEX[category]
        for start_us, end_us, reported_pending in span.pieces:
            if reported_pending:
                add_over_windows(deltas, start_us, end_us, window_us, ((_PENDING, -chips),))
            add_over_windows(deltas, start_us, end_us, window_us, ((index, chips),))
            if category == "productive":
                self.productive.append((start_us, end_us, span))
        span.pieces = []

    def _resolve_run(self, run: StepRun, category: str) -> None:
        """`_resolve` of each of the run's spans in turn, at once: the spans that only redid
        preserved steps are lost; each other span's ideal counts its steps past the highest
        step counted productive before it (`_count_new_progress`)."""
        if category != "productive" or not self._redone_steps_are_not_progress():
            if category == "productive":  # serving: each span's ideal counts its own steps
                run.steps = run.last - run.first + 1
            self._add_run(run, category)
            return
        if self.submit.workload != "BULK_INFERENCE":  # resolved after all its spans: one preserved step
            lost, run = run.split(run.spans_up_to(run.preserved_before))
            self._add_run(lost, "lost")
            self._add_run(self._counted(run), "productive")
            return
        # Resolved as each span ends: a span is judged against the steps the spans before it counted,
        # so a span ending at the step the one before it ended at only redid it.
        while run is not None:
            lost, run = run.split(run.spans_up_to(self.preserved_step()))
            self._add_run(lost, "lost")
            if run is None:
                return
            repeats = (run.last[1:] == run.last[:-1]).nonzero()[0]
            counted, run = run.split(int(repeats[0]) + 1) if len(repeats) else (run, None)
            self._add_run(self._counted(counted), "productive")

    def _counted(self, run: StepRun | None) -> StepRun | None:
        """`run`, all of whose spans reach past the preserved step, counted as progress in turn."""
        if run is None:
            return None
        counted, facts = self.counted_step, run.facts()
        if facts.own_steps and (counted is None or counted < facts.first_step):  # no span's steps counted before
            run.steps = run.last - run.first + 1
            self.counted_step = _highest(counted, facts.last_step)
        else:
            # The highest step counted before each span (-1: none; steps are never negative).
            highest_before = np.maximum.accumulate(
                np.concatenate(([-1 if counted is None else counted], run.last[:-1]))
            )
            run.steps = np.maximum(0, run.last - np.maximum(run.first, highest_before + 1) + 1)
            self.counted_step = _highest(counted, int(run.last[-1]))
        return run

    def _add_run(self, run: StepRun | None, category: str) -> None:
        """Move a run's step time to `category` (from pending, where it was reported so)."""
        if run is None:
            return
        chips = self.submit.chips
        if run.reported_pending:
            run.add_to(self.deltas, _PENDING, -chips, self.window_us)
        run.add_to(self.deltas, _INDEX[category], chips, self.window_us)
        if category == "productive":
            self.productive.append((run.start_us, run.end_us, run))
        run.resolved = True

    def _count_new_progress(self, span: StepSpan) -> str:
        """`lost` for a span that only redid steps preserved when it started; else
        `productive`, its ideal counting the steps no productive span counted before."""
        reached = span.last_step if span.last_step is not None else span.first_step
        if span.preserved_before is not None and reached is not None and reached <= span.preserved_before:
            return "lost"
        if self.counted_step is not None:
            span.new_from_step = self.counted_step + 1
        if span.last_step is not None:
            self.counted_step = _highest(self.counted_step, span.last_step)
        return "productive"

    # ---- reporting what is still unresolved ------------------------------
    def report_pending(self) -> None:
        """Report the step time not resolved yet as pending, once (moved when it resolves)."""
        chips, window_us, deltas = (self.submit.chips if self.submit else 0), self.window_us, self.deltas
        for span in self.awaiting():
            if isinstance(span, StepRun):
                if not span.reported_pending:
                    span.add_to(deltas, _PENDING, chips, window_us)
                    span.reported_pending = True
                continue
            for piece in span.pieces:
                if not piece[2]:
                    add_over_windows(deltas, piece[0], piece[1], window_us, ((_PENDING, chips),))
                    piece[2] = True

    def pending_chip_us(self) -> int:
        """Step chip-time not yet preserved: what a disruption now turns lost."""
        return self.submit.chips * sum(end - start for span in self.awaiting() for start, end, _ in span.pieces)

    # ---- valuing productive step time --------------------------------------
    def value_productive(self, samples: list[Sample], sample_times: list[int]) -> None:
        """Add the ideal chip-seconds of the productive step time since the last time, by the job's
        profiler `samples` (at `sample_times`; none: it keeps no ideal), to its windows."""
        productive = self.productive
        runs = [span for _, _, span in productive if isinstance(span, StepRun)]
        valued = self._valued_spans(runs, samples, sample_times) if runs and samples else iter(())
        for start_us, end_us, span in productive:
            if not isinstance(span, StepRun):
                self._add_productive_ideal(start_us, end_us, span, samples, sample_times)
            elif samples:  # without a sample (closed), nothing to value it by
                last = False
                while not last:  # the run's spans, a piece at a time, in order
                    last, piece = next(valued)
                    self._add_run_ideal(*piece)
        self.productive = []

    def _add_productive_ideal(
        self, start_us: int, end_us: int, span: StepSpan, samples: list[Sample], sample_times: list[int]
    ) -> None:
        ideal_chip_s = self._span_ideal_chip_s(span, samples, sample_times)
        if ideal_chip_s is None or span.total_us == 0:
            return
        chips = self.submit.chips
        for window_start, piece_start, piece_end in split_at_windows(start_us, end_us, self.window_us):
            vector = self.deltas[window_start]
            share = (piece_end - piece_start) / span.total_us
            vector[IDEAL] += ideal_chip_s * share
            vector[_PROFILED_PRODUCTIVE] += chips * (piece_end - piece_start)

    def _valued_spans(self, runs: list[StepRun], samples: list[Sample], sample_times: list[int]):
        """Each run's spans in turn, in pieces of at most `VALUED_AT_ONCE` spans: (whether it is the
        run's last piece, its spans' ideal chip-seconds, starts, ends and whether their peak is known,
        whether all of them are, and their time). Valued a group of pieces at once (a handful of numpy
        calls a group, not a dozen a run), span by span as `_span_ideal_chip_s` values a span. A run
        valued in pieces adds the same values in the same order as whole (`_add_run_ideal`)."""
        peaks = [peak_of(self.peak_flops, self.submit.accelerator, sample.precision) for sample in samples]
        sample_facts = (
            np.array(sample_times, dtype=np.int64),
            np.array([sample.ideal_flops for sample in samples]),
            np.array([peak is not None for peak in peaks]),
            np.array([peak or 1.0 for peak in peaks]),
        )
        group, size = [], 0
        for run in runs:
            count = len(run.starts)
            for first in range(0, count, VALUED_AT_ONCE):
                stop = min(count, first + VALUED_AT_ONCE)
                group.append((run, first, stop, stop == count))
                size += stop - first
                if size >= VALUED_AT_ONCE:
                    yield from _valued_group(group, *sample_facts)
                    group, size = [], 0
        yield from _valued_group(group, *sample_facts)

    def _add_run_ideal(
        self, ideals: list, starts: list, ends: list, known: list, all_known: bool, span_us: int
    ) -> None:
        """`_add_productive_ideal` of each of a run's spans in turn (`_valued_spans`): the same
        products, added to each window's ideal in the same order (a float sum depends on its order)."""
        chips, window_us, deltas = self.submit.chips, self.window_us, self.deltas
        run_start = starts[0]
        window = run_start - run_start % window_us
        if ends[-1] <= window + window_us and all_known:  # the common case: all in one window
            vector = deltas[window]
            ideal = vector[IDEAL]
            for span_ideal in ideals:
                ideal += span_ideal
            vector[IDEAL] = ideal
            vector[_PROFILED_PRODUCTIVE] += chips * span_us
            return
        for span_ideal, start_us, end_us, span_known in zip(ideals, starts, ends, known):
            if not span_known:
                continue
            window = start_us - start_us % window_us
            if end_us <= window + window_us:  # its share is 1: its ideal, as is
                vector = deltas[window]
                vector[IDEAL] += span_ideal
                vector[_PROFILED_PRODUCTIVE] += chips * (end_us - start_us)
                continue
            for window_start, piece_start, piece_end in split_at_windows(start_us, end_us, window_us):
                vector = deltas[window_start]
                vector[IDEAL] += span_ideal * ((piece_end - piece_start) / (end_us - start_us))
                vector[_PROFILED_PRODUCTIVE] += chips * (piece_end - piece_start)

    def _span_ideal_chip_s(self, span: StepSpan, samples: list[Sample], sample_times: list[int]) -> float | None:
        """Steps × ideal FLOPs per step ÷ peak FLOP/s per chip in the sample's
        precision, from the latest sample at or before the span (the first
        sample for spans before it); None (unknown) when the catalogue has no
        peak for that precision on this accelerator."""
        if not samples or span.steps is None:
            return None
        position = bisect_right(sample_times, span.start_us)
        sample = samples[position - 1] if position else samples[0]
        peak = peak_of(self.peak_flops, self.submit.accelerator, sample.precision)
        return None if peak is None else span.steps * sample.ideal_flops / peak


def _valued_group(pieces: list[tuple], sample_times, ideal_flops, known_peaks, peaks):
    """`StepLedger._valued_spans` of `pieces` ((run, first span, stop, whether it ends the run)),
    by the samples' times, ideal FLOPs, whether their peak is known and their peaks (1 where not)."""
    if not pieces:
        return
    starts = np.concatenate([run.starts[first:stop] for run, first, stop, _ in pieces])
    ends = np.concatenate([run.ends[first:stop] for run, first, stop, _ in pieces])
    # The latest sample at or before each span (the first sample for spans before it).
    positions = np.maximum(sample_times.searchsorted(starts, side="right") - 1, 0)
    known = known_peaks[positions]
    # steps × FLOPs ÷ peak (1 where unknown), as for a span
    ideals = np.concatenate([run.steps[first:stop] for run, first, stop, _ in pieces])
    ideals = ideals * ideal_flops[positions] / peaks[positions]
    bounds = np.cumsum([0] + [stop - first for _, first, stop, _ in pieces])
    firsts = bounds[:-1]
    ideals, known_list, starts_list, ends_list = ideals.tolist(), known.tolist(), starts.tolist(), ends.tolist()
    for (_, _, _, last), first, stop, all_known, span_us in zip(
        pieces,
        firsts.tolist(),
        bounds[1:].tolist(),
        np.logical_and.reduceat(known, firsts).tolist(),
        np.add.reduceat(ends - starts, firsts).tolist(),
    ):
        yield (
            last,
            (
                ideals[first:stop],
                starts_list[first:stop],
                ends_list[first:stop],
                known_list[first:stop],
                all_known,
                span_us,
            ),
        )
