"""Sessionizing jobs and capacity in event time, continuing from saved state.

Batch runs (one run, or a run that continues the store's earlier runs) join
each key's new events with its saved state (`fleet_goodput/core/session.py`), then
advance every key to the run's as-of time T: late events (at or before the
previous frontier) are set aside, the rest wait in the key's state, which
settles up to the frontier T − allowed lateness and reports its figures as
of T. Events after T wait in the state too, and count in the run whose T
reaches them. By default T is the time the scheduler's clock has reached
(fleet_goodput/core/asof.py), known from the files' latest scheduler event times
before any key advances.

Streaming (transforms/stream_sessionize.py) advances the same state at each
window end, so batch, continued batch and streaming share one state model.
"""

from __future__ import annotations

from dataclasses import dataclass

import apache_beam as beam

from fleet_goodput.core import step_runs
from fleet_goodput.core.asof import CLOCK_STREAM, default_as_of, history_start, kept_times
from fleet_goodput.core.continuation import Continuation
from fleet_goodput.core.events import Event, is_saved, stream_of, unpack
from fleet_goodput.core.keys import is_capacity_key, parse_capacity_key
from fleet_goodput.core.session import Advance, KeyState, late_row, make_timeline, new_state, state_from_bytes
from fleet_goodput.core.timeutil import format_time_us

WINDOW_VECTORS, JOBS, REJECTED, PENDING_REJECTED = "window_vectors", "jobs", "rejected", "rejected_pending"
COUNTS, PENDING_COUNTS, CAPACITY, LATE, STATE = "counts", "pending_counts", "capacity", "late", "state"
NO_AS_OF_YET = (
    "no scheduler event up to a day past this machine's clock has arrived yet, so there is no as-of time to place it at"
)


@dataclass(frozen=True)
class KeyRules:
    window_s: int
    allowed_lateness_s: int
    max_silence_us: int  # how long a silent key's state is kept (RunSettings.max_silence_us)
    peak_flops: dict

    @property
    def window_us(self) -> int:
        return self.window_s * 1_000_000


def capacity_row(key: str, start_us: int, stretch: tuple[int, int], changed_from_us: int, version_us: int) -> dict:
    """A `capacity_level` row: a capacity key's stretch of one level, (end, chips) from `start_us`,
    whose chip-time this version changed from `changed_from_us` on."""
    cluster, accelerator = parse_capacity_key(key)
    end_us, chips = stretch
    return {
        "cluster": cluster,
        "accelerator": accelerator,
        "start_time_us": start_us,
        "end_time_us": end_us,
        "chips": chips,
        "changed_from_us": changed_from_us,
        "version_us": version_us,
    }


def timeline_rejection(job_id: str | None, event: Event, reason: str) -> dict:
    return {
        "stream": stream_of(event.code),
        "event_id": event.event_id,
        "job_id": job_id,
        "event_time_us": event.time_us,
        "type": event.code,
        "reason": reason,
        "source": None,
        "records": 1,
    }


def job_of(key: str) -> str | None:
    return None if is_capacity_key(key) else key


def load_state(key: str, blobs: list, rules: KeyRules, continuation: Continuation = Continuation()) -> KeyState:
    """The key's saved state (the first of `blobs`), or a new one from the continuation's frontier."""
    if blobs:
        return state_from_bytes(blobs[0])
    timeline = make_timeline(key, is_capacity_key(key), rules.window_us, rules.peak_flops)
    frontier = continuation.frontier_us
    return new_state(key, timeline) if frontier is None else new_state(key, timeline, frontier)


def admit(state: KeyState, events, rules: KeyRules):
    """Hold the key's new events in its state; yields the late ones. Events after the as-of time
    wait in the state like any other: the run whose as-of time reaches them counts them."""
    key = state.key
    for event in state.admit(events):
        yield beam.pvalue.TaggedOutput(
            LATE, late_row(job_of(key), event, state.frontier_us, rules.allowed_lateness_s * 1_000_000)
        )


