"""Sessionizing jobs and capacity in event time, continuing from saved state.

Batch runs (one run, or a run that continues the store's earlier runs) join
each key's new events with its saved state (`fleet_goodput/session.py`), then
advance every key to the run's as-of time T: late events (at or before the
previous frontier) are set aside, the rest wait in the key's state, which
settles up to the frontier T − allowed lateness and reports its figures as
of T. By default T is the latest *accepted* event time, known only once every
key has fed its events: `SessionizeKeys` says how it is found without
feeding them twice.

Streaming (transforms/stream_sessionize.py) advances the same state at each
window end, so batch, continued batch and streaming share one state model.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import apache_beam as beam

from fleet_goodput.decode import is_capacity_key, parse_capacity_key
from fleet_goodput.events import Event, stream_of, unpack
from fleet_goodput.session import KeyState, late_row, make_timeline, new_state
from fleet_goodput.shards import Shard

WINDOW_VECTORS, JOBS, REJECTED, PENDING_REJECTED = "window_vectors", "jobs", "rejected", "rejected_pending"
COUNTS, PENDING_COUNTS, CAPACITY, LATE, STATE = "counts", "pending_counts", "capacity", "late", "state"
LATEST_ACCEPTED = "latest_accepted"
NO_AS_OF_YET = "no event has been accepted yet, so there is no as-of time to place it at"


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


def admit(state: KeyState, events, rules: KeyRules, given_as_of_us: int | None):
    """Hold the key's new events in its state; yields the late ones, and those after a given as-of time."""
    key = state.key
    for event in state.admit(events):
        yield beam.pvalue.TaggedOutput(LATE, late_row(job_of(key), event, state.frontier_us,
                                                      rules.allowed_lateness_s * 1_000_000))
    if given_as_of_us is not None:
        after = [e for e in state.waiting if e.time_us > given_as_of_us]
        state.waiting = [e for e in state.waiting if e.time_us <= given_as_of_us]
        for event in after:
            yield beam.pvalue.TaggedOutput(REJECTED, timeline_rejection(
                job_of(key), event, f"after the as-of time ({given_as_of_us} µs)"))


class AsOfFn(beam.CombineFn):
    """The latest of event times and the previous run's as-of time, or the given as-of time.

    Over the keys' latest accepted event times this is the run's as-of time
    (the previous run's is a lower bound, checked before the run starts);
    over every new event's time it is the guess the keys first advance to.
    """

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


def _latest_time(keyed_batch) -> int:
    _, (latest_us, _) = keyed_batch
    return latest_us


class _AdvanceKeyFn(beam.DoFn):
    """(key, {events, state}) → the key's outputs as of `as_of_us`.

    The first pass advances every key to the guessed as-of time and reports
    each key's latest accepted event (LATEST_ACCEPTED); the second (`redo`)
    runs only when those show the guess was wrong.
    """

    def __init__(self, rules: KeyRules, continuation: Continuation, given_as_of_us: int | None, redo: bool):
        self.rules = rules
        self.continuation = continuation
        self.given_as_of_us = given_as_of_us
        self.redo = redo

    def process(self, grouped, as_of_us, guess_us=None):
        if self.redo and as_of_us == guess_us:
            return
        yield from _as_pairs(self._outputs(grouped, as_of_us))

    def _outputs(self, grouped, as_of_us):
        key, parts = grouped
        state = _load(key, list(parts["state"]), self.rules, self.continuation)
        yield from admit(state, [event for batch in parts["events"] for event in unpack(batch)], self.rules,
                         self.given_as_of_us)
        reports_latest = not self.redo and self.given_as_of_us is None
        waiting = list(state.waiting) if reports_latest else []
        rejected = set()
        yield from self._advance(state, as_of_us, rejected)
        if reports_latest:
            accepted = (e for e in waiting if e not in rejected) if rejected else waiting
            latest = max((e.time_us for e in accepted), default=None)
            if latest is not None:
                yield beam.pvalue.TaggedOutput(LATEST_ACCEPTED, latest)

    def _advance(self, state: KeyState, as_of_us: int | None, rejected: set):
        """Advance the key to `as_of_us` and yield its outputs; adds the events it rejects to `rejected`."""
        key, job_id = state.key, job_of(state.key)

        def rejection(tag, event, reason):
            rejected.add(event)
            return beam.pvalue.TaggedOutput(tag, timeline_rejection(job_id, event, reason))

        if as_of_us is None:
            # The store has never accepted an event, so there is no as-of time to
            # advance to: every event waits, its rejection provisional, for an
            # event (a SUBMIT in a file not yet landed, say) that lets it in.
            reasons = state.rejection_reasons()
            for event in state.waiting:
                yield rejection(PENDING_REJECTED, event, reasons.get(event) or NO_AS_OF_YET)
            yield beam.pvalue.TaggedOutput(STATE, {"key": key, "blob": state.to_bytes()})
            return
        after = [e for e in state.waiting if e.time_us > as_of_us]
        if after:  # events the timeline would reject, which is why the as-of ends before them
            reasons = state.rejection_reasons()
            state.waiting = [e for e in state.waiting if e.time_us <= as_of_us]
            for event in after:
                yield rejection(REJECTED, event, reasons.get(event) or f"after the as-of time ({as_of_us} µs)")
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
            yield rejection(REJECTED, event, reason)
        for event, reason in advance.provisional_rejections:
            yield rejection(PENDING_REJECTED, event, reason)
        for outcome, count in advance.settled_counts.items():
            yield beam.pvalue.TaggedOutput(COUNTS, (outcome, count))
        for outcome, count in advance.provisional_counts.items():
            yield beam.pvalue.TaggedOutput(PENDING_COUNTS, (outcome, count))
        if not state.finished:
            yield beam.pvalue.TaggedOutput(STATE, {"key": key, "blob": state.to_bytes()})


