"""From one job's events to chip-seconds per category and window (docs/metric.md section 3).

`JobTimeline` is a state machine fed with a job's events in event-time order. It
sweeps time forward, attributing each stretch between two events to exactly
one category, and keeps its results per event-time window. It is incremental:
`feed` events up to a time, `flush` what is known so far as per-window deltas,
feed more later. Batch runs feed everything and `close` at the as-of time;
streaming runs feed and flush as the watermark advances. Nothing here knows
about Beam, so the metric arithmetic is tested by plain unit tests.

Durations are integer microseconds and chip-time integer chip-microseconds, so
sums are exact whatever the order they are added in; only ideal chip-seconds
(a ratio of FLOPs) are floating point.

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

Disruptions (`disruptions` in the job's summary, for the checkpoint advice)
are counted from the events: a running attempt (the job holding all its
chips) cut by a PREEMPT below the request or by a FAIL, and a restart of the
runtime inside an allocation after steps ran in it (a CHECKPOINT_RESTORE_END,
or steps going back). A restore at the start of a new allocation is part of
the disruption that ended the one before, not another; a CANCEL is the
owner's decision, not a failure the checkpoint interval guards against.

Most runtime events come as STEP_RUN events (fleet_goodput/core/step_runs.py), a
job's spans that follow one another: `feed` applies such a run at once where
each of its events would only close a span and take its time, keeping its step
spans as one `StepRun` until they resolve, and applies its events one by one
everywhere else. The figures are the same either way (tests/core/test_step_runs.py).

Events at one instant are applied in the order their meaning gives (fleet_goodput/core/same_instant.py):
a span of no length opens and closes at its instant, whatever order event order gives its START and END.

Interruptions (`interruptions` in the summary, fleet_goodput/core/interruptions.py)
are the scheduler's side only: a running attempt cut by a PREEMPT below the
request, a FAIL or a CANCEL, each with its reason, what it cost and how long
the job took to get going again.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from fleet_goodput.core import same_instant, step_runs
from fleet_goodput.core.config import peak_of
from fleet_goodput.core.event_intake import DUPLICATE, Rejection, SeenIds, in_event_order, repeated_id
from fleet_goodput.core.events import (
    PROFILE,
    STEP_RUN,
    TERMINAL_TYPES,
    Event,
    Sample,
    Submit,
    reason_of,
    stream_of,
)
from fleet_goodput.core.figure_vector import FIGURES, IDEAL, zero_vector
from fleet_goodput.core.interruptions import InterruptionLog
from fleet_goodput.core.profile_checks import implausible_sample
from fleet_goodput.core.runs_apart import runs_apart_from_other_events
from fleet_goodput.core.windows import add_by_window, add_over_windows, split_at_windows

_INDEX = {name: i for i, name in enumerate(FIGURES)}
_LIFETIME, _HELD, _ALL_ALLOCATED, _DATA_WAIT = (
    _INDEX["lifetime"],
    _INDEX["held"],
    _INDEX["all_allocated"],
    _INDEX["data_wait"],
)

# Runtime span kinds, in the precedence docs/metric.md section 3 gives for overlapping spans.
SPAN_PRECEDENCE = ("data_wait", "compile", "step", "checkpoint_save", "checkpoint_restore", "init")
_SPAN_OF_NAME = {
    "DATA_WAIT": "data_wait",
    "COMPILE": "compile",
    "STEP": "step",
    "CHECKPOINT_SAVE": "checkpoint_save",
    "CHECKPOINT_RESTORE": "checkpoint_restore",
    "INIT": "init",
}
# A START of these is the runtime (re)starting: it closes the spans of ENDED_BY_A_RESTART left open (a process
# killed mid-step leaves its STEP_START and nothing more; docs/metric.md section 3, "Spans that never end").
RESTARTS = ("init", "checkpoint_restore")
ENDED_BY_A_RESTART = ("data_wait", "compile", "step", "checkpoint_save")
# Runtime code -> (span name, span kind, starts the span?), looked up once per event.
_RUNTIME_EDGES = {
    f"{name}_{edge}": (name, kind, edge == "START") for name, kind in _SPAN_OF_NAME.items() for edge in ("START", "END")
}


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


def _implausible_step_end(span: StepSpan, last_step: int | None, time_us: int) -> str | None:
    if last_step is None or span.first_step is None:
        return None
    if last_step < span.first_step:
        return f"STEP_END at step {last_step} is before its STEP_START's step {span.first_step}: step numbers going backwards"
    steps, duration_us = last_step - span.first_step + 1, time_us - span.start_us
    # A span of no length takes no time, so its steps claim no rate: a block of steps a log stamps
    # with one time (coarse timestamps, a block cut to zero length) is a span of no length.
    if duration_us > 0 and steps > duration_us:
        return f"STEP_END claims {steps} steps in {duration_us} µs: more than one step per microsecond is not plausible"
    return None


def _highest(step: int | None, other: int | None) -> int | None:
    return step if other is None else other if step is None else max(step, other)


class JobTimeline:
    """The chip-time of one job, window by window."""

    def __init__(self, job_id: str, window_us: int, peak_flops: dict[str, float]):
        self.job_id = job_id
        self.window_us = window_us
        self.peak_flops = peak_flops
        self.submit: Submit | None = None
        self.submit_us: int | None = None
        self.end_us: int | None = None
        self.status = "RUNNING"
        self.end_reason: str | None = None  # the `reason` of its FINISH, FAIL or CANCEL
        self.interruption_log = InterruptionLog()
        self.now_us: int | None = None  # time up to which chip-time has been attributed
        self.held = 0
        self.allocations = 0
        # When the job first held all its chips (its admission: the end of its first queue wait); None
        # until then.
        self.first_running_us: int | None = None
        self.open_spans: dict[str, int] = {}  # kind -> start time
        self.open_step: StepSpan | None = None
        self.unresolved: list[StepSpan] = []  # closed step spans awaiting a checkpoint or a disruption
        self.sample_times: list[int] = []
        self.samples: list[Sample] = []
        self.ids = SeenIds()  # the event_ids seen (`seen_ids`)
        self.duplicates = defaultdict(int)  # stream -> repeated event_ids dropped
        self.accepted = defaultdict(int)  # stream -> events accepted
        self.implicitly_closed_spans = 0
        self.checkpoint_saves = 0  # CHECKPOINT_SAVE_ENDs that closed an open save: the saves completed
        self.disruptions = 0  # running attempts cut short or restarted (module docstring)
        self.attempt_ran_steps = False  # a STEP_START since the job last got all its chips
        # A STEP_START since the job last got all its chips or its runtime last started (an INIT_START or a
        # CHECKPOINT_RESTORE_START): a start after one means the run before stopped without an end.
        self.run_stepped = False
        self.unended_runs = 0  # runs of its runtime that stopped without an end (`_count_unended_run`)
        self.durable_step: int | None = None  # the highest step a CHECKPOINT_SAVE_END made durable
        self.counted_step: int | None = None  # the highest last step of a productive step span
        self.reported_step: int | None = None  # the step the runtime last reported being at
        self.rejections: list[Rejection] = []
        self.closed = False
        self._deltas: dict[int, list] = defaultdict(zero_vector)
        self._productive: list[tuple[int, int, StepSpan]] = []  # awaiting ideal at flush

    # ---- the ids seen -----------------------------------------------------
    @property
    def seen_ids(self) -> dict[str, tuple]:
        """event_id -> the first event that carried it (a STEP_RUN, for each of the events it stands for)."""
        return self.ids.indexed

    def forget_ids(self) -> None:
        """Forget every id seen (the key step does, once events are settled: a repeat of one arrives late)."""
        self.ids.forget()

    # A timeline is pickled as it always was, its ids seen indexed (a key's saved state: session.py).
    def __getstate__(self) -> dict:
        state = {**self.__dict__, "seen_ids": self.seen_ids}
        del state["ids"]
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        state["ids"] = SeenIds(state.pop("seen_ids", {}))
        if "first_running_us" not in state:  # saved before it was kept: what the state says of its first run
            state["first_running_us"] = _first_running(state.get("interruption_log"))
        state.setdefault("run_stepped", False)  # saved before runs without an end were counted: none known
        state.setdefault("unended_runs", 0)
        self.__dict__.update(state)

    # ---- feeding -------------------------------------------------------
    def feed(self, events: list[Event]) -> None:
        """Apply `events`, all at or after the last fed time, in event-time order."""
        ordered = in_event_order(events)
        runs = [event for event in ordered if event.code == STEP_RUN]
        if runs:
            ordered = runs_apart_from_other_events(ordered, runs)
            shapes = iter(step_runs.shapes([event for event in ordered if event.code == STEP_RUN], self.window_us))
        new_ids = self.ids.all_new(ordered)
        expanded = []  # the events of runs applied one by one, merged into the order
        position = 0

        def comes_from_expanded() -> bool:
            return bool(expanded) and (position == len(ordered) or expanded[0] < ordered[position])

        def take() -> Event:
            nonlocal position
            if comes_from_expanded():
                return heapq.heappop(expanded)
            position += 1
            return ordered[position - 1]

        def following() -> Event | None:
            if comes_from_expanded():
                return expanded[0]
            return ordered[position] if position < len(ordered) else None

        while position < len(ordered) or expanded:
            event = take()
            if event.code == STEP_RUN:  # only `ordered` holds runs, in the order of their shapes
                if not self._apply_run(event, next(shapes), new_ids):
                    for original in step_runs.expand(event):
                        heapq.heappush(expanded, original)
                continue
            instant = [event]  # the events of its instant, up to a run
            while (after := following()) is not None and after.time_us == event.time_us and after.code != STEP_RUN:
                instant.append(take())
            if same_instant.needs_meaning_order(instant):
                instant = same_instant.in_meaning_order(instant, self._open_first_steps())
            for event in instant:
                self._feed_one(event, new_ids)

    def _open_first_steps(self) -> dict[str, int | None]:
        """Each kind of span open, with its first step (`same_instant.in_meaning_order`)."""
        return {kind: self.open_step.first_step if kind == "step" else None for kind in self.open_spans}

    def _feed_one(self, event: Event, new_id: bool = False) -> None:
        """Apply one event; `new_id`: its id is known to be new (`SeenIds.all_new`)."""
        if new_id:
            self.ids.unindexed.append(event)
        else:
            seen_ids = self.seen_ids
            if event.event_id in seen_ids:  # rare: the full check only then
                reason = repeated_id(seen_ids, event)
                if reason == DUPLICATE:
                    self.duplicates[stream_of(event.code)] += 1
                else:
                    self.rejections.append(Rejection(event, reason))
                return
            seen_ids[event.event_id] = tuple(event)  # plain: a timeline is pickled between runs
        reason = self._apply(event)
        if reason:
            self.rejections.append(Rejection(event, reason))
        else:
            self.accepted[stream_of(event.code)] += 1

    def _apply_run(self, run: Event, shape: step_runs.RunShape, new_ids: bool = False) -> bool:
        """Apply a STEP_RUN (whose `shape` is given) at once, where each step span would only close
        and await resolution, and a data wait or idle time between them only take their time
        (fleet_goodput/core/step_runs.py); False, having changed nothing, where one might do more.
        `new_ids`: its ids are known to be new (`SeenIds.all_new`)."""
        submit, open_spans, facts = self.submit, self.open_spans, shape.facts
        if facts is None:  # data waits only (a run taken apart): one by one
            return False
        if (
            submit is None
            or self.end_us is not None
            or self.held < submit.chips
            or "step" in open_spans
            or "data_wait" in open_spans
            or "compile" in open_spans
            or (self.reported_step is not None and facts.first_step < self.reported_step)
            or not (new_ids or self.seen_ids.keys().isdisjoint(step_runs.ids(run)))
        ):
            return False
        start, end = shape.start_us, shape.end_us
        self.advance_to(start)
        if new_ids:
            self.ids.unindexed.append(run)
        else:
            self.seen_ids.update(dict.fromkeys(step_runs.ids(run), tuple(run)))
        self.accepted["runtime"] += step_runs.size(run)
        self.attempt_ran_steps = self.run_stepped = True
        self._resumed_work(facts.start_us)  # at its first STEP_START
        self.reported_step = facts.last_step
        # Time between spans goes to the span still open, or is idle.
        between = _INDEX[next((kind for kind in SPAN_PRECEDENCE if kind in open_spans), "idle")]
        chips, deltas = submit.chips, self._deltas
        add_over_windows(
            deltas, start, end, self.window_us, ((_LIFETIME, chips), (_HELD, self.held), (_ALL_ALLOCATED, chips))
        )
        if shape.windows is None:
            self._add_run_stretches(run, between)
        else:
            for window, wait_us, between_us in shape.windows:
                vector = deltas[window]
                vector[_DATA_WAIT] += chips * wait_us
                vector[between] += chips * between_us
        self.now_us = end
        run = StepRun(shape.starts, shape.ends, shape.firsts, shape.lasts, self._preserved_step(), _facts=facts)
        if submit.workload in ("SERVING", "BULK_INFERENCE"):
            self._resolve(run, "productive")  # a served request is progress once answered
        else:
            self.unresolved.append(run)
        return True

    def _add_run_stretches(self, run: Event, between: int) -> None:
        """A run's data waits' time and the time between its spans (to figure `between`), window by
        window, stretch by stretch."""
        times, _, codes = step_runs.columns(run)
        chips, window_us, deltas = self.submit.chips, self.window_us, self._deltas
        start, end = int(times[0]), int(times[-1])
        waits = codes[0::2] != 0
        if waits.any():
            add_by_window(deltas, _DATA_WAIT, chips, times[0::2][waits], times[1::2][waits], window_us)
        if end - start > int((times[1::2] - times[0::2]).sum()):
            add_by_window(deltas, between, chips, times[1:-1:2], times[2::2], window_us)

    def _apply(self, event: Event) -> str | None:
        code = event.code
        if self.submit is None:
            if code == "SUBMIT":
                return self._on_submit(event)
            return "no SUBMIT for this job at or before this event"
        if code == "SUBMIT":
            return "second SUBMIT for a job already submitted"
        if code == PROFILE:
            sample = Sample(*event.payload)
            problem = implausible_sample(sample, self.peak_flops, self.submit.accelerator)
            if problem:
                return problem
            position = bisect_right(self.sample_times, event.time_us)
            self.sample_times.insert(position, event.time_us)
            self.samples.insert(position, sample)
            return None
        if self.end_us is not None:
            return f"after the job ended ({self.status})"
        self.advance_to(event.time_us)
        if code in ("ALLOCATE", "PREEMPT"):
            return self._on_chips(code, event)
        if code in TERMINAL_TYPES:
            self.end_reason = reason_of(event)
            return self._on_end(code, event.time_us)
        return self._on_runtime(code, event)

    def _on_submit(self, event: Event) -> None:
        self.submit = Submit(*event.payload)
        self.submit_us = self.now_us = event.time_us

    def _on_chips(self, code: str, event: Event) -> str | None:
        chips, requested = event.payload[0], self.submit.chips
        if chips > requested:
            # Demand accounting counts the requested chips; a level above them
            # could only inflate the fleet's held chip-time past its capacity.
            return f"{code} of {chips} chips is above the {requested} requested: a job holds at most its request"
        if code == "ALLOCATE":
            self.allocations += 1
        running = self.held >= requested
        if running and chips < requested and code == "PREEMPT":
            self.disruptions += 1
            self.interruption_log.interrupted(event.time_us, code, reason_of(event), self._pending_step_chip_us())
        elif not running and chips >= requested:
            self.attempt_ran_steps = self.run_stepped = False  # a new attempt begins
            self.interruption_log.started_running(event.time_us)
            if self.first_running_us is None:
                self.first_running_us = event.time_us
        self.held = chips
        if code == "PREEMPT" and chips < requested:
            self._resolve_all("lost")
            self._close_open_spans()  # a disruption ends every span left open (docs/metric.md section 3)
        elif chips == 0:
            self._close_open_spans()  # the attempt is over: nothing runs on zero chips
        return None

    def _on_end(self, code: str, time_us: int) -> None:
        running = self.held >= self.submit.chips
        self.disruptions += code == "FAIL" and running
        if running and code != "FINISH":
            self.interruption_log.interrupted(time_us, code, self.end_reason, self._pending_step_chip_us())
        self._count_unended_run(bool(self.open_spans))
        self._resolve_all("productive" if code == "FINISH" else "lost")
        self._close_open_spans()
        self.held = 0
        self.end_us = time_us
        self.status = {"FINISH": "FINISHED", "FAIL": "FAILED", "CANCEL": "CANCELLED"}[code]

    def _on_runtime(self, code: str, event: Event) -> str | None:
        name, kind, starts = _RUNTIME_EDGES[code]
        step = event.payload[0] if event.payload else None
        if starts:
            if kind in RESTARTS:
                self._count_unended_run(self.run_stepped)
                self.run_stepped = False
                self._close_open_spans(ENDED_BY_A_RESTART)
            left_open = kind in self.open_spans
            if left_open:
                self.implicitly_closed_spans += 1  # the runtime restarted without ending it
                self._close_span(kind, None)
            self.open_spans[kind] = event.time_us
            if kind == "step":
                self._on_step_start(step, left_open)
                self.open_step = StepSpan(
                    start_us=event.time_us, first_step=step, preserved_before=self._preserved_step()
                )
                self._resumed_work(event.time_us)
            return None
        if kind not in self.open_spans:
            return f"{code} without an open {name}_START"
        if kind == "step":
            problem = _implausible_step_end(self.open_step, step, event.time_us)
            if problem:
                return problem
        self._close_span(kind, step)
        if kind == "checkpoint_save":
            self.checkpoint_saves += 1
            self._resolve_durable(step)
            if step is not None:
                self.durable_step = _highest(self.durable_step, step)
        elif kind == "checkpoint_restore" and step is not None:
            self._resolve_restored(step)
            self._runtime_restarted(step)
        if kind == "checkpoint_restore":
            self._resumed_work(event.time_us)
        return None

    def _count_unended_run(self, unended: bool) -> None:
        """Count a run of the runtime that stopped without an end mark (a FINISH, FAIL, CANCEL or PREEMPT):
        one that ran steps and is followed by a start of the runtime in the same attempt, or one that left
        a span open when the job ended. A process SIGKILLed (or out of memory) writes nothing more; what
        follows its last event rests on what was recorded before it (docs/metric.md, "Spans that never end")."""
        self.unended_runs += unended

    def _resumed_work(self, time_us: int) -> None:
        if self.held >= self.submit.chips:
            self.interruption_log.resumed_work(time_us)

    def _pending_step_chip_us(self) -> int:
        """Step chip-time not yet preserved: what a disruption now turns lost."""
        spans = self.unresolved + ([self.open_step] if self.open_step is not None else [])
        return self.submit.chips * sum(end - start for span in spans for start, end, _ in span.pieces)

    def _on_step_start(self, first_step: int | None, left_open: bool) -> None:
        """Steps going back without a restore are an implicit restore (module docstring)."""
        reported = self.reported_step
        went_back = (
            first_step is not None
            and reported is not None
            and self._redone_steps_are_not_progress()
            and (first_step < reported or (first_step == reported and left_open))
        )
        if went_back:
            self._resolve_all("lost")
            self._runtime_restarted(first_step)
        self.attempt_ran_steps = self.run_stepped = True
        if first_step is not None:
            self.reported_step = first_step

    def _runtime_restarted(self, step: int) -> None:
        """The runtime resumed at `step` (restored to it, or went back to it) inside its allocation."""
        self.disruptions += self.attempt_ran_steps
        self.attempt_ran_steps = False
        self.reported_step = step

    def _redone_steps_are_not_progress(self) -> bool:
        return self.submit.workload != "SERVING"

    def _preserved_step(self) -> int | None:
        return _highest(self.durable_step, self.counted_step)

    def _close_span(self, kind: str, step: int | None) -> None:
        del self.open_spans[kind]
        if kind != "step":
            return
        span, self.open_step = self.open_step, None
        span.last_step = step
        span.closed = True
        if step is not None:
            self.reported_step = step
        if self.submit.workload in ("SERVING", "BULK_INFERENCE"):
            self._resolve(span, "productive")  # a served request is progress once answered
        else:
            self.unresolved.append(span)

    def _close_open_spans(self, kinds: tuple[str, ...] = SPAN_PRECEDENCE) -> None:
        for kind in [kind for kind in self.open_spans if kind in kinds]:
            self.implicitly_closed_spans += 1
            self._close_span(kind, None)

    # ---- resolving step time ---------------------------------------------
    def _resolve_all(self, category: str) -> None:
        for span in self.unresolved:
            self._resolve(span, category)
        self.unresolved = []
        if self.open_step is not None:
            self._resolve(self.open_step, category)

    def _resolve_durable(self, durable_step: int | None) -> None:
        """A checkpoint made `durable_step` durable: spans up to it are preserved."""
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

    def _resolve_restored(self, restored_step: int) -> None:
        """Resuming from `restored_step` throws away every step after it."""
        for span in self.unresolved:
            if isinstance(span, StepRun):
                covered, rest = span.split(span.spans_up_to(restored_step))
                self._resolve(covered, "productive")
                self._resolve(rest, "lost")
                continue
            covered = span.last_step is not None and span.last_step <= restored_step
            self._resolve(span, "productive" if covered else "lost")
        self.unresolved = []

    def _resolve(self, span: StepSpan | StepRun | None, category: str) -> None:
        if span is None:
            return
        if isinstance(span, StepRun):
            self._resolve_run(span, category)
            return
        if category == "productive" and span.pieces and self._redone_steps_are_not_progress():
            category = self._count_new_progress(span)
        chips = self.submit.chips
        for start_us, end_us, reported_pending in span.pieces:
            if reported_pending:
                self._add(start_us, end_us, "pending", -chips)
            self._add(start_us, end_us, category, chips)
            if category == "productive":
                self._productive.append((start_us, end_us, span))
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
            lost, run = run.split(run.spans_up_to(self._preserved_step()))
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
            run.add_to(self._deltas, _INDEX["pending"], -chips, self.window_us)
        run.add_to(self._deltas, _INDEX[category], chips, self.window_us)
        if category == "productive":
            self._productive.append((run.start_us, run.end_us, run))
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

    # ---- attributing time --------------------------------------------------
    def advance_to(self, time_us: int) -> None:
        """Attribute [now, time_us) to the state the job is in."""
        if self.now_us is None or self.end_us is not None or time_us <= self.now_us:
            return
        start_us, self.now_us = self.now_us, time_us
        chips, held = self.submit.chips, self.held
        # Every figure of the stretch is added in one pass over its windows.
        if held < chips:
            figures = [
                (_INDEX["lifetime"], chips),
                (_INDEX["held"], held),
                (_INDEX["queued" if held == 0 else "partial"], chips),
            ]
            if held:
                figures.append((_INDEX["partial_held"], held))
            if self.open_spans:
                figures.append((_INDEX["clipped_runtime"], chips))
            add_over_windows(self._deltas, start_us, time_us, self.window_us, figures)
            return
        # A plain loop: a generator per stretch cost a sixth of this method.
        for kind in SPAN_PRECEDENCE if self.open_spans else ():
            if kind in self.open_spans:
                break
        else:
            kind = "idle"
        figures = [(_INDEX["lifetime"], chips), (_INDEX["held"], held), (_INDEX["all_allocated"], chips)]
        if kind == "step":
            self.open_step.pieces.append([start_us, time_us, False])
            self.open_step.total_us += time_us - start_us
        else:
            figures.append((_INDEX[kind], chips))
        add_over_windows(self._deltas, start_us, time_us, self.window_us, figures)

    def _add(self, start_us: int, end_us: int, figure: str, chips: int) -> None:
        add_over_windows(self._deltas, start_us, end_us, self.window_us, ((_INDEX[figure], chips),))

    # ---- output ----------------------------------------------------------
    def close(self, as_of_us: int) -> None:
        """End the timeline at the as-of time: what is still unresolved is pending."""
        self.advance_to(as_of_us)
        self._report_pending()
        self.closed = True

    def _report_pending(self) -> None:
        chips = self.submit.chips if self.submit else 0
        spans = self.unresolved + ([self.open_step] if self.open_step else [])
        for span in spans:
            if isinstance(span, StepRun):
                if not span.reported_pending:
                    span.add_to(self._deltas, _INDEX["pending"], chips, self.window_us)
                    span.reported_pending = True
                continue
            for piece in span.pieces:
                if not piece[2]:
                    self._add(piece[0], piece[1], "pending", chips)
                    piece[2] = True

    def flush(self, provisional: bool = False) -> dict[int, list]:
        """Per-window deltas since the last flush; with `provisional`, unresolved
        step time so far is reported as pending (to be moved when it resolves).

        Until the job has a profiler sample, productive pieces keep their ideal
        back: a later first sample still applies to them (docs/metric.md section 3,
        "the first sample for spans before it"). Closing settles them.
        """
        if provisional:
            self._report_pending()
        if self.samples or self.closed:
            runs = [span for _, _, span in self._productive if isinstance(span, StepRun)]
            valued = iter(self._valued_spans(runs) if runs and self.samples else ())
            for start_us, end_us, span in self._productive:
                if not isinstance(span, StepRun):
                    self._add_productive_ideal(start_us, end_us, span)
                elif self.samples:  # without a sample (closed), nothing to value it by
                    self._add_run_ideal(*next(valued))
            self._productive = []
        deltas, self._deltas = self._deltas, defaultdict(zero_vector)
        return deltas

    def _add_productive_ideal(self, start_us: int, end_us: int, span: StepSpan) -> None:
        ideal_chip_s = self._span_ideal_chip_s(span)
        if ideal_chip_s is None or span.total_us == 0:
            return
        chips = self.submit.chips
        for window_start, piece_start, piece_end in split_at_windows(start_us, end_us, self.window_us):
            vector = self._deltas[window_start]
            share = (piece_end - piece_start) / span.total_us
            vector[IDEAL] += ideal_chip_s * share
            vector[_INDEX["profiled_productive"]] += chips * (piece_end - piece_start)

    def _valued_spans(self, runs: list[StepRun]) -> list[tuple]:
        """For each run, its spans' ideal chip-seconds, starts, ends and whether their peak is known,
        whether all of them are, and their time: valued for all the runs at once (a handful of numpy
        calls a flush, not a dozen a run), span by span as `_span_ideal_chip_s` values a span."""
        peaks = [peak_of(self.peak_flops, self.submit.accelerator, sample.precision) for sample in self.samples]
        ideal_flops = np.array([sample.ideal_flops for sample in self.samples])
        known = np.array([peak is not None for peak in peaks])
        starts, ends = np.concatenate([run.starts for run in runs]), np.concatenate([run.ends for run in runs])
        # The latest sample at or before each span (the first sample for spans before it).
        positions = np.maximum(np.array(self.sample_times, dtype=np.int64).searchsorted(starts, side="right") - 1, 0)
        known = known[positions]
        # steps × FLOPs ÷ peak (1 where unknown), as for a span
        ideals = (
            np.concatenate([run.steps for run in runs])
            * ideal_flops[positions]
            / np.array([peak or 1.0 for peak in peaks])[positions]
        )
        bounds = np.cumsum([0] + [len(run.starts) for run in runs])
        firsts = bounds[:-1]
        ideals, known_list, starts_list, ends_list = ideals.tolist(), known.tolist(), starts.tolist(), ends.tolist()
        return [
            (
                ideals[first:stop],
                starts_list[first:stop],
                ends_list[first:stop],
                known_list[first:stop],
                all_known,
                span_us,
            )
            for first, stop, all_known, span_us in zip(
                firsts.tolist(),
                bounds[1:].tolist(),
                np.logical_and.reduceat(known, firsts).tolist(),
                np.add.reduceat(ends - starts, firsts).tolist(),
            )
        ]

    def _add_run_ideal(
        self, ideals: list, starts: list, ends: list, known: list, all_known: bool, span_us: int
    ) -> None:
        """`_add_productive_ideal` of each of a run's spans in turn (`_valued_spans`): the same
        products, added to each window's ideal in the same order (a float sum depends on its order)."""
        chips, window_us, deltas = self.submit.chips, self.window_us, self._deltas
        run_start = starts[0]
        window = run_start - run_start % window_us
        if ends[-1] <= window + window_us and all_known:  # the common case: all in one window
            vector = deltas[window]
            ideal = vector[IDEAL]
            for span_ideal in ideals:
                ideal += span_ideal
            vector[IDEAL] = ideal
            vector[_INDEX["profiled_productive"]] += chips * span_us
            return
        profiled = _INDEX["profiled_productive"]
        for span_ideal, start_us, end_us, span_known in zip(ideals, starts, ends, known):
            if not span_known:
                continue
            window = start_us - start_us % window_us
            if end_us <= window + window_us:  # its share is 1: its ideal, as is
                vector = deltas[window]
                vector[IDEAL] += span_ideal
                vector[profiled] += chips * (end_us - start_us)
                continue
            for window_start, piece_start, piece_end in split_at_windows(start_us, end_us, window_us):
                vector = deltas[window_start]
                vector[IDEAL] += span_ideal * ((piece_end - piece_start) / (end_us - start_us))
                vector[profiled] += chips * (piece_end - piece_start)

    def _span_ideal_chip_s(self, span: StepSpan) -> float | None:
        """Steps × ideal FLOPs per step ÷ peak FLOP/s per chip in the sample's
        precision, from the latest sample at or before the span (the first
        sample for spans before it); None (unknown) when the catalogue has no
        peak for that precision on this accelerator."""
        if not self.samples or span.steps is None:
            return None
        position = bisect_right(self.sample_times, span.start_us)
        sample = self.samples[position - 1] if position else self.samples[0]
        peak = peak_of(self.peak_flops, self.submit.accelerator, sample.precision)
        return None if peak is None else span.steps * sample.ideal_flops / peak

    def counts(self) -> dict[tuple[str, str], int]:
        """(stream, outcome) → events so far: accepted, or dropped as a repeated event_id."""
        counts = {(stream, "accepted"): n for stream, n in self.accepted.items()}
        counts.update({(stream, "duplicate"): n for stream, n in self.duplicates.items()})
        return counts

    def summary(self) -> dict:
        """The job's attributes and final state, for the `jobs` table."""
        submit = self.submit
        return {
            "job_id": self.job_id,
            "cluster": submit.cluster,
            "accelerator": submit.accelerator,
            "workload": submit.workload,
            "framework": submit.framework,
            "team": submit.team,
            "topology": submit.topology,
            "priority": submit.priority,
            "queue": submit.queue,
            "requested_chips": submit.chips,
            "submit_time_us": self.submit_us,
            "end_time_us": self.end_us,
            "first_running_time_us": self.first_running_us,
            # Not ended: PENDING while it holds no chip (waiting for its first allocation, or requeued after a
            # preemption, as Slurm and Kueue show it), RUNNING while it holds some.
            "status": self.status if self.status != "RUNNING" or self.held > 0 else "PENDING",
            "end_reason": self.end_reason,
            "interruptions": self.interruption_log.summary(),
            "allocations": self.allocations,
            "profiler_samples": self.accepted.get("profiler", 0),  # samples may be compacted away; the count stays
            "implicitly_closed_spans": self.implicitly_closed_spans,
            "checkpoint_saves": self.checkpoint_saves,
            "disruptions": self.disruptions,
            "unended_runs": self.unended_runs,
        }


def _first_running(log: InterruptionLog | None) -> int | None:
    """When a job saved before its first run was kept first held all its chips: the start of the attempt
    its first interruption cut, else of the attempt still running (a job not ended has no other)."""
    if log is None:
        return None
    if log.rows:
        return log.rows[0].time_us - log.rows[0].run_us
    return log.running_since
