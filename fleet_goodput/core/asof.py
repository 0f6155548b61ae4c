"""The default as-of time of a run: how far the fleet's clock has reached.

A run reports every job as of one time T. By default T follows the
*scheduler* stream: the scheduler sees every job and every cluster, and its
events (a SUBMIT, an ALLOCATE, a FINISH, a CAPACITY level restated) are the
fleet's statement of what happened up to when. Runtime and profiler events
never move T, so a job's host with a wrong clock cannot drag the fleet
forward; their events after T wait in their job's state and count in the
run whose T reaches them (nothing after T is rejected for being after it).

Within the scheduler stream, a few events of one job far ahead of the rest,
a clock gone wrong, do not move T either: T is the latest scheduler event
time, except that a trailing group of at most `OUTLIER_EVENTS` events, all
of one job, that follows a silence of the scheduler of more than
`MAX_LEAD_US` is set aside (it waits, and counts once later events reach
it). Events of several jobs together, and capacity levels (which an
exporter restates at the end of an export to say how far it has seen), are
the fleet's word and always count. T never goes
back from the store's last run. A run given `--as_of` uses that instead.

Clocks also reset into the past (a host back at a default date): a leading
group of at most `OUTLIER_EVENTS` scheduler events that the rest of the
fleet's history follows only after more than `MAX_PAST_GAP_US` is rejected
with that reason (`history_start`), so no capacity or lifetime is stretched
over the years between. An event dated before the history of a store that
already has runs is late anyway (fleet_goodput/core/session.py).

Because the rules read only the store's latest and earliest `KEPT`
scheduler events (time and key), a store keeps them, and the as-of of a run
over everything equals the last as-of of any sequence of runs over the same
files: however the telemetry is cut, the figures are the same
(tests/runs/test_split_invariance.py).

Sources that say what they observed override all of this (Beam's watermark
rule). A file may state, per cluster, the period its source observed: from
when it began looking to how far it is complete (its Avro metadata,
fleet_goodput/telemetry/observed.py). The store keeps each cluster's stated
period beside the kept event times, as two entries under keys no job can have
(fleet_goodput/core/keys.py): the earliest start and the latest end any file
stated. Once any cluster is stated, T is the earliest of the clusters' ends
(each cluster is complete up to its end, the fleet up to the earliest), and
event times move nothing by themselves: the inference above is only for
stores whose files state nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from fleet_goodput.core.keys import is_capacity_key, observed_keys, parse_observed_key

CLOCK_STREAM = "scheduler"
OUTLIER_EVENTS = 10  # at most this many trailing events after a silence are taken for a wrong clock
MAX_LEAD_US = 3600 * 1_000_000  # a silence longer than this before them marks them
KEPT = OUTLIER_EVENTS + 1  # the latest event times the rule needs: the group and the event before it
# A silence this long after a store's first few events is a clock reset to a default date: years, not
# the months between two benchmark runs of an imported trace (tests/importers/test_importers_real_logs.py).
MAX_PAST_GAP_US = 366 * 86_400 * 1_000_000


def kept_times(*parts: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """The kept times: what a store keeps of the scheduler's clock, the `KEPT` latest and the `KEPT` earliest distinct
    (time, key) of all `parts`' events, latest first, then each cluster's stated period (its earliest
    start and latest end, `observed_entries`). Each part may itself be such a list: the latest (and
    earliest) of a union are among its parts' latest (and earliest)."""
    items, periods = set(), {}
    for part in parts:
        for time_us, key in part:
            edge = parse_observed_key(key)
            if edge is None:
                items.add((time_us, key))
            elif key not in periods or (time_us < periods[key] if edge[0] == "from" else time_us > periods[key]):
                periods[key] = time_us
    events = sorted(set(heapq.nlargest(KEPT, items)) | set(heapq.nsmallest(KEPT, items)), reverse=True)
    return events + sorted((time_us, key) for key, time_us in periods.items())


