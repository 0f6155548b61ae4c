"""The streaming window trigger: keys advance at each window end, with late data and updates.

Per key (a job, or a cluster's capacity) the state is the `KeyState` that
batch runs keep between runs (fleet_goodput/core/session.py), loaded and reported
with the batch sessionizer's own functions (transforms/sessionize.py:
`load_state`, `settled_outputs`), so the two differ only in when a key
advances: a batch run advances every key once, to the run's as-of time; here
the frontier is F = (last firing − allowed lateness) and new events wait in a
bag until an event-time timer fires at the next window end T the key needs,
and advances the key to T:

1. events up to the new frontier are settled into the timeline;
2. a copy takes the events in (F, T] and reports its unresolved step time as
   pending: the provisional figures as of T;
3. every window whose figures changed is emitted as a new version (T).

So a late event inside the allowed lateness changes the windows it touches
at the next firing, a checkpoint that arrives after a window closed moves
that window's pending step time to productive, and an event at or before the
frontier is later than allowed: it goes to the `late` table, not into a
figure. A key's timer re-arms every window while its job runs (up to
`max_silence_s` after its last event), so a job running for weeks yields
hourly results.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

from fleet_goodput.core.events import Event, unpack
from fleet_goodput.core.session import NEVER, KeyState, late_row
from fleet_goodput.core.windows import window_start
from fleet_goodput.transforms.sessionize import (
    CAPACITY,
    COUNTS,
    JOBS,
    LATE,
    REJECTED,
    WINDOW_VECTORS,
    KeyRules,
    job_of,
    load_state,
    settled_outputs,
)


@dataclass
class _Clock:
    frontier_us: int = NEVER  # events at or before it are later than allowed
    last_fired_us: int | None = None
    next_fire_us: int | None = None
    last_version_us: int = NEVER
    closed: bool = False


class _StreamTimelineFn(beam.DoFn):
    # One DoFn for job and capacity keys: state and timer specs are objects,
    # and two ParDos sharing them had capacity timers fire in the job
    # ParDo's state (Beam 2.77, FnApiRunner).
    EVENTS = BagStateSpec("events", BytesCoder())
    STATE = ReadModifyWriteStateSpec("state", BytesCoder())
    CLOCK = ReadModifyWriteStateSpec("clock", PickleCoder())
    FIRE = TimerSpec("fire", TimeDomain.WATERMARK)

    def __init__(self, rules: KeyRules):
        self.rules = rules
        self.window_us = rules.window_us
        self.lateness_us = rules.allowed_lateness_s * 1_000_000
        self.max_silence_us = rules.max_silence_us

    # ---- arrivals ------------------------------------------------------------
    def process(
        self,
        element,
        events=beam.DoFn.StateParam(EVENTS),
        clock_state=beam.DoFn.StateParam(CLOCK),
        timer=beam.DoFn.TimerParam(FIRE),
    ):
        key, batch = element
        clock = clock_state.read() or _Clock()
        on_time = []
        for raw in unpack(batch):
            event = Event._make(raw)
            if clock.closed or event.time_us <= clock.frontier_us:
                reference = clock.last_fired_us if clock.last_fired_us is not None else event.time_us
                yield beam.pvalue.TaggedOutput(LATE, late_row(job_of(key), event, reference, self.lateness_us))
            else:
                on_time.append(raw)
        if not on_time:
            return
        events.add(pickle.dumps(on_time, protocol=pickle.HIGHEST_PROTOCOL))
        target = min(self._due(Event._make(raw)) for raw in on_time)
        if clock.next_fire_us is None or target < clock.next_fire_us:
            clock.next_fire_us = target
            timer.set(Timestamp(micros=target))
        clock_state.write(clock)

    def _due(self, event: Event) -> int:
        """When an event must be looked at: its window's end."""
        return window_start(event.time_us, self.window_us) + self.window_us

    # ---- firing ----------------------------------------------------------------
    @on_timer(FIRE)
    def fire(
        self,
        key=beam.DoFn.KeyParam,
        fired_at=beam.DoFn.TimestampParam,
        events=beam.DoFn.StateParam(EVENTS),
        key_state=beam.DoFn.StateParam(STATE),
        clock_state=beam.DoFn.StateParam(CLOCK),
        timer=beam.DoFn.TimerParam(FIRE),
    ):
        now_us = fired_at.micros
        clock = clock_state.read() or _Clock()
        stored = key_state.read()
        state = load_state(key, [stored] if stored else [], self.rules)
        state.admit(
            [raw for blob in events.read() for raw in pickle.loads(blob)]
        )  # late ones were set aside on arrival
        events.clear()
        advance = state.advance(now_us, now_us - self.lateness_us, self.max_silence_us)
        version = max(now_us, clock.last_version_us + 1)
        if advance.windows or advance.summary is not None:
            clock.last_version_us = version
        # What stays unresolved is reported again at the next firing: only what settled goes out.
        yield from settled_outputs(key, advance, version)

        clock.frontier_us, clock.last_fired_us = state.frontier_us, now_us
        clock.next_fire_us = None if state.finished else self._next_fire(now_us, state)
        if clock.next_fire_us is None:
            # Settled for good: keep only the clock, so stragglers are reported late.
            clock.closed = True
            key_state.clear()
        else:
            timer.set(Timestamp(micros=clock.next_fire_us))
            key_state.write(state.to_bytes())
        clock_state.write(clock)

    def _next_fire(self, now_us: int, state: KeyState) -> int | None:
        following = now_us + self.window_us
        candidates = [max(following, self._due(e)) for e in state.waiting]
        silent_since = state.last_event_us if state.last_event_us is not None else now_us
        if _alive(state) and following <= silent_since + self.max_silence_us:
            candidates.append(following)
        return min(candidates) if candidates else None


def _alive(state: KeyState) -> bool:
    """Whether time still accrues to a key: a running job, or capacity (levels stay until changed)."""
    timeline = state.timeline
    if not hasattr(timeline, "submit"):
        return True
    return timeline.submit is not None and timeline.end_us is None


class StreamSessionize(beam.PTransform):
    """(key, [events]) of jobs and capacity on a stream → versioned (job, window)
    vectors (main), capacity rows, job rows, rejections, late rows, counts: the outputs
    `SessionizeKeys` names, advanced at window ends instead of once to an as-of time."""

    def __init__(self, rules: KeyRules):
        super().__init__()
        self.fn = _StreamTimelineFn(rules)

    def expand(self, keyed_events):
        return keyed_events | "UpdateTimelines" >> beam.ParDo(self.fn).with_outputs(
            CAPACITY, JOBS, REJECTED, COUNTS, LATE, main=WINDOW_VECTORS
        )
