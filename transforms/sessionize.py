"""Sessionizing jobs and capacity in event time, continuing from saved state.

Batch runs (one run, or a run that continues the store's earlier runs) join
each key's new events with its saved state (`fleet_goodput/session.py`), then
advance every key to the run's as-of time in two steps:

1. `AdmitEvents`: late events (at or before the previous frontier) are set
   aside; the rest wait in the key's state. Each key says the latest time it
   would accept, for the default as-of time (the latest *accepted* event).
2. `AdvanceKeys`: with the as-of time T known, every key settles up to the
   frontier T − allowed lateness and reports its figures as of T.

Streaming (transforms/stream_sessionize.py) advances the same state at each
window end, so batch, continued batch and streaming share one state model.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import apache_beam as beam

from fleet_goodput.decode import is_capacity_key, parse_capacity_key
from fleet_goodput.events import Event, stream_of
from fleet_goodput.session import KeyState, late_row, make_timeline, new_state

WINDOW_VECTORS, JOBS, REJECTED, PENDING_REJECTED = "window_vectors", "jobs", "rejected", "rejected_pending"
COUNTS, PENDING_COUNTS, CAPACITY, LATE, STATE = "counts", "pending_counts", "capacity", "late", "state"
LATEST_ACCEPTED = "latest_accepted"


@dataclass(frozen=True)
class Continuation:
    """Where the store's last run left off (all None for a first run)."""

    as_of_us: int | None = None
    frontier_us: int | None = None
    version_us: int | None = None

    def after(self, as_of_us: int, lateness_us: int) -> Continuation:
        """Where a run that reached `as_of_us` leaves off: its frontier never moves back, and its
        results' version is above the last one (two runs may share an as-of time)."""
        frontier_us = as_of_us - lateness_us
        if self.frontier_us is not None:
            frontier_us = max(frontier_us, self.frontier_us)
        version_us = as_of_us if self.version_us is None else max(as_of_us, self.version_us + 1)
        return Continuation(as_of_us, frontier_us, version_us)


@dataclass(frozen=True)
class KeyRules:
    window_s: int
    allowed_lateness_s: int
    retention_s: int
    peak_flops: dict

    @property
    def window_us(self) -> int:
        return self.window_s * 1_000_000


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


def job_of(key: str) -> str | None:
    return None if is_capacity_key(key) else key


def _load(key: str, blobs: list, rules: KeyRules, continuation: Continuation) -> KeyState:
    if blobs:
        return pickle.loads(blobs[0])
    timeline = make_timeline(key, is_capacity_key(key), rules.window_us, rules.peak_flops)
    frontier = continuation.frontier_us
    return new_state(key, timeline) if frontier is None else new_state(key, timeline, frontier)


def admit_events(grouped, rules: KeyRules, continuation: Continuation, given_as_of_us: int | None):
    """(key, {events, state}) → the key's state holding its new events, and its late and cut-off events."""
    key, parts = grouped
    state = _load(key, list(parts["state"]), rules, continuation)
    events = [event for batch in parts["events"] for event in batch]
    late = state.admit(events)
    for event in late:
        yield beam.pvalue.TaggedOutput(LATE, late_row(job_of(key), event, state.frontier_us,
                                                      rules.allowed_lateness_s * 1_000_000))
    if given_as_of_us is not None:
        after = [e for e in state.waiting if e.time_us > given_as_of_us]
        state.waiting = [e for e in state.waiting if e.time_us <= given_as_of_us]
        for event in after:
            yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(
                job_of(key), event, f"after the as-of time ({given_as_of_us} µs)"))
    if given_as_of_us is None and state.waiting:
        latest = state.latest_accepted_us(rules.allowed_lateness_s * 1_000_000)
        if latest is not None:
            yield beam.pvalue.TaggedOutput(LATEST_ACCEPTED, latest)
    yield key, state.to_bytes()


class AsOfFn(beam.CombineFn):
    """The run's as-of time: the one given, or the latest accepted event time,
    never before the previous run's (that is checked before the run starts)."""

    def __init__(self, given_us: int | None, previous_us: int | None):
        self.given_us = given_us
        self.previous_us = previous_us

    def create_accumulator(self):
        return self.previous_us

    def add_input(self, latest, time_us):
        return time_us if latest is None else max(latest, time_us)

    def merge_accumulators(self, accumulators):
        return max((a for a in accumulators if a is not None), default=None)

    def extract_output(self, latest):
        return self.given_us if self.given_us is not None else latest


