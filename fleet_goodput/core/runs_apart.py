"""STEP_RUN events cut where another event of their job falls inside them: the spans such an event
touches become their own events, applied one by one (fleet_goodput/core/timeline.py applies the
rest of each run at once)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from fleet_goodput.core import step_runs
from fleet_goodput.core.event_intake import in_event_order
from fleet_goodput.core.events import PROFILE, SAME_INSTANT_ORDERS, STEP_RUN, Event


def runs_apart_from_other_events(ordered: list[Event], runs: list[Event]) -> list[Event]:
    """`ordered` (holding `runs`) with every STEP_RUN cut where another event (but a profiler
    sample, which no step span's state depends on) falls between its first and last event in
    event order, in event order again: the spans such an event touches become their own events,
    the rest stay runs. A step or data-wait event of its own touches a span of its kind at its
    instant wherever event order puts it, as how the instant's events pair depends on them all
    (fleet_goodput/core/same_instant.py): an END at the span's START or END, a START at its START
    (a START at a span's END follows it, in event order as in meaning). Runs that overlap each
    other (a job's spans delivered twice) become their events."""
    barriers = [event[:3] for event in ordered if event.code != STEP_RUN and event.code != PROFILE]  # sorted
    own = {True: [], False: []}  # a run's kinds of events, by whether they start a span: (time, kind, step), sorted
    for event in ordered:
        if event.code in step_runs.CODES:
            step = event.payload[0] if event.payload else None
            own[event.code.endswith("_START")].append((event.time_us, step_runs.kind_of(event.code), step))
    own = {starts: sorted(edges, key=lambda edge: edge[:2]) for starts, edges in own.items()}
    bounds = [(run[:3], step_runs.last_key(run)) for run in runs]  # sorted by first
    overlapping = set()
    for before, after in zip(bounds, bounds[1:]):
        if after[0] <= before[1]:
            overlapping |= {before, after}
    out, kept = [], []
    for run, (first, last) in zip(runs, bounds):
        inside = barriers[bisect_left(barriers, first) : bisect_right(barriers, last)]
        ends_at = own[False][
            bisect_left(own[False], (first[0],), key=_time_and_kind) : bisect_right(
                own[False], (last[0], step_runs.KINDS), key=_time_and_kind
            )
        ]
        starts_at = own[True][
            bisect_left(own[True], (first[0],), key=_time_and_kind) : bisect_left(
                own[True], (last[0],), key=_time_and_kind
            )
        ]
        if (first, last) in overlapping:
            out += step_runs.expand(run)
        elif inside or ends_at or starts_at:
            out += _taken_apart(
                run, np.array([_instant(*barrier[:2]) for barrier in inside], dtype=np.int64), ends_at, starts_at
            )
        else:
            kept.append(run)
    if not out:
        return ordered
    return in_event_order([event for event in ordered if event.code != STEP_RUN] + kept + out)


def _instant(time_us, order):
    """An event's place in event order up to its id, as one number: time, then same-instant order."""
    return time_us * SAME_INSTANT_ORDERS + order


def _time_and_kind(edge: tuple) -> tuple:
    return edge[:2]


def _taken_apart(run: Event, barriers: np.ndarray, ends_at: list[tuple], starts_at: list[tuple]) -> list[Event]:
    """A STEP_RUN with events at `barriers` (their `_instant`s) inside it, and step or data-wait
    ENDs and STARTs of their own at the (time, kind, step)s `ends_at` and `starts_at`: the spans
    they touch as their events, the other spans as runs, cut where a barrier falls between two spans.

    A barrier touches a span when it falls between the span's START and END in event order, or
    at the START or END instant with the same same-instant order (which only the ids would set
    apart): taken apart, the span's events are applied one by one, which is always right. At the
    same instant in another order it is before or after the span: a checkpoint save that starts
    as a step ends and ends as the next starts cuts the run between them and leaves both spans in
    it. An END touches the spans of its kind that start or end at its time and that it could end
    (a STEP_END below a span's first step cannot), a START those of its kind that start at its time
    (`runs_apart_from_other_events`)."""
    times, steps, codes = step_runs.columns(run)
    starts, ends = _instant(times[0::2], step_runs.START_ORDER), _instant(times[1::2], step_runs.END_ORDER)
    touched = barriers.searchsorted(ends, side="right") > barriers.searchsorted(starts, side="left")
    if ends_at or starts_at:
        kinds, first_steps = step_runs.kinds_of(codes[0::2]), steps[0::2]
        start_times, end_times = times[0::2], times[1::2]
        for time_us, kind, step in ends_at:
            could_end = (kinds == kind) & ((start_times == time_us) | (end_times == time_us))
            touched |= could_end if step is None else could_end & (first_steps <= step)
        for time_us, kind, _ in starts_at:
            touched |= (kinds == kind) & (start_times == time_us)
    cut_after = np.append(
        barriers.searchsorted(starts[1:], side="left") > barriers.searchsorted(ends[:-1], side="right"), False
    )
    return step_runs.taken_apart(run, touched, cut_after)
