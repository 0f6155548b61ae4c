"""A job's back-to-back step spans as one event: less Python work per event, the same figures.

Nearly every runtime event is a STEP_START or STEP_END, and a job emits its
step spans back to back: a STEP_END at the instant of the next STEP_START.
The columnar decoder (fleet_goodput/columnar.py) finds, per job and file,
each run of two or more such spans whose steps are plausible and never go
back, and hands the run on as one `STEP_RUN` event carrying every original
event in three compact values: the events' times and steps (int64 bytes,
STEP_START and STEP_END in turn) and their ids (one string, ids hold no
space). Its time, same-instant order and id are its first STEP_START's, so
it sorts where that event would.

A run stands for its events, never changes a figure, and is taken apart
wherever one event might be treated differently from the others:

- `split_at` cuts it at a time (the frontier, the as-of time), so late,
  waiting and settled events are those of the events themselves;
- the timeline (fleet_goodput/timeline.py) expands it where another event
  of the job falls inside it, where its state is one in which a step span
  does more than attribute its time (a queued job, a data wait or compile
  open, a step left open, steps going back, serving workloads), and where
  an id was seen before; every rejection and duplicate is of an event;
- counts are of its events (`size`), and so are late and rejected rows (`expand`).
"""

from __future__ import annotations

import numpy as np

from fleet_goodput.events import STEP_RUN, Event, same_instant_order

# A job's STEP_STARTs and STEP_ENDs with a step from one file, in columns, as the decoder hands them on.
STEP_BLOCK = "STEP_BLOCK"
START_ORDER, END_ORDER = same_instant_order("STEP_START"), same_instant_order("STEP_END")


def make_run(times: np.ndarray, steps: np.ndarray, ids: list[str]) -> tuple:
    """The STEP_RUN event of STEP_STARTs and STEP_ENDs in turn at `times` with `steps` and `ids`."""
    return (int(times[0]), START_ORDER, ids[0], STEP_RUN, (times.tobytes(), steps.tobytes(), " ".join(ids)))


def make_block(times: np.ndarray, steps: np.ndarray, starts: np.ndarray, ids: str) -> tuple:
    """The STEP_BLOCK of step events at `times` with `steps`, STEP_STARTs where `starts`, and
    the ids `ids` (space-separated)."""
    return (int(times.min()), 0, ids.split(" ", 1)[0], STEP_BLOCK,
            (times.astype(np.int64).tobytes(), steps.astype(np.int64).tobytes(),
             starts.astype(np.bool_).tobytes(), ids))


def collapse(events: list) -> list:
    """A job's events with its STEP_BLOCKs (from every file) taken apart: each run of two or more
    back-to-back step spans as a STEP_RUN, every other step event as itself.

    A span is a STEP_START followed, in event order, by a STEP_END lasting a while with no more
    steps than microseconds (else the timeline rejects the end); the next span follows it when it
    starts at the instant it ends, at or above the step it ended at (else the steps go back: an
    implicit restore). Events of the job that are not in the blocks may still fall inside a run:
    the timeline then takes the spans they touch apart.
    """
    blocks = [event for event in events if event[3] == STEP_BLOCK]
    if not blocks:
        return events
    out = [event for event in events if event[3] != STEP_BLOCK]
    times = np.concatenate([np.frombuffer(block[4][0], dtype=np.int64) for block in blocks])
    steps = np.concatenate([np.frombuffer(block[4][1], dtype=np.int64) for block in blocks])
    starts = np.concatenate([np.frombuffer(block[4][2], dtype=np.bool_) for block in blocks])
    ids = " ".join(block[4][3] for block in blocks).split(" ")
    orders = np.where(starts, START_ORDER, END_ORDER)
    order = np.lexsort((orders, times))  # event order: time, same-instant order, then id (below)
    if ((np.diff(times[order]) == 0) & (np.diff(orders[order]) == 0)).any():  # rare: ties to order by id
        order = np.array(sorted(range(len(ids)), key=lambda index: (times[index], orders[index], ids[index])))
    times, steps, starts = times[order], steps[order], starts[order]
    ids = [ids[index] for index in order.tolist()]
    duration, climb = times[1:] - times[:-1], steps[1:] - steps[:-1]
    span = np.append(starts[:-1] & ~starts[1:] & (duration > 0) & (climb >= 0) & (climb + 1 <= duration), False)
    follows = np.zeros_like(span)
    follows[2:] = span[2:] & span[:-2] & (times[1:-1] == times[2:]) & (steps[2:] >= steps[1:-1])
    first_spans = np.flatnonzero(span & ~follows)
    spans_in = np.diff(np.append(np.searchsorted(np.flatnonzero(span), first_spans), span.sum()))
    member = np.zeros_like(span)
    for first, count in zip(first_spans[spans_in >= 2].tolist(), spans_in[spans_in >= 2].tolist()):
        stop = first + 2 * count
        out.append(make_run(times[first:stop], steps[first:stop], ids[first:stop]))
        member[first:stop] = True
    alone = np.flatnonzero(~member).tolist()
    for time_us, step, start, event_id in zip(times[alone].tolist(), steps[alone].tolist(), starts[alone].tolist(),
                                              [ids[index] for index in alone]):
        out.append((time_us, START_ORDER, event_id, "STEP_START", (step,)) if start
                   else (time_us, END_ORDER, event_id, "STEP_END", (step,)))
    return out


