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

Step time is pending until a checkpoint or a disruption says what it was worth, and progress
is counted once: a timeline's `StepLedger` (fleet_goodput/core/step_ledger.py) keeps the job's
step spans until they resolve and says what they resolve to (steps going back, for one, are an
implicit restore).

Disruptions (`disruptions` in the job's summary, for the checkpoint advice)
are counted from the events: a running attempt (the job holding all its
chips) cut by a PREEMPT below the request or by a FAIL, and a restart of the
runtime inside an allocation after steps ran in it (a CHECKPOINT_RESTORE_END,
or steps going back). A restore at the start of a new allocation is part of
the disruption that ended the one before, not another; a CANCEL is the
owner's decision, not a failure the checkpoint interval guards against.

Most runtime events come as STEP_RUN events (fleet_goodput/core/step_runs.py), a
job's spans that follow one another: `feed` applies such a run at once where
each of its events would only close a span and take its time, its step spans handed
to the ledger as one `StepRun`, and applies its events one by one
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

from fleet_goodput.core import same_instant, step_runs
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
from fleet_goodput.core.figure_vector import FIGURES, zero_vector
from fleet_goodput.core.interruptions import InterruptionLog
from fleet_goodput.core.profile_checks import implausible_sample
from fleet_goodput.core.runs_apart import runs_apart_from_other_events
from fleet_goodput.core.step_ledger import StepLedger
from fleet_goodput.core.windows import add_by_window, add_over_windows

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
        self.rejections: list[Rejection] = []
        self.closed = False
        # The figures per window since the last flush: the one dict for its life, shared with the ledger.
        self._deltas: dict[int, list] = defaultdict(zero_vector)
        self.ledger = StepLedger(window_us, peak_flops, self._deltas)  # its step spans, until they resolve

    @property
    def unresolved(self) -> list:
        """The closed step spans awaiting a checkpoint or a disruption (the ledger's)."""
        return self.ledger.unresolved

    # ---- the ids seen -----------------------------------------------------
    @property
    def seen_ids(self) -> dict[str, tuple]:
        """event_id -> the first event that carried it (a STEP_RUN, for each of the events it stands for)."""
        return self.ids.indexed

    def forget_ids(self) -> None:
        """Forget every id seen (the key step does, once events are settled: a repeat of one arrives late)."""
        self.ids.forget()

    # A timeline is pickled as it always was (a key's saved state: session.py): its ids seen indexed, and
    # its ledger's state flat among its own attributes, under the names they had there.
    def __getstate__(self) -> dict:
        state = {**self.__dict__, **self.ledger.saved(), "seen_ids": self.seen_ids}
        del state["ids"], state["ledger"]
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        state["ids"] = SeenIds(state.pop("seen_ids", {}))
        state["ledger"] = StepLedger(state["window_us"], state["peak_flops"], state["_deltas"])
        state["ledger"].restore(state)
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
        return {kind: self.ledger.open_step.first_step if kind == "step" else None for kind in self.open_spans}

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
        submit, open_spans, facts, reported = self.submit, self.open_spans, shape.facts, self.ledger.reported_step
        if facts is None:  # data waits only (a run taken apart): one by one
            return False
        if (
            submit is None
            or self.end_us is not None
            or self.held < submit.chips
            or "step" in open_spans
            or "data_wait" in open_spans
            or "compile" in open_spans
            or (reported is not None and facts.first_step < reported)
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
        self.ledger.add_run(shape)
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
        self.submit = self.ledger.submit = Submit(*event.payload)
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
            self.interruption_log.interrupted(event.time_us, code, reason_of(event), self.ledger.pending_chip_us())
        elif not running and chips >= requested:
            self.attempt_ran_steps = self.run_stepped = False  # a new attempt begins
            self.interruption_log.started_running(event.time_us)
            if self.first_running_us is None:
                self.first_running_us = event.time_us
        self.held = chips
        if code == "PREEMPT" and chips < requested:
            self.ledger.resolve_all("lost")
            self._close_open_spans()  # a disruption ends every span left open (docs/metric.md section 3)
        elif chips == 0:
            self._close_open_spans()  # the attempt is over: nothing runs on zero chips
        return None

    def _on_end(self, code: str, time_us: int) -> None:
        running = self.held >= self.submit.chips
        self.disruptions += code == "FAIL" and running
        if running and code != "FINISH":
            self.interruption_log.interrupted(time_us, code, self.end_reason, self.ledger.pending_chip_us())
        self._count_unended_run(bool(self.open_spans))
        self.ledger.resolve_all("productive" if code == "FINISH" else "lost")
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
                if self.ledger.open(event.time_us, step, left_open):  # steps went back: an implicit restore
                    self._runtime_restarted()
                self.attempt_ran_steps = self.run_stepped = True
                self._resumed_work(event.time_us)
            return None
        if kind not in self.open_spans:
            return f"{code} without an open {name}_START"
        if kind == "step":
            problem = self.ledger.implausible_end(step, event.time_us)
            if problem:
                return problem
        self._close_span(kind, step)
        if kind == "checkpoint_save":
            self.checkpoint_saves += 1
            self.ledger.made_durable(step)
        elif kind == "checkpoint_restore" and step is not None:
            self.ledger.restored(step)
            self._runtime_restarted()
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

    def _runtime_restarted(self) -> None:
        """The runtime resumed inside its allocation (restored, or went back to an earlier step)."""
        self.disruptions += self.attempt_ran_steps
        self.attempt_ran_steps = False

    def _close_span(self, kind: str, step: int | None) -> None:
        del self.open_spans[kind]
        if kind == "step":
            self.ledger.close(step)

    def _close_open_spans(self, kinds: tuple[str, ...] = SPAN_PRECEDENCE) -> None:
        for kind in [kind for kind in self.open_spans if kind in kinds]:
            self.implicitly_closed_spans += 1
            self._close_span(kind, None)

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
            span = self.ledger.open_step
            span.pieces.append([start_us, time_us, False])
            span.total_us += time_us - start_us
        else:
            figures.append((_INDEX[kind], chips))
        add_over_windows(self._deltas, start_us, time_us, self.window_us, figures)

    # ---- output ----------------------------------------------------------
    def close(self, as_of_us: int) -> None:
        """End the timeline at the as-of time: what is still unresolved is pending."""
        self.advance_to(as_of_us)
        self.ledger.report_pending()
        self.closed = True

    def flush(self, provisional: bool = False) -> dict[int, list]:
        """Per-window deltas since the last flush; with `provisional`, unresolved
        step time so far is reported as pending (to be moved when it resolves).

        Until the job has a profiler sample, productive pieces keep their ideal
        back: a later first sample still applies to them (docs/metric.md section 3,
        "the first sample for spans before it"). Closing settles them.
        """
        if provisional:
            self.ledger.report_pending()
        if self.samples or self.closed:
            self.ledger.value_productive(self.samples, self.sample_times)
        deltas = self._deltas.copy()
        self._deltas.clear()  # not replaced: the ledger adds to it too
        return deltas

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