def _guess_held(_, as_of_us, guess_us) -> bool:
    return as_of_us == guess_us


def _as_pairs(outputs):
    """A pass's outputs as (tag, value) pairs on one output, so that one filter and one
    split serve every tag: each Beam step costs a run a fixed overhead."""
    for output in outputs:
        if not isinstance(output, beam.pvalue.TaggedOutput):
            yield WINDOW_VECTORS, output
        elif output.tag == LATEST_ACCEPTED:
            yield output
        else:
            yield output.tag, output.value


def _by_tag(pair):
    tag, value = pair
    yield value if tag == WINDOW_VECTORS else beam.pvalue.TaggedOutput(tag, value)


def _owned(keyed, shard: Shard) -> bool:
    return shard.owns(keyed[0])


class SessionizeKeys(beam.PTransform):
    """{"events": (key, [events]), "state": (key, state blob)[, "latest_times": int]} → the outputs named above.

    `as_of_us` is the given as-of time, or None for the latest accepted event
    time; the as-of time used comes out as the "as_of" output, and the latest
    accepted event time (or the given as-of) as "reached".

    The latest accepted event time is known only once every key has fed its
    events, and every key's figures depend on it. Rather than feed every key
    twice, each key first advances to a guess, the latest new event time (or
    the given as-of time), which is right unless the timelines reject the
    run's last events; only then are the keys advanced again, to the right
    time, and the first pass's outputs dropped.

    With a `shard` (fleet_goodput/shards.py), "events" must hold only the
    shard's keys (`ReadAvroFiles` with the shard reads them so), the saved
    state is filtered to them here, the guess comes from every key's events
    through the input "latest_times" (each file's latest event time), and
    the check is the caller's: the outputs are the first pass's, "as_of" is
    the guess, and "reached" this shard's latest accepted event time.
    """

    def __init__(self, rules: KeyRules, continuation: Continuation, as_of_us: int | None,
                 shard: Shard | None = None):
        super().__init__()
        self.rules = rules
        self.continuation = continuation
        self.as_of_us = as_of_us
        self.shard = shard

    def expand(self, inputs):
        outputs_of = (CAPACITY, JOBS, REJECTED, PENDING_REJECTED, COUNTS, PENDING_COUNTS, STATE, LATE)
        as_of_fn = AsOfFn(self.as_of_us, self.continuation.as_of_us)
        events, state, shard = inputs["events"], inputs["state"], self.shard
        if shard is not None and shard.as_of_known:
            guess_side = beam.pvalue.AsSingleton(events.pipeline | "TheAsOf" >> beam.Create([shard.as_of_us]))
        else:
            # Without new events the guess is what the combine would give for none,
            # as a side input's default: one Beam step less than CombineGlobally's own default.
            latest_times = inputs["latest_times"] if shard is not None else (
                events | "LatestTimeOfBatch" >> beam.Map(_latest_time))
            guess = latest_times | "GuessAsOf" >> beam.CombineGlobally(as_of_fn).without_defaults()
            guess_side = beam.pvalue.AsSingleton(guess, default_value=as_of_fn.extract_output(
                as_of_fn.create_accumulator()))
        if shard is not None:  # its events come read for it (transforms/read.py); saved state holds every key
            state = state | "OwnState" >> beam.Filter(_owned, shard)
        grouped = {"events": events, "state": state} | "JoinSavedState" >> beam.CoGroupByKey()
        first = grouped | "AdvanceKeys" >> beam.ParDo(
            _AdvanceKeyFn(self.rules, self.continuation, self.as_of_us, redo=False), guess_side
        ).with_outputs(LATEST_ACCEPTED, main="pairs")
        reached = first[LATEST_ACCEPTED] | "AsOf" >> beam.CombineGlobally(as_of_fn)
        if shard is not None:
            pairs = first["pairs"]
            as_of = reached | "TheGuess" >> beam.Map(lambda _, guess_us: guess_us, guess_side)
        else:
            as_of, as_of_side = reached, beam.pvalue.AsSingleton(reached)
            again = grouped | "AdvanceKeysAgain" >> beam.ParDo(
                _AdvanceKeyFn(self.rules, self.continuation, self.as_of_us, redo=True), as_of_side, guess_side)
            held = first["pairs"] | "IfGuessHeld" >> beam.Filter(_guess_held, as_of_side, guess_side)
            pairs = (held, again) | "AllPairs" >> beam.Flatten()
        by_tag = pairs | "ByTag" >> beam.FlatMap(_by_tag).with_outputs(*outputs_of, main=WINDOW_VECTORS)
        outputs = {tag: by_tag[tag] for tag in (WINDOW_VECTORS, *outputs_of)}
        outputs["as_of"], outputs["reached"] = as_of, reached
        return outputs
