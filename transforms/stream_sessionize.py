"""Sessionizing jobs and capacity on unbounded streams, with late data and updates.

Per key (a job, or a cluster's capacity) the state holds a *base*: the
timeline with every event up to the frontier F = (last firing − allowed
lateness) applied, and the per-window totals it has produced. New events wait
in a bag. An event-time timer fires at each window end T the key needs:

1. events up to the new frontier are applied to the base, which is saved;
2. a copy of the base takes the events in (F, T] and reports its unresolved
   step time as pending: the provisional figures as of T;
3. every window whose figures changed is emitted as a new version (T).

So a late event inside the allowed lateness changes the windows it touches
at the next firing, a checkpoint that arrives after a window closed moves
that window's pending step time to productive, and an event at or before the
frontier is later than allowed: it goes to the `late` table, not into a
figure. A key's timer re-arms every window while its job runs (up to
`max_silence_s` after its last event), so a job running for weeks yields
hourly results. An END punctuation (from a source that knows its input is
complete) closes the key at that time exactly as the batch run's as-of would.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

from fleet_goodput.capacity import CapacityTimeline
from fleet_goodput.decode import CAPACITY_KEY_PREFIX
from fleet_goodput.events import Event, stream_of
from fleet_goodput.timeline import JobTimeline
from fleet_goodput.windows import window_start
from transforms.sessionize import CAPACITY, COUNTS, JOBS, REJECTED, WINDOW_VECTORS, capacity_row, timeline_rejection

END = "END"  # punctuation: the source's input is complete up to this event time
LATE = "late"
NEVER = -(2**62)


def end_of_input(time_us: int) -> tuple:
    """The punctuation event a finite source sends to every key it has seen."""
    return tuple(Event(time_us, 9, f"end-of-input-{time_us}", END, ()))


def _plus(a, b):
    if isinstance(a, list):
        return [x + y for x, y in zip(a, b)]
    return a + b


@dataclass
class _Clock:
    frontier_us: int = NEVER  # events at or before it are later than allowed
    last_fired_us: int | None = None
    next_fire_us: int | None = None
    last_version_us: int = NEVER
    closed: bool = False


@dataclass
class _Base:
    timeline: object
    totals: dict = field(default_factory=dict)  # window -> cumulative figures, settled part
    emitted: dict = field(default_factory=dict)  # window -> figures last emitted
    summary: dict | None = None
    counted: dict = field(default_factory=dict)  # (stream, outcome) -> count already emitted
    last_event_us: int | None = None


class _JobSubject:
    """What the streaming sessionizer needs to know about a job key."""

    is_capacity = False

    def __init__(self, window_us: int, peak_flops: dict[str, float]):
        self.window_us = window_us
        self.peak_flops = peak_flops

    def new_timeline(self, key):
        return JobTimeline(key, self.window_us, self.peak_flops)

    def results(self, key, windows: dict, version_us: int):
        for window, vector in windows.items():
            yield key, window, version_us, vector

    @staticmethod
    def alive(timeline) -> bool:
        return timeline.submit is not None and timeline.end_us is None

    @staticmethod
    def summary(timeline) -> dict | None:
        return timeline.summary() if timeline.submit is not None else None


class _CapacitySubject:
    """What the streaming sessionizer needs to know about a capacity key."""

    is_capacity = True

    def __init__(self, window_us: int):
        self.window_us = window_us

    def new_timeline(self, key):
        return CapacityTimeline(self.window_us)

    def results(self, key, windows: dict, version_us: int):
        for window, chip_us in windows.items():
            yield beam.pvalue.TaggedOutput(CAPACITY, capacity_row(key, window, chip_us, version_us))

    @staticmethod
    def alive(timeline) -> bool:
        return True  # chips stay online until a CAPACITY event says otherwise

    @staticmethod
    def summary(timeline) -> None:
        return None


class _StreamTimelineFn(beam.DoFn):
    # One DoFn for job and capacity keys: state and timer specs are objects,
    # and two ParDos sharing them had capacity timers fire in the job
    # ParDo's state (Beam 2.77, FnApiRunner).
    EVENTS = BagStateSpec("events", BytesCoder())
    BASE = ReadModifyWriteStateSpec("base", BytesCoder())
    CLOCK = ReadModifyWriteStateSpec("clock", PickleCoder())
    FIRE = TimerSpec("fire", TimeDomain.WATERMARK)

    def __init__(self, window_s: int, allowed_lateness_s: int, max_silence_s: int, peak_flops: dict[str, float]):
        self.window_us = window_s * 1_000_000
        self.lateness_us = allowed_lateness_s * 1_000_000
        self.max_silence_us = max_silence_s * 1_000_000
        self.jobs = _JobSubject(self.window_us, peak_flops)
        self.capacity = _CapacitySubject(self.window_us)

    def _subject(self, key: str):
        return self.capacity if key.startswith(CAPACITY_KEY_PREFIX) else self.jobs

    # ---- arrivals ------------------------------------------------------------
    def process(self, element, events=beam.DoFn.StateParam(EVENTS), clock_state=beam.DoFn.StateParam(CLOCK),
                timer=beam.DoFn.TimerParam(FIRE)):
        key, batch = element
        clock = clock_state.read() or _Clock()
        on_time = []
        for raw in batch:
            event = Event._make(raw)
            if event.code != END and (clock.closed or event.time_us <= clock.frontier_us):
                yield beam.pvalue.TaggedOutput(LATE, self._late_row(key, event, clock))
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
        """When an event must be looked at: its window's end (an END: its own time)."""
        if event.code == END:
            return event.time_us
        return window_start(event.time_us, self.window_us) + self.window_us

    def _late_row(self, key, event: Event, clock: _Clock) -> dict:
        reference = clock.last_fired_us if clock.last_fired_us is not None else event.time_us
        return {
            "stream": stream_of(event.code), "event_id": event.event_id,
            "job_id": None if self._subject(key).is_capacity else key,
            "event_time_us": event.time_us, "type": event.code,
            "lateness_s": (reference - event.time_us) / 1e6, "allowed_lateness_s": self.lateness_us / 1e6,
        }

    # ---- firing ----------------------------------------------------------------
    @on_timer(FIRE)
    def fire(self, key=beam.DoFn.KeyParam, fired_at=beam.DoFn.TimestampParam, events=beam.DoFn.StateParam(EVENTS),
             base_state=beam.DoFn.StateParam(BASE), clock_state=beam.DoFn.StateParam(CLOCK),
             timer=beam.DoFn.TimerParam(FIRE)):
        now_us = fired_at.micros
        clock = clock_state.read() or _Clock()
        stored = base_state.read()
        subject = self._subject(key)
        base = pickle.loads(stored) if stored else _Base(subject.new_timeline(key))
        waiting = [Event._make(raw) for blob in events.read() for raw in pickle.loads(blob)]
        ends = [e for e in waiting if e.code == END]
        waiting = [e for e in waiting if e.code != END]
        end_us = min((e.time_us for e in ends), default=None)
        close_at = end_us if end_us is not None and end_us <= now_us else None
        if waiting:
            latest = max(e.time_us for e in waiting)
            base.last_event_us = latest if base.last_event_us is None else max(base.last_event_us, latest)

        frontier = close_at if close_at is not None else max(clock.frontier_us, now_us - self.lateness_us)
        settled = [e for e in waiting if e.time_us <= frontier]
        keep = [e for e in waiting if e.time_us > frontier]
        timeline = base.timeline
        timeline.feed(settled)
        # A repeat of a settled event has the same time, so it can only arrive
        # at or before the frontier, where it is late: settled ids need no memory.
        timeline.seen_ids.clear()
        if close_at is not None:
            timeline.close(close_at)
        else:
            timeline.advance_to(frontier)
        for window, delta in timeline.flush().items():
            base.totals[window] = _plus(base.totals[window], delta) if window in base.totals else delta
        yield from self._settled_outputs(key, subject, base)

        values = dict(base.totals)
        if close_at is None:
            provisional = pickle.loads(pickle.dumps(timeline, protocol=pickle.HIGHEST_PROTOCOL))
            provisional.feed([e for e in keep if e.time_us <= now_us])
            provisional.advance_to(now_us)
            for window, delta in provisional.flush(provisional=True).items():
                values[window] = _plus(values[window], delta) if window in values else delta
        else:
            for event in keep:  # what comes after the end of input is outside the run, as in batch
                yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(
                    None if subject.is_capacity else key, event, f"after the as-of time ({close_at} µs)"))
            keep = []

        version = max(now_us, clock.last_version_us + 1)
        changed = {w: v for w, v in values.items() if base.emitted.get(w) != v}
        if changed:
            clock.last_version_us = version
            base.emitted.update(changed)
            yield from subject.results(key, changed, version)
        summary = subject.summary(timeline)
        if summary is not None and summary != base.summary:
            base.summary = summary
            clock.last_version_us = version
            yield beam.pvalue.TaggedOutput(JOBS, {**summary, "version_us": version})

        events.clear()
        if close_at is None:
            keep += ends  # an end of input not yet due waits for its time
        if keep:
            events.add(pickle.dumps([tuple(e) for e in keep], protocol=pickle.HIGHEST_PROTOCOL))
        clock.frontier_us, clock.last_fired_us = frontier, now_us
        clock.next_fire_us = self._next_fire(now_us, subject, timeline, keep, base, close_at)
        if clock.next_fire_us is None:
            # Settled for good: keep only the clock, so stragglers are reported late.
            clock.closed = True
            base_state.clear()
        else:
            timer.set(Timestamp(micros=clock.next_fire_us))
            base_state.write(pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL))
        clock_state.write(clock)

    def _next_fire(self, now_us: int, subject, timeline, keep: list, base: _Base, close_at: int | None) -> int | None:
        if close_at is not None:
            return None
        following = now_us + self.window_us
        candidates = [max(following, self._due(e)) if e.code != END else e.time_us for e in keep]
        silent_since = base.last_event_us if base.last_event_us is not None else now_us
        if subject.alive(timeline) and following <= silent_since + self.max_silence_us:
            candidates.append(following)
        return min(candidates) if candidates else None

    def _settled_outputs(self, key, subject, base: _Base):
        """Rejections and count deltas of the events just settled into the base."""
        timeline = base.timeline
        for rejection in timeline.rejections:
            yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(
                None if subject.is_capacity else key, rejection.event, rejection.reason))
        timeline.rejections = []
        for (stream, outcome), total in timeline.counts().items():
            delta = total - base.counted.get((stream, outcome), 0)
            if delta:
                base.counted[(stream, outcome)] = total
                yield beam.pvalue.TaggedOutput(COUNTS, ((stream, outcome), delta))


class StreamSessionize(beam.PTransform):
    """(key, [events]) of jobs and capacity on a stream → versioned (job, window)
    vectors (main), capacity rows, job rows, rejections, late rows, counts."""

    def __init__(self, window_s: int, allowed_lateness_s: int, max_silence_s: int, peak_flops: dict[str, float]):
        super().__init__()
        self.fn = _StreamTimelineFn(window_s, allowed_lateness_s, max_silence_s, peak_flops)

    def expand(self, keyed_events):
        return keyed_events | "UpdateTimelines" >> beam.ParDo(self.fn).with_outputs(
            CAPACITY, JOBS, REJECTED, COUNTS, LATE, main=WINDOW_VECTORS)
