"""One key's state between runs: what batch runs, continued runs and streams share.

A key is a job, or a cluster's capacity for one accelerator. Its state is

- `timeline`: every event up to the *frontier* applied, time attributed up to it;
- `waiting`: events after the frontier, held so that an event arriving late but
  within the allowed lateness can still be placed in order, and events after
  the as-of time, held until a run's as-of time reaches them;
- `totals`: the settled figures per window (for capacity, per stretch of one
  level: fleet_goodput/core/capacity.py); `emitted`: the figures last written.

Advancing a key to an as-of time T with frontier F (T minus the allowed
lateness) settles the waiting events at or before F into the timeline, then a
copy takes the rest, advances to T and reports unresolved step time as
pending: those are the figures as of T. Windows whose figures differ from what
was last written are returned as new versions. An event at or before the
frontier is late: it can no longer be placed, so it goes to the `late` table.

Because the timeline attributes integer chip-microseconds and is fed in
event-time order, cutting a history into consecutive advances gives the same
figures as one advance over all of it (tests/runs/test_split_invariance.py).

What is kept is what can still change: windows before the frontier that no
unresolved step span touches are final and dropped from `totals`/`emitted`,
samples no future span can use are dropped, and a job that ended before the
frontier is settled for good (`finished`). Nothing here knows about Beam.
"""

from __future__ import annotations

import io
import pickle
from bisect import bisect_right
from dataclasses import dataclass, field

from fleet_goodput.core import step_runs
from fleet_goodput.core.capacity import CapacityTimeline
from fleet_goodput.core.event_intake import in_event_order
from fleet_goodput.core.events import STEP_RUN, Event, stream_of
from fleet_goodput.core.figure_vector import zero_vector
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.core.timeline import JobTimeline
from fleet_goodput.core.windows import window_start

NEVER = -(2**62)
WAITING = "waiting"  # the outcome of an event after the as-of time, until a run's as-of reaches it
# Bump when the pickled layout of KeyState or the timelines changes: a store
# written by another layout must be started afresh (`mpg run --replace`).
STATE_FORMAT = 4  # 4: the timelines keep each job's end reason and interruptions; capacity kept as stretches
# The longest queue wait taken for real: a SUBMIT that no other event of its job follows within it is a
# clock reset to a past date (docs/metric.md, "Time and the as-of time"). Jobs wait days to weeks for
# chips; a quarter is past any real wait, years (a clock back at its default date) far past it.
MAX_QUEUE_WAIT_US = 92 * 86_400 * 1_000_000


# A pickle names each class by its module. Stores written before the package's modules moved into
# their layers (fleet-goodput 0.1, every module at the top) name these; their state reads by where
# the classes live now (tests/store/test_store_from_flat_layout.py), so moving a module strands no store.
_MODULES_BEFORE_LAYERS = {
    f"fleet_goodput.{name}": f"fleet_goodput.core.{name}"
    for name in ("capacity", "events", "interruptions", "session", "step_runs", "timeline", "windows")
}


# Classes moved out of their module since, by the module a state saved before names: a job's step spans
# left core/timeline.py for core/step_ledger.py. Mapped here rather than kept importable from timeline.py
# (or pickled under its name, the bytes unchanged), so that every class is named where it is defined;
# tests/core/test_state_before_step_ledger.py loads such a state.
_CLASSES_MOVED = {
    ("fleet_goodput.core.timeline", "StepSpan"): "fleet_goodput.core.step_ledger",
    ("fleet_goodput.core.timeline", "StepRun"): "fleet_goodput.core.step_ledger",
}


class _StateUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        module = _MODULES_BEFORE_LAYERS.get(module, module)
        return super().find_class(_CLASSES_MOVED.get((module, name), module), name)


def state_from_bytes(blob: bytes) -> KeyState:
    """A key's state as `KeyState.to_bytes` saved it, by this layout of the package or the one before."""
    return _StateUnpickler(io.BytesIO(blob)).load()


def clone(obj):
    return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _plus(a, b):
    if isinstance(a, tuple):  # a capacity stretch, (end, chips): reported again, it reaches further
        return b
    if isinstance(a, list):
        return [x + y for x, y in zip(a, b)]
    return a + b