def arrays(run) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(times, steps, ids) of a STEP_RUN's events: STEP_START and STEP_END in turn."""
    times, steps, ids = run[4]
    return np.frombuffer(times, dtype=np.int64), np.frombuffer(steps, dtype=np.int64), ids.split(" ")


def is_run(event) -> bool:
    return event[3] == STEP_RUN


def size(event) -> int:
    """The number of events an event stands for."""
    return len(event[4][1]) // 8 if event[3] == STEP_RUN else 1


def end_us(event) -> int:
    """The time of its last event."""
    return int.from_bytes(event[4][0][-8:], "little", signed=True) if event[3] == STEP_RUN else event[0]


def last_key(run) -> tuple[int, int, str]:
    """(time, same-instant order, id) of a STEP_RUN's last event, its STEP_END: it sorts there."""
    return end_us(run), END_ORDER, run[4][2].rsplit(" ", 1)[-1]


def expand(event) -> list[Event]:
    """The events a STEP_RUN stands for (a plain event: itself)."""
    if event[3] != STEP_RUN:
        return [Event._make(event)]
    times, steps, ids = arrays(event)
    codes = (("STEP_START", START_ORDER), ("STEP_END", END_ORDER))
    return [Event(time_us, codes[index % 2][1], event_id, codes[index % 2][0], (step,))
            for index, (time_us, step, event_id) in enumerate(zip(times.tolist(), steps.tolist(), ids))]


def originals(events) -> list[Event]:
    """`events` with every STEP_RUN expanded."""
    return [original for event in events for original in expand(event)]


def spans_of(run, first: int, stop: int) -> list:
    """Spans `first` to `stop` (excluded) of a STEP_RUN: a STEP_RUN of them, or nothing."""
    if stop <= first:
        return []
    times, steps, ids = arrays(run)
    return [Event._make(make_run(times[2 * first:2 * stop], steps[2 * first:2 * stop], ids[2 * first:2 * stop]))]


def split_at(events, time_us: int) -> tuple[list, list]:
    """(events at or before `time_us`, events after it), a STEP_RUN cut between its events."""
    before, after = [], []
    for event in events:
        if event[3] != STEP_RUN or end_us(event) <= time_us:
            (before if event[0] <= time_us else after).append(event)
            continue
        if event[0] > time_us:
            after.append(event)
            continue
        starts = arrays(event)[0][0::2]
        span = int(np.searchsorted(starts, time_us, side="right")) - 1  # starts at or before, ends after
        originals_of_span = expand(spans_of(event, span, span + 1)[0])
        before += spans_of(event, 0, span) + originals_of_span[:1]
        after += originals_of_span[1:] + spans_of(event, span + 1, len(starts))
    return before, after
