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