def reject_before_history(state: KeyState, start_us: int | None):
    """Reject the key's waiting scheduler events dated before the fleet's history (a clock reset)."""
    if start_us is None:
        return
    kept, before = [], []
    for event in state.waiting:
        (before if event.time_us < start_us and stream_of(event.code) == CLOCK_STREAM else kept).append(event)
    if before:
        state.waiting = kept
        for event in before:
            days = (start_us - event.time_us) / 86_400e6
            yield beam.pvalue.TaggedOutput(
                REJECTED,
                timeline_rejection(
                    job_of(state.key),
                    event,
                    (
                        f"dated {days:,.0f} days before the fleet's history, which starts at {format_time_us(start_us)} "
                        "(a clock reset to a default date?): no figure rests on it"
                    ),
                ),
            )


class ClockFn(beam.CombineFn):
    """The scheduler's kept (time, key), the store's and the run's (fleet_goodput/core/asof.py) → the run's
    clock: {"as_of_us": the run's as-of time, given or the default, "kept_times": what the store keeps next,
    "history_start_us": where the fleet's history starts, or None}."""

    def __init__(self, given_as_of_us: int | None, continuation: Continuation):
        self.given_as_of_us = given_as_of_us
        self.continuation = continuation

    def create_accumulator(self):
        return list(self.continuation.kept_times)

    def add_input(self, kept, times):
        return kept_times(kept, times)

    def merge_accumulators(self, accumulators):
        return kept_times(*accumulators)

    def extract_output(self, kept):
        as_of_us = self.given_as_of_us
        if as_of_us is None:
            as_of_us = default_as_of(kept, self.continuation.as_of_us)
        start_us = self.continuation.history_start_us
        return {
            "as_of_us": as_of_us,
            "kept_times": kept,
            "history_start_us": start_us if start_us is not None else history_start(kept),
        }


def _as_of_of(clock: dict) -> int | None:
    return clock["as_of_us"]


class _AdvanceKeyFn(beam.DoFn):
    """(key, its packed batches and saved state) → the key's outputs as of the run's clock."""

    def __init__(self, rules: KeyRules, continuation: Continuation):
        self.rules = rules
        self.continuation = continuation

    def process(self, grouped, clock):
        key, values = grouped
        blobs, batches = [], []
        for value in values:
            if is_saved(value):
                blobs.append(value[1])
            else:
                batches.append(value)
        state = load_state(key, blobs, self.rules, self.continuation)
        events = step_runs.collapse([event for batch in batches for event in unpack(batch)])
        yield from admit(state, events, self.rules)
        yield from reject_before_history(state, clock["history_start_us"])
        yield from self._advance(state, clock["as_of_us"])

    def _advance(self, state: KeyState, as_of_us: int | None):
        """Advance the key to `as_of_us` and yield its outputs."""
        key, job_id = state.key, job_of(state.key)

        def rejection(tag, event, reason):
            return beam.pvalue.TaggedOutput(tag, timeline_rejection(job_id, event, reason))

        if as_of_us is None:
            # No scheduler event has set the clock yet, so there is no as-of time to
            # advance to: every event waits, its rejection provisional, for an
            # event (a SUBMIT in a file not yet landed, say) that lets it in.
            reasons = state.rejection_reasons()
            for event in step_runs.originals(state.waiting):
                yield rejection(PENDING_REJECTED, event, reasons.get(event) or NO_AS_OF_YET)
            yield beam.pvalue.TaggedOutput(STATE, {"key": key, "blob": state.to_bytes()})
            return
        reached = self.continuation.after(as_of_us, self.rules.allowed_lateness_s * 1_000_000)
        advance = state.advance(as_of_us, reached.frontier_us, self.rules.max_silence_us)
        yield from settled_outputs(key, advance, reached.version_us)
        for event, reason in advance.provisional_rejections:
            yield rejection(PENDING_REJECTED, event, reason)
        for outcome, count in advance.provisional_counts.items():
            yield beam.pvalue.TaggedOutput(PENDING_COUNTS, (outcome, count))
        if not state.finished:
            yield beam.pvalue.TaggedOutput(STATE, {"key": key, "blob": state.to_bytes()})


