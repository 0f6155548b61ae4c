"""A job's events as a timeline takes them: in one event order whatever order they arrived in, each
event_id once (a repeat is a duplicate, another event under a seen id a conflict), and a rejected event
kept with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet_goodput.core import step_runs
from fleet_goodput.core.events import STEP_RUN, Event

DUPLICATE = "duplicate"


def in_event_order(events: list[Event]) -> list[Event]:
    """`events` sorted by time, same-instant order, id, then content: the same
    order whatever order they arrived in."""
    try:
        return sorted(events)
    except TypeError:  # equal up to a payload field that is None in one and set in the other
        return sorted(events, key=lambda event: (event[:4], repr(event.payload)))


def repeated_id(seen_ids: dict[str, tuple], event: Event) -> str | None:
    """DUPLICATE for a repeat of a seen event, a conflict reason for another
    event under a seen event_id, None (and remembered) for a new id.

    The first event is remembered as a plain tuple: a timeline is pickled
    between pipeline steps, and named tuples pickle several times slower.
    """
    first = seen_ids.get(event.event_id)
    if first is None:
        seen_ids[event.event_id] = tuple(event)
        return None
    if first[3] == STEP_RUN:  # one of the events the run stands for
        first = next(original for original in step_runs.expand(first) if original.event_id == event.event_id)
    if first == event:
        return DUPLICATE
    first = Event._make(first)
    return (
        f"event_id conflict: already carried by a different event ({first.code} at {first.time_us} µs); "
        f"the earlier in event-time order is kept"
    )


@dataclass
class Rejection:
    event: Event
    reason: str


class SeenIds:
    """The event_ids a job's timeline has seen, each with the first event that carried it.

    A repeated event_id is found by looking every event's id up among those seen. Where no id of a
    feed's events repeats another's or one seen before (one set says so), they are applied without
    the look-ups and kept aside, to be indexed only if asked: the key step forgets the ids of
    settled events before any later feed.
    """

    def __init__(self, indexed: dict[str, tuple] | None = None):
        self._indexed: dict[str, tuple] = {} if indexed is None else indexed
        self.unindexed: list = []  # events and runs applied whose ids are new and their own, not yet indexed

    @property
    def indexed(self) -> dict[str, tuple]:
        """event_id -> the first event that carried it (a STEP_RUN, for each of the events it stands for)."""
        if self.unindexed:
            for applied in self.unindexed:
                if applied[3] == STEP_RUN:
                    self._indexed.update(dict.fromkeys(step_runs.ids(applied), tuple(applied)))
                else:
                    self._indexed[applied[2]] = tuple(applied)
            self.unindexed = []
        return self._indexed

    def forget(self) -> None:
        """Forget every id seen (the key step does, once events are settled: a repeat of one arrives late)."""
        self._indexed, self.unindexed = {}, []

    def all_new(self, ordered: list[Event]) -> bool:
        """Whether no event of `ordered` carries an id seen before or another's of them."""
        return not self.indexed and step_runs.distinct_ids(ordered)