def event_times(kept: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """The kept (time, key) of events, without the stated periods' entries, in their order."""
    return [(time_us, key) for time_us, key in kept if parse_observed_key(key) is None]


def observed_periods(kept: Iterable[tuple[int, str]]) -> dict[str, tuple[int, int]]:
    """Each stated cluster's observed period (from, to) in the kept times, by cluster name."""
    edges: dict[str, dict[str, int]] = {}
    for time_us, key in kept:
        edge = parse_observed_key(key)
        if edge is not None:
            edges.setdefault(edge[1], {})[edge[0]] = time_us
    return {
        cluster: (edge.get("from", edge.get("to")), edge.get("to", edge.get("from")))
        for cluster, edge in sorted(edges.items())
    }


def observed_entries(periods: dict[str, tuple[int, int]]) -> list[tuple[int, str]]:
    """The kept-times entries of stated periods {cluster: (from, to)}."""
    entries = []
    for cluster, (from_us, to_us) in periods.items():
        from_key, to_key = observed_keys(cluster)
        entries += [(from_us, from_key), (to_us, to_key)]
    return entries


def clock_time(kept: list[tuple[int, str]]) -> int | None:
    """The time the scheduler stream has reached: the earliest stated cluster's end where any source
    stated its period, else inferred from its latest (time, key) events (module docstring)."""
    periods = observed_periods(kept)
    if periods:
        return min(to_us for _, to_us in periods.values())
    return inferred_time(event_times(kept))


def inferred_time(latest: list[tuple[int, str]]) -> int | None:
    """How far the scheduler's events reach, from their latest (time, key), latest first, when no
    source states it: the latest, but for a trailing group of one job after a silence (a clock ahead)."""
    if not latest:
        return None
    latest = latest[:KEPT]
    reached = latest[0][0]
    for index in range(min(OUTLIER_EVENTS, len(latest) - 1)):
        keys = {key for _, key in latest[: index + 1]}
        one_job = len(keys) == 1 and not is_capacity_key(next(iter(keys)))
        if one_job and latest[index][0] - latest[index + 1][0] > MAX_LEAD_US:
            reached = latest[index + 1][0]  # events 0..index, of one job, came after a silence: a clock ahead
    return reached


def set_aside(kept: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The kept events an inferred clock leaves after it (taken for a clock ahead); none where sources
    state their periods, which set the clock instead."""
    if observed_periods(kept):
        return []
    events = event_times(kept)
    reached = inferred_time(events)
    return [(time_us, key) for time_us, key in events[:KEPT] if reached is not None and time_us > reached]


def history_start(kept: list[tuple[int, str]]) -> int | None:
    """The time the fleet's history starts at, when a few scheduler events come before it: a clock
    reset to a default date. A leading group of at most `OUTLIER_EVENTS` events followed by more than
    `MAX_PAST_GAP_US` without any is set aside (None: nothing is)."""
    earliest = sorted(event_times(kept))[:KEPT]
    start = None
    for index in range(min(OUTLIER_EVENTS, len(earliest) - 1)):
        if earliest[index + 1][0] - earliest[index][0] > MAX_PAST_GAP_US:
            start = earliest[index + 1][0]
    return start


def default_as_of(kept: list[tuple[int, str]], previous_as_of_us: int | None) -> int | None:
    """A run's as-of time when none is given: the clock's time, never before the last run's."""
    reached = clock_time(kept)
    if reached is None or previous_as_of_us is None:
        return reached if reached is not None else previous_as_of_us
    return max(reached, previous_as_of_us)


CONFIRM_FLAG = "--confirm_as_of"


class SuspiciousAsOf(ValueError):
    """An --as_of far past the data: refused unless confirmed (CONFIRM_FLAG, `confirm_as_of=True`)."""


def check_as_of_near_data(
    as_of_us: int, kept: list[tuple[int, str]], allowed_lateness_s: int, previous: tuple[int, int | None] | None = None
) -> None:
    """SuspiciousAsOf when a given as-of time lies more than the allowed lateness past the newest
    scheduler event the store knows (`kept`): a typo such as a month too far would
    end every running job there, and turn the next day's events late. `previous` is the last run's
    (id, as-of), named in the message."""
    from fleet_goodput.core.timeutil import format_time_us

    newest_us = newest_known(kept)
    if newest_us is None:
        return
    past_us = as_of_us - newest_us
    if past_us <= allowed_lateness_s * 1_000_000:
        return
    last = f"; the last run, {previous[0]}, was as of {format_time_us(previous[1])}" if previous else ""
    raise SuspiciousAsOf(
        f"--as_of {format_time_us(as_of_us)} is {describe_span(past_us)} past the newest scheduler event "
        f"({format_time_us(newest_us)}), more than the allowed lateness ({describe_span(allowed_lateness_s * 1_000_000)})"
        f"{last}. Every job still running would be ended there, and events up to it that arrive later would be "
        f"late. Nothing was committed. If the time is right (the fleet fell silent), run again with {CONFIRM_FLAG}"
    )


# New files that state a cluster observed from more than this after the store's observation of it
# ended (or, for a cluster the store does not know, after its as-of time) leave a stretch nobody
# observed, and would move the as-of across it: refused unless confirmed. Long enough for a quiet
# cluster's daily or weekly imports, whose first record may come days after the last one; far short
# of the months a wrong folder jumps.
MAX_UNOBSERVED_US = 7 * 86_400 * 1_000_000


def check_observed_continuity(
    new: dict[str, tuple[int, int]], kept: list[tuple[int, str]], previous_as_of_us: int | None
) -> None:
    """SuspiciousAsOf when new files state a cluster observed only from well after the store's
    observation of it ended (`MAX_UNOBSERVED_US`): a wrong folder, or a collector that stopped for weeks.
    Nothing to check for a first run."""
    if previous_as_of_us is None:
        return
    from fleet_goodput.core.timeutil import format_time_us

    known = observed_periods(kept)
    for cluster, (from_us, _) in sorted(new.items()):
        reference_us = known[cluster][1] if cluster in known else previous_as_of_us
        if from_us - reference_us > MAX_UNOBSERVED_US:
            whose = (
                f"the store's observation of it ended at {format_time_us(reference_us)}"
                if cluster in known
                else f"the store is as of {format_time_us(reference_us)} and has never observed it"
            )
            raise SuspiciousAsOf(
                f"the new files state cluster {cluster!r} observed from {format_time_us(from_us)}, "
                f"{describe_span(from_us - reference_us)} after {whose}: nothing was observed in between, and the "
                "as-of time would move across it, ending every running job there (a wrong folder?). Nothing was "
                f"committed. If these are the right files, run again with {CONFIRM_FLAG}"
            )


def newest_known(kept: list[tuple[int, str]]) -> int | None:
    """The latest time the scheduler's kept times know of: an event's, or a stated period's end
    (None: neither, nothing to measure a time against)."""
    times = [time_us for time_us, _ in event_times(kept)] + [to for _, to in observed_periods(kept).values()]
    return max(times, default=None)


def describe_span(span_us: int) -> str:
    """A duration as people say it: `334 days 2 h`, `5 h 30 min`, `45 min`, `20 s`."""
    seconds = span_us // 1_000_000
    days, hours, minutes = seconds // 86_400, seconds % 86_400 // 3600, seconds % 3600 // 60
    if days:
        return f"{days} day{'s' if days != 1 else ''}" + (f" {hours} h" if hours else "")
    if hours:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    return f"{minutes} min" if minutes else f"{seconds} s"


def clock_account(kept: list[tuple[int, str]]) -> dict:
    """What set a run's clock, for its manifest and headline: `basis` "stated" (each cluster's observed
    period, which the manifest lists) or "inferred" (from the scheduler's event times, a guess, with the
    events it set aside as a clock ahead), or "none" (no scheduler event yet)."""
    from fleet_goodput.core.timeutil import format_time_us

    periods = observed_periods(kept)
    if periods:
        return {
            "basis": "stated",
            "observed": {
                cluster: {
                    "from": format_time_us(from_us),
                    "to": format_time_us(to_us),
                    "from_us": from_us,
                    "to_us": to_us,
                }
                for cluster, (from_us, to_us) in periods.items()
            },
        }
    events = event_times(kept)
    if not events:
        return {"basis": "none"}
    aside = set_aside(kept)
    return {
        "basis": "inferred",
        "set_aside": [
            {"time": format_time_us(time_us), "key": "capacity" if is_capacity_key(key) else key}
            for time_us, key in aside
        ],
    }