def settled_outputs(key: str, advance: Advance, version_us: int):
    """What advancing `key` settled, as the sessionizer's outputs of version `version_us`: its
    changed windows' vectors (main) or capacity stretches, its job row, its rejections and counts.
    Batch (as of the run's clock) and streaming (at each window end) advance keys alike."""
    job_id = job_of(key)
    if job_id is None:
        for start_us, stretch in advance.windows.items():
            yield beam.pvalue.TaggedOutput(
                CAPACITY, capacity_row(key, start_us, stretch, advance.changed_from[start_us], version_us)
            )
    else:
        for window, vector in advance.windows.items():
            yield key, window, version_us, vector
    if advance.summary is not None:
        yield beam.pvalue.TaggedOutput(JOBS, {**advance.summary, "version_us": version_us})
    for event, reason in advance.settled_rejections:
        yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(job_id, event, reason))
    for outcome, count in advance.settled_counts.items():
        yield beam.pvalue.TaggedOutput(COUNTS, (outcome, count))


class SessionizeKeys(beam.PTransform):
    """{"events": (key, packed batch) and (key, saved state) (`fleet_goodput.core.events.pack`, `saved`),
    "kept_times": [int]} → the outputs named above.

    A key's batches and saved state are joined by one GroupByKey of the one
    collection that holds both (the read step's): joined from two, Beam's local
    runner would flatten them in a stage of its own first, and every event
    would cross its shuffle twice (docs/performance.md).

    `given_as_of_us` is the given as-of time (--as_of), or None for the default, the time the
    scheduler's clock has reached (fleet_goodput/core/asof.py). It is known from
    the scheduler's latest event times ("kept_times", each file's) before
    any key advances, so every key advances once.
    The run's clock comes out as "clock" ({"as_of_us", "kept_times"}: the
    store keeps the latter for the next run) and its as-of time as "as_of".
    """

    def __init__(self, rules: KeyRules, continuation: Continuation, given_as_of_us: int | None):
        super().__init__()
        self.rules = rules
        self.continuation = continuation
        self.given_as_of_us = given_as_of_us

    def expand(self, inputs):
        outputs_of = (CAPACITY, JOBS, REJECTED, PENDING_REJECTED, COUNTS, PENDING_COUNTS, STATE, LATE)
        clock_fn = ClockFn(self.given_as_of_us, self.continuation)
        events = inputs["events"]
        # Without new scheduler events the clock is what the combine gives for none, as a side
        # input's default: one Beam step less than CombineGlobally's own default.
        clock = inputs["kept_times"] | "ReadTheClock" >> beam.CombineGlobally(clock_fn).without_defaults()
        clock_side = beam.pvalue.AsSingleton(
            clock, default_value=clock_fn.extract_output(clock_fn.create_accumulator())
        )
        grouped = events | "JoinSavedState" >> beam.GroupByKey()
        by_tag = grouped | "AdvanceKeys" >> beam.ParDo(
            _AdvanceKeyFn(self.rules, self.continuation), clock_side
        ).with_outputs(*outputs_of, main=WINDOW_VECTORS)
        outputs = {tag: by_tag[tag] for tag in (WINDOW_VECTORS, *outputs_of)}
        # The clock as one element, whether or not the run read a scheduler event.
        the_clock = (
            events.pipeline
            | "OneClock" >> beam.Create([None])
            | "TheClock" >> beam.Map(lambda _, clock: clock, clock_side)
        )
        outputs["clock"] = the_clock
        outputs["as_of"] = the_clock | "TheAsOf" >> beam.Map(_as_of_of)
        return outputs