def _accumulate(totals: dict, deltas: dict) -> None:
    """Add per-window deltas (a job's figure vectors) into `totals`, or a capacity key's stretches."""
    for window, delta in deltas.items():
        totals[window] = _plus(totals[window], delta) if window in totals else delta


@dataclass
class Advance:
    """What advancing a key produced."""

    windows: dict = field(default_factory=dict)  # window start -> figures, changed since last written
    summary: dict | None = None  # the job's row, when it changed
    # capacity: stretch start -> the earliest instant of it whose chip-time changed since last written
    changed_from: dict = field(default_factory=dict)
    settled_rejections: list = field(default_factory=list)  # (event, reason), final
    provisional_rejections: list = field(default_factory=list)  # (event, reason) of waiting events
    settled_counts: dict = field(default_factory=dict)  # (stream, outcome) -> delta, final
    provisional_counts: dict = field(default_factory=dict)  # (stream, outcome) -> fates of waiting events


@dataclass
class KeyState:
    key: str
    timeline: object
    frontier_us: int = NEVER
    waiting: list = field(default_factory=list)  # Event tuples after the frontier
    totals: dict = field(default_factory=dict)
    emitted: dict = field(default_factory=dict)
    summary: dict | None = None
    counted: dict = field(default_factory=dict)  # (stream, outcome) -> settled events already reported
    last_event_us: int | None = None
    finished: bool = False  # settled for good: nothing can change its figures any more

    # ---- arrivals ---------------------------------------------------------
    def admit(self, events) -> list[Event]:
        """Hold `events` until they settle; returns those that are late (a STEP_RUN's one by one)."""
        late, waiting = step_runs.split_at(map(Event._make, events), self.frontier_us)
        self.waiting += waiting
        if waiting:
            latest = max(event[0] if event[3] != STEP_RUN else step_runs.end_us(event) for event in waiting)
            if self.last_event_us is None or latest > self.last_event_us:
                self.last_event_us = latest
        return step_runs.originals(late)

    def rejection_reasons(self) -> dict[Event, str]:
        """Why the timeline rejects waiting events, fed to a copy all at once."""
        probe = clone(self.timeline)
        before = len(probe.rejections)
        probe.feed(self.waiting)
        return {r.event: r.reason for r in probe.rejections[before:]}

    # ---- advancing ----------------------------------------------------------
    def advance(self, as_of_us: int, frontier_us: int, max_silence_us: int = RunSettings().max_silence_us) -> Advance:
        """Settle up to `frontier_us`, then report the figures as of `as_of_us`.

        A job that ended `max_silence_us` (runs.max_silence_s) before the
        frontier without any profiler sample stops waiting for one: its state can then go.
        """
        result = Advance()
        frontier_us = max(self.frontier_us, min(frontier_us, as_of_us))
        unconfirmed_us = self._judge_submit(frontier_us, result)
        self._settle(frontier_us, result, hold_from_us=unconfirmed_us)
        values = dict(self.totals)
        counts_until_us = as_of_us
        if unconfirmed_us is not None and as_of_us - unconfirmed_us > MAX_QUEUE_WAIT_US:
            counts_until_us = unconfirmed_us - 1  # a queue wait past belief so far: nothing rests on the SUBMIT
        if self._ended_and_settled():  # nothing after the frontier can change it: no copy to advance
            provisional = self.timeline
        else:
            provisional = clone(self.timeline)  # _settle left it no rejections: what it rejects now is provisional
            counted = provisional.counts()
            reached, after = step_runs.split_at(self.waiting, counts_until_us)
            provisional.feed(reached)
            provisional.advance_to(as_of_us)
            _accumulate(values, provisional.flush(provisional=True))
            result.provisional_rejections = [(r.event, r.reason) for r in provisional.rejections]
            result.provisional_counts = {
                k: n - counted.get(k, 0) for k, n in provisional.counts().items() if n != counted.get(k, 0)
            }
            for event in after:  # they wait for a run whose as-of reaches them, or for confirmation
                outcome = (stream_of(event.code), WAITING)
                result.provisional_counts[outcome] = result.provisional_counts.get(outcome, 0) + step_runs.size(event)
        self._emit(values, _summary_of(provisional), result)
        self._compact(max_silence_us)
        return result

    def _judge_submit(self, frontier_us: int, result: Advance) -> int | None:
        """Reject a waiting SUBMIT that no other event of its job follows within `MAX_QUEUE_WAIT_US`,
        once that is known; returns the time of a SUBMIT not yet confirmed (None: none waits).

        It is known when the job's next event is seen, or when the frontier passes the SUBMIT by more
        than the wait (a next event within it would now be late). A SUBMIT rejected so leaves its
        job to the next SUBMIT, if any; the job's other events are then rejected for want of one.
        """
        if not isinstance(self.timeline, JobTimeline) or self.timeline.submit is not None:
            return None
        while True:
            ordered = in_event_order(self.waiting)
            position = next((i for i, e in enumerate(ordered) if e.code == "SUBMIT"), None)
            if position is None:
                return None
            submit = ordered[position]
            following = next(
                (e for e in ordered[position + 1 :] if e.code != "SUBMIT" and e.event_id != submit.event_id), None
            )
            if following is not None and following.time_us - submit.time_us <= MAX_QUEUE_WAIT_US:
                return None
            if following is None and frontier_us - submit.time_us <= MAX_QUEUE_WAIT_US:
                return submit.time_us
            self.waiting.remove(submit)
            result.settled_rejections.append(
                (
                    submit,
                    (
                        f"no other event of its job within {MAX_QUEUE_WAIT_US // 86_400_000_000} days after this SUBMIT "
                        "(a clock reset to a past date?): a queue wait that long is not taken for real, so no figure "
                        "rests on it"
                    ),
                )
            )

    def _ended_and_settled(self) -> bool:
        """A job that ended at or before the frontier with no event waiting: advancing a copy
        to the as-of time would add nothing (its ending resolved every span and closed
        every stretch), so the copy is not made. Most keys of a long batch run are such jobs."""
        timeline = self.timeline
        return (
            isinstance(timeline, JobTimeline)
            and not self.waiting
            and timeline.end_us is not None
            and timeline.end_us <= self.frontier_us
            and not timeline.ledger.awaiting()
        )

    def _settle(self, frontier_us: int, result: Advance, hold_from_us: int | None = None) -> None:
        """Feed the waiting events up to `frontier_us` to the timeline; those from `hold_from_us` on
        (a SUBMIT waiting for confirmation, and what follows it) stay waiting."""
        timeline = self.timeline
        until_us = frontier_us if hold_from_us is None else min(frontier_us, hold_from_us - 1)
        settled, self.waiting = step_runs.split_at(self.waiting, until_us)
        timeline.feed(settled)
        # A repeat of a settled event has its time, at or before the frontier,
        # so it arrives late: settled ids need no memory.
        timeline.forget_ids()
        timeline.advance_to(frontier_us)
        self.frontier_us = frontier_us
        _accumulate(self.totals, timeline.flush())
        result.settled_rejections += [(r.event, r.reason) for r in timeline.rejections]
        timeline.rejections = []
        for outcome, total in timeline.counts().items():
            delta = total - self.counted.get(outcome, 0)
            if delta:
                self.counted[outcome] = total
                result.settled_counts[outcome] = delta

    def _emit(self, values: dict, summary: dict | None, result: Advance) -> None:
        if isinstance(self.timeline, JobTimeline):  # its SUBMIT rejected since: no figure rests on it
            for window in self.emitted.keys() - values.keys():
                values[window] = zero_vector()
        result.windows = {w: v for w, v in values.items() if self.emitted.get(w) != v}
        for start, stretch in result.windows.items():
            if isinstance(stretch, tuple):
                result.changed_from[start] = _changed_from(start, self.emitted.get(start), stretch)
        self.emitted.update(result.windows)
        if summary is not None and summary != self.summary:
            self.summary = result.summary = summary

    # ---- keeping it small ---------------------------------------------------
    def _compact(self, max_silence_us: int) -> None:
        """Forget what can no longer change (see the module docstring)."""
        timeline = self.timeline
        window_us = timeline.window_us
        ended = isinstance(timeline, JobTimeline) and timeline.end_us is not None
        if ended and not timeline.samples and self.frontier_us - timeline.end_us >= max_silence_us:
            timeline.closed = True
            timeline.flush()  # no sample came: its productive time keeps no ideal
        open_from = window_start(self.frontier_us, window_us)
        live = set(_live_windows(timeline, window_us))
        for window in [w for w in self.totals if w < open_from and w not in live]:
            del self.totals[window]
            self.emitted.pop(window, None)
        if isinstance(timeline, JobTimeline):
            _drop_unusable_samples(timeline)
            self.finished = ended and timeline.end_us <= self.frontier_us and not self.waiting and not live

    def to_bytes(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    # A key's waiting events cross a pipeline step pickled: as plain tuples
    # they pickle several times faster than as named tuples (measured: pickling
    # was a fifth of a run's time).
    def __getstate__(self) -> dict:
        return {**self.__dict__, "waiting": [tuple(e) for e in self.waiting]}

    def __setstate__(self, state: dict) -> None:
        state["waiting"] = list(map(Event._make, state["waiting"]))
        self.__dict__.update(state)


def _changed_from(start_us: int, written: tuple[int, int] | None, stretch: tuple[int, int]) -> int:
    """Where a capacity stretch's chip-time changed since it was `written` (end, chips): a stretch of
    the same level that now ends elsewhere changed only from the nearer end on."""
    if written is None or written[1] != stretch[1]:
        return start_us
    return min(written[0], stretch[0])


def _summary_of(timeline) -> dict | None:
    if isinstance(timeline, JobTimeline) and timeline.submit is not None:
        return timeline.summary()
    return None


def _live_windows(timeline, window_us: int):
    """Windows holding step time that may still move (unresolved, or awaiting a first sample); for
    capacity, the stretch still open, so that a run that extends it knows how far it reached before."""
    if isinstance(timeline, CapacityTimeline):
        if timeline.since_us is not None:
            yield timeline.since_us
        return
    pieces = [(p[0], p[1]) for span in timeline.ledger.awaiting() for p in span.pieces]
    pieces += [(start, end) for start, end, _ in timeline.ledger.productive]
    for start_us, end_us in pieces:
        window = window_start(start_us, window_us)
        while window < end_us:
            yield window
            window += window_us


def _drop_unusable_samples(timeline: JobTimeline) -> None:
    """Keep the samples a span not yet attributed could still use.

    Spans still to be valued start at or after the earliest unresolved span
    (or the frontier); each uses the latest sample at or before its start, so
    samples older than the latest one before that point are never read again.
    The first sample stays while spans before it may still need it.
    """
    if len(timeline.samples) < 2 or timeline.ledger.productive:
        return
    starts = [span.start_us for span in timeline.ledger.awaiting()]
    earliest = min(starts, default=timeline.now_us)
    if earliest is None:
        return
    keep_from = max(bisect_right(timeline.sample_times, earliest) - 1, 0)
    del timeline.sample_times[:keep_from]
    del timeline.samples[:keep_from]


def new_state(key: str, timeline, frontier_us: int = NEVER) -> KeyState:
    return KeyState(key=key, timeline=timeline, frontier_us=frontier_us)


def late_row(key_job_id: str | None, event: Event, reference_us: int, allowed_lateness_us: int) -> dict:
    """A `late` table row: how far behind its key's frontier an event arrived."""
    return {
        "stream": stream_of(event.code),
        "event_id": event.event_id,
        "job_id": key_job_id,
        "event_time_us": event.time_us,
        "type": event.code,
        "lateness_s": (reference_us - event.time_us) / 1e6,
        "allowed_lateness_s": allowed_lateness_us / 1e6,
    }


def make_timeline(key: str, is_capacity: bool, window_us: int, peak_flops: dict):
    return CapacityTimeline(window_us) if is_capacity else JobTimeline(key, window_us, peak_flops)
