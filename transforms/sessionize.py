"""Sessionizing jobs and capacity in event time with keyed state and timers.

Each job's events collect in its keyed state; an event-time timer fires when
the watermark reaches the as-of time, and the job's `JobTimeline` turns the
events into chip-time per category and window. The same structure serves
streams: the timeline is incremental, so firing it at every window end and
flushing deltas needs no other change here than where the timer is set.
"""

from __future__ import annotations

import pickle

import apache_beam as beam
from apache_beam.coders import BytesCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

from fleet_goodput.capacity import CapacityTimeline
from fleet_goodput.decode import parse_capacity_key
from fleet_goodput.events import Event, stream_of
from fleet_goodput.timeline import JobTimeline

WINDOW_VECTORS, JOBS, REJECTED, COUNTS, CAPACITY = "window_vectors", "jobs", "rejected", "counts", "capacity"


def _take_events(bag, as_of_us: int) -> tuple[list[Event], list[Event]]:
    """The buffered events of a key: those up to the as-of time, and those after it."""
    current, later = [], []
    for pickled in bag.read():
        for raw in pickle.loads(pickled):
            event = Event._make(raw)
            (current if event.time_us <= as_of_us else later).append(event)
    bag.clear()
    return current, later


def _after_as_of(key: str | None, events: list[Event], as_of_us: int):
    for event in events:
        yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(key, event, f"after the as-of time ({as_of_us} µs)"))


def capacity_row(key: str, window_start_us: int, chip_us: int, version_us: int) -> dict:
    """A `capacity_window` row of a capacity key's window."""
    cluster, accelerator = parse_capacity_key(key)
    return {"cluster": cluster, "accelerator": accelerator, "window_start_us": window_start_us,
            "capacity_chip_s": chip_us / 1e6, "version_us": version_us}


def timeline_rejection(job_id: str | None, event: Event, reason: str) -> dict:
    return {
        "stream": stream_of(event.code), "event_id": event.event_id, "job_id": job_id,
        "event_time_us": event.time_us, "type": event.code, "reason": reason, "source": None, "records": 1,
    }


def _buffer_until_as_of(element, as_of_us: int, events, timer) -> None:
    """Keep a key's event batch until the watermark reaches the as-of time.

    The timer's own timestamp carries the as-of time to `on_timer`, which
    saves a state cell: the SDK's state cache sizes every object on each
    access, a cost per operation. For the same reason a batch is buffered as
    one pickled blob rather than a list of tuples.
    """
    _, batch = element
    events.add(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
    timer.set(Timestamp(micros=as_of_us))


class _SessionizeJobFn(beam.DoFn):
    EVENTS = BagStateSpec("events", BytesCoder())
    AT_AS_OF = TimerSpec("at_as_of", TimeDomain.WATERMARK)

    def __init__(self, window_s: int, peak_flops: dict[str, float]):
        self.window_us = window_s * 1_000_000
        self.peak_flops = peak_flops

    def process(self, element, as_of_us, events=beam.DoFn.StateParam(EVENTS), timer=beam.DoFn.TimerParam(AT_AS_OF)):
        _buffer_until_as_of(element, as_of_us, events, timer)

    @on_timer(AT_AS_OF)
    def finish(self, key=beam.DoFn.KeyParam, events=beam.DoFn.StateParam(EVENTS), fired_at=beam.DoFn.TimestampParam):
        as_of_us = fired_at.micros
        current, later = _take_events(events, as_of_us)
        yield from _after_as_of(key, later, as_of_us)
        timeline = JobTimeline(key, self.window_us, self.peak_flops)
        timeline.feed(current)
        timeline.close(as_of_us)
        for window_start, vector in timeline.flush().items():
            yield key, window_start, as_of_us, vector
        if timeline.submit is not None:
            yield beam.pvalue.TaggedOutput(JOBS, {**timeline.summary(), "version_us": as_of_us})
        for rejection in timeline.rejections:
            yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(key, rejection.event, rejection.reason))
        for outcome, count in timeline.counts().items():
            yield beam.pvalue.TaggedOutput(COUNTS, (outcome, count))


class SessionizeJobs(beam.PTransform):
    """(job_id, [events]) → (job, window, version, vector) results, job rows, rejections, counts."""

    def __init__(self, window_s: int, peak_flops: dict[str, float], as_of_us):
        super().__init__()
        self.window_s = window_s
        self.peak_flops = peak_flops
        self.as_of_us = as_of_us  # a singleton side input

    def expand(self, job_events):
        return job_events | "BuildJobTimelines" >> beam.ParDo(
            _SessionizeJobFn(self.window_s, self.peak_flops), self.as_of_us
        ).with_outputs(JOBS, REJECTED, COUNTS, main=WINDOW_VECTORS)


class _MeasureCapacityFn(beam.DoFn):
    EVENTS = BagStateSpec("events", BytesCoder())
    AT_AS_OF = TimerSpec("at_as_of", TimeDomain.WATERMARK)

    def __init__(self, window_s: int):
        self.window_us = window_s * 1_000_000

    def process(self, element, as_of_us, events=beam.DoFn.StateParam(EVENTS), timer=beam.DoFn.TimerParam(AT_AS_OF)):
        _buffer_until_as_of(element, as_of_us, events, timer)

    @on_timer(AT_AS_OF)
    def finish(self, key=beam.DoFn.KeyParam, events=beam.DoFn.StateParam(EVENTS), fired_at=beam.DoFn.TimestampParam):
        as_of_us = fired_at.micros
        current, later = _take_events(events, as_of_us)
        yield from _after_as_of(None, later, as_of_us)
        timeline = CapacityTimeline(self.window_us)
        timeline.feed(current)
        timeline.close(as_of_us)
        for window_start, chip_us in timeline.flush().items():
            yield capacity_row(key, window_start, chip_us, as_of_us)
        for rejection in timeline.rejections:  # event_id conflicts
            yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(None, rejection.event, rejection.reason))
        for outcome, count in timeline.counts().items():
            yield beam.pvalue.TaggedOutput(COUNTS, (outcome, count))


class MeasureCapacity(beam.PTransform):
    """(capacity key, [CAPACITY events]) → capacity chip-seconds per window, rejections, counts."""

    def __init__(self, window_s: int, as_of_us):
        super().__init__()
        self.window_s = window_s
        self.as_of_us = as_of_us

    def expand(self, capacity_events):
        return capacity_events | "BuildCapacityTimelines" >> beam.ParDo(
            _MeasureCapacityFn(self.window_s), self.as_of_us
        ).with_outputs(REJECTED, COUNTS, main=CAPACITY)