class _AdvanceKeyFn(beam.DoFn):
    def __init__(self, rules: KeyRules, continuation: Continuation):
        self.rules = rules
        self.continuation = continuation

    def process(self, element, as_of_us):
        key, blob = element
        state: KeyState = pickle.loads(blob)
        job_id = job_of(key)
        if as_of_us is None:  # no event accepted anywhere: nothing to advance, every event rejected
            reasons = state.rejection_reasons()
            for event in state.waiting:
                yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(
                    job_id, event, reasons.get(event) or "no event of the run was accepted, so it has no as-of time"))
            return
        after = [e for e in state.waiting if e.time_us > as_of_us]
        if after:  # events the timeline would reject, which is why the as-of ends before them
            state.prefed = None  # the fed copies took these events too
            reasons = state.rejection_reasons()
            state.waiting = [e for e in state.waiting if e.time_us <= as_of_us]
            for event in after:
                reason = reasons.get(event) or f"after the as-of time ({as_of_us} µs)"
                yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(job_id, event, reason))
        reached = self.continuation.after(as_of_us, self.rules.allowed_lateness_s * 1_000_000)
        version = reached.version_us
        advance = state.advance(as_of_us, reached.frontier_us, self.rules.retention_s * 1_000_000)
        if job_id is None:
            for window, chip_us in advance.windows.items():
                yield beam.pvalue.TaggedOutput(CAPACITY, capacity_row(key, window, chip_us, version))
        else:
            for window, vector in advance.windows.items():
                yield key, window, version, vector
        if advance.summary is not None:
            yield beam.pvalue.TaggedOutput(JOBS, {**advance.summary, "version_us": version})
        for event, reason in advance.settled_rejections:
            yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(job_id, event, reason))
        for event, reason in advance.provisional_rejections:
            yield beam.pvalue.TaggedOutput(PENDING_REJECTED, timeline_rejection(job_id, event, reason))
        for outcome, count in advance.settled_counts.items():
            yield beam.pvalue.TaggedOutput(COUNTS, (outcome, count))
        for outcome, count in advance.provisional_counts.items():
            yield beam.pvalue.TaggedOutput(PENDING_COUNTS, (outcome, count))
        if not state.finished:
            yield beam.pvalue.TaggedOutput(STATE, {"key": key, "blob": state.to_bytes()})


class SessionizeKeys(beam.PTransform):
    """{"events": (key, [events]), "state": (key, state blob)} → the outputs named above.

    `as_of_us` is the given as-of time, or None for the latest accepted event
    time; the as-of time used comes out as the "as_of" output.
    """

    def __init__(self, rules: KeyRules, continuation: Continuation, as_of_us: int | None):
        super().__init__()
        self.rules = rules
        self.continuation = continuation
        self.as_of_us = as_of_us

    def expand(self, inputs):
        admitted = (
            inputs
            | "JoinSavedState" >> beam.CoGroupByKey()
            | "AdmitEvents" >> beam.FlatMap(admit_events, rules=self.rules, continuation=self.continuation,
                                            given_as_of_us=self.as_of_us).with_outputs(LATE, REJECTED, LATEST_ACCEPTED,
                                                                                       main="states")
        )
        as_of = admitted[LATEST_ACCEPTED] | "AsOf" >> beam.CombineGlobally(
            AsOfFn(self.as_of_us, self.continuation.as_of_us))
        advanced = admitted["states"] | "AdvanceKeys" >> beam.ParDo(
            _AdvanceKeyFn(self.rules, self.continuation), beam.pvalue.AsSingleton(as_of)
        ).with_outputs(CAPACITY, JOBS, REJECTED, PENDING_REJECTED, COUNTS, PENDING_COUNTS, STATE,
                       main=WINDOW_VECTORS)
        outputs = {tag: advanced[tag] for tag in (WINDOW_VECTORS, CAPACITY, JOBS, PENDING_REJECTED, COUNTS,
                                                  PENDING_COUNTS, STATE)}
        outputs[REJECTED] = (admitted[REJECTED], advanced[REJECTED]) | "AllTimelineRejections" >> beam.Flatten()
        outputs[LATE] = admitted[LATE]
        outputs["as_of"] = as_of
        return outputs
