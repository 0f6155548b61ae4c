"""A job's spans that follow one another as one event: less Python work per event, the same figures.

Nearly every runtime event starts or ends a step span or a data wait, and a
job emits them one after the other. The columnar decoder (fleet_goodput/
columnar.py) hands each job's step events (those with a step) and data waits
(those without) of a file on in columns, as one `STEP_BLOCK`; the key step
merges a job's blocks from every file (`collapse`: a job's events may be
spread over many files) and makes each stretch of two or more spans next to
each other in event order, one at least a step span, whose steps are
plausible and never go back, into one `STEP_RUN` event. It carries every
original event in four compact values: the events' times, steps and codes
(bytes; a START and its END in turn) and their ids (`RunIds`, one string). Its time,
same-instant order and id are its first event's, so it sorts where that
event would.

A run stands for its events, never changes a figure, and is taken apart
wherever one event might be treated differently from the others:

- `split_at` cuts it at a time (the frontier, the as-of time), so late,
  waiting and settled events are those of the events themselves;
- the timeline (fleet_goodput/core/timeline.py) expands the spans another event of
  the job falls on, and those a step or data-wait event of its own shares an instant
  with (how an instant's events pair depends on them all: fleet_goodput/core/same_instant.py),
  and cuts the run where one falls between two spans; it
  expands the whole run where its state is one in which a span does more than
  take its time (a job not holding all its chips, a step, data wait or
  compile left open, steps going back) and where an id was seen before;
  every rejection and duplicate is of an event;
- counts are of its events (`size`), and so are late and rejected rows (`expand`).

What the timeline reads of a run's columns (its step spans' columns and facts, each window's
data-wait time and time between spans) is found for all the runs of a feed at once (`shapes`):
a job's runs hold a few dozen spans each, so numpy's fixed cost a call, not the spans, is what
a run costs, and a feed pays it once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fleet_goodput.core.events import SAME_INSTANT_ORDERS, STEP_RUN, Event, same_instant_order

# A job's step events (those with a step) and data waits (those without) from one file, in columns,
# as the decoder hands them on: the key step makes runs of them (`collapse`).
STEP_BLOCK = "STEP_BLOCK"
# The events a run holds, by their code in its columns: a STEP_START is code 0, and so on.
CODES = ("STEP_START", "STEP_END", "DATA_WAIT_START", "DATA_WAIT_END")
_CODE_NUMBERS = {code: number for number, code in enumerate(CODES)}
START_ORDER, END_ORDER = same_instant_order("STEP_START"), same_instant_order("STEP_END")
_ORDER_OF_CODE = tuple(same_instant_order(code) for code in CODES)
_ORDERS = np.array(_ORDER_OF_CODE)
_STEP_START, _STEP_END, _WAIT_START, _WAIT_END = range(4)


def code_numbers(codes) -> np.ndarray:
    """The numbers of `codes` (each one of CODES), as a run's columns hold them."""
    return np.array([_CODE_NUMBERS[code] for code in codes], dtype=np.int8)


# The kinds of span a run holds: 0 a step, 1 a data wait (a code number // 2).
KINDS = 2


def kind_of(code: str) -> int:
    """The kind of span (0 a step, 1 a data wait) a code of CODES starts or ends."""
    return _CODE_NUMBERS[code] // 2


def kinds_of(codes: np.ndarray) -> np.ndarray:
    """`kind_of` each code number of a run's columns."""
    return codes.astype(np.int64) // 2


def make_run(times: np.ndarray, steps: np.ndarray, codes: np.ndarray, ids) -> tuple:
    """The STEP_RUN event of the events at `times` with `steps` (0 for a data wait, which has
    none), `codes` (numbers of CODES: STARTs and ENDs in turn) and `ids` (a sequence of them, or
    one string of them space-separated), kept as `RunIds`."""
    text = ids if isinstance(ids, str) else ids.text if isinstance(ids, RunIds) else " ".join(ids)
    return (
        int(times[0]),
        START_ORDER,
        text.partition(" ")[0],
        STEP_RUN,
        (times.tobytes(), steps.tobytes(), codes.tobytes(), RunIds(text)),
    )


class RunIds:
    """A run's ids, a sequence of strings held space-separated in one string (ids hold no space):
    an id is made a Python string only where it is read. As a string each, a job of millions of
    events held a third of its key step's memory in them (docs/performance.md). It equals and
    sorts as the tuple of its ids, as a run's ids were kept before."""

    __slots__ = ("text", "_starts")

    def __init__(self, text: str):
        self.text = text
        self._starts = None  # where each id starts (`_where`), found when first needed

    # Pickled (a key's saved state) as the string of them, the form every version of this module
    # reads: a store written by this one stays readable by one from before.
    def __reduce__(self):
        return str, (self.text,)

    def __len__(self) -> int:
        return self.text.count(" ") + 1

    def __iter__(self):
        return iter(self.text.split(" "))

    def __getitem__(self, index):
        if isinstance(index, slice):
            first, stop, stride = index.indices(len(self))
            if stride != 1:
                return tuple(self)[index]
            return RunIds(self.stretch(first, stop)) if stop > first else ()
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("a run's id index out of range")
        return self.at(index)

    def __eq__(self, other) -> bool:
        if isinstance(other, RunIds):
            return self.text == other.text
        return tuple(self) == other if isinstance(other, tuple) else NotImplemented

    # Ordered as the tuples of the ids, against another's, a tuple of them or a string of them
    # (a run kept in a saved state), so that runs sort as when their ids were tuples.
    def __lt__(self, other) -> bool:
        other = _ids_tuple(other)
        return NotImplemented if other is None else tuple(self) < other

    def __le__(self, other) -> bool:
        other = _ids_tuple(other)
        return NotImplemented if other is None else tuple(self) <= other

    def __gt__(self, other) -> bool:
        other = _ids_tuple(other)
        return NotImplemented if other is None else tuple(self) > other

    def __ge__(self, other) -> bool:
        other = _ids_tuple(other)
        return NotImplemented if other is None else tuple(self) >= other

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def _where(self):
        """Where each id starts in `text`, and one past its end (id i ends before start i + 1); or,
        for a text not all ASCII (not from the columnar decoder), the ids split once."""
        if self._starts is None:
            text = self.text
            if text.isascii():  # a character a byte: the spaces' byte positions are theirs
                spaces = np.flatnonzero(np.frombuffer(text.encode("ascii"), dtype=np.uint8) == 32)
                self._starts = np.concatenate(([0], spaces + 1, [len(text) + 1]))
            else:
                self._starts = text.split(" ")
        return self._starts

    def at(self, index: int) -> str:
        """The id at `index` (0 or more)."""
        starts = self._where()
        if isinstance(starts, list):
            return starts[index]
        return self.text[starts[index] : starts[index + 1] - 1]

    def stretch(self, first: int, stop: int) -> str:
        """The ids at `first` to `stop` (excluded, past `first`), space-separated."""
        if self._starts is None and first == 0 and stop == len(self):  # all of them (one run of a job's events)
            return self.text
        starts = self._where()
        if isinstance(starts, list):
            return " ".join(starts[first:stop])
        return self.text[starts[first] : starts[stop] - 1]

    def joined(self, positions: np.ndarray) -> str:
        """The ids at `positions` (at least one), space-separated in that order."""
        if (np.diff(positions) == 1).all():  # a stretch: one slice
            return self.stretch(int(positions[0]), int(positions[-1]) + 1)
        return " ".join([self.at(index) for index in positions.tolist()])


def _ids_tuple(ids) -> tuple | None:
    """A run's ids as a tuple, from `RunIds`, a tuple or a string of them; None for anything else."""
    if isinstance(ids, (RunIds, tuple)):
        return tuple(ids)
    return tuple(ids.split(" ")) if isinstance(ids, str) else None


def make_block(times: np.ndarray, steps: np.ndarray, codes: np.ndarray, ids: str, prefix: str = "") -> tuple:
    """The STEP_BLOCK of events at `times` with `steps` (0 for a data wait), `codes` (numbers
    of CODES) and the ids `ids` (space-separated), each after `prefix`."""
    return make_blocks(times, steps, codes, [ids], [len(times)], [prefix])[0]


def make_blocks(
    times: np.ndarray, steps: np.ndarray, codes: np.ndarray, ids: list[str], counts: list[int], prefixes: list[str]
) -> list:
    """The STEP_BLOCKs of consecutive stretches of the events (as `make_block`'s): block i holds the
    next `counts[i]` events, whose ids are `prefixes[i]` before each of `ids[i]`. The columns are
    made bytes once, each block a slice of them: a file holds thousands of blocks.

    A block keeps its ids as (prefix, rests): a job's event ids repeat its job id (the
    simulator's, most recorders'), and said once a block, what crosses Beam's shuffle to the key
    step is a quarter smaller (`collapse` makes them whole)."""
    times, steps = times.astype(np.int64, copy=False), steps.astype(np.int64, copy=False)
    ends = np.cumsum(counts)
    firsts = ends - counts
    latest = np.maximum.reduceat(times, firsts).tolist() if len(times) else []  # for `events.pack`
    times, steps, codes = times.tobytes(), steps.tobytes(), codes.astype(np.int8, copy=False).tobytes()
    return [
        (
            latest_us,
            0,
            prefix + rests.partition(" ")[0],
            STEP_BLOCK,
            (times[8 * first : 8 * end], steps[8 * first : 8 * end], codes[first:end], (prefix, rests)),
        )
        for latest_us, first, end, rests, prefix in zip(latest, firsts.tolist(), ends.tolist(), ids, prefixes)
    ]


def whole_ids(prefix: str, rests: str) -> str:
    """A block's ids, space-separated, from its (`prefix`, `rests`): ids hold no space, so each
    space begins an id, and one replace (in C) makes them whole."""
    return prefix + rests.replace(" ", " " + prefix) if prefix else rests


def collapse(events: list) -> list:
    """A job's events with its STEP_BLOCKs (from every file) taken apart: each run of two or more
    spans that follow one another, one at least a step span, as a STEP_RUN; every other event of
    the blocks as itself.

    A span is a START followed, in event order, by its END: a data wait, or a step span lasting
    a while with no more steps than microseconds (else the timeline rejects the end). Spans next
    to each other in event order follow one another, idle time between them or not, unless a step
    span starts below the step the step span before it ended at (steps going back: an implicit
    restore). Events of the job that are not in the blocks may still fall inside a run: the
    timeline then takes the spans they touch apart.
    """
    blocks = [event for event in events if event[3] == STEP_BLOCK]
    if not blocks:
        return events
    out = [event for event in events if event[3] != STEP_BLOCK]
    times = np.frombuffer(b"".join([block[4][0] for block in blocks]), dtype=np.int64)
    steps = np.frombuffer(b"".join([block[4][1] for block in blocks]), dtype=np.int64)
    codes = np.frombuffer(b"".join([block[4][2] for block in blocks]), dtype=np.int8)
    ids = RunIds(" ".join([whole_ids(*block[4][3]) for block in blocks]))
    keys = times * SAME_INSTANT_ORDERS + _ORDERS[codes]  # event order up to the id: time, then same-instant order
    if (keys[1:] > keys[:-1]).all():  # in event order already, no two at one place (one file's, mostly)
        order = None  # no copy of the columns reordered
    else:
        order = keys.argsort(kind="stable")
        if (keys[order][1:] == keys[order][:-1]).any():  # rare: ties to order by id
            listed, keys_of = ids.text.split(" "), keys.tolist()
            order = np.array(sorted(range(len(listed)), key=lambda index: (keys_of[index], listed[index])))
        times, steps, codes = times[order], steps[order], codes[order]
    del keys
    count = len(times)
    duration, climb = times[1:] - times[:-1], steps[1:] - steps[:-1]
    is_step, is_wait = np.zeros(count, dtype=bool), np.zeros(count, dtype=bool)  # a span starts at the row
    is_step[:-1] = (
        (codes[:-1] == _STEP_START) & (codes[1:] == _STEP_END) & (duration > 0) & (climb >= 0) & (climb < duration)
    )
    is_wait[:-1] = (codes[:-1] == _WAIT_START) & (codes[1:] == _WAIT_END)
    span = is_step | is_wait
    # The step the last step span up to each event ended at (-1: none), for steps going back.
    step_end = np.zeros(count, dtype=bool)
    step_end[1:] = is_step[:-1]
    if step_end.any():
        last_end = np.maximum.accumulate(np.where(step_end, np.arange(count), -1))
        ended = np.where(last_end >= 0, steps[last_end], -1)
    else:
        ended = np.full(count, -1)
    follows = np.zeros_like(span)
    follows[2:] = span[2:] & span[:-2] & ~(is_step[2:] & (steps[2:] < ended[1:-1]))
    first_spans = (span & ~follows).nonzero()[0]
    span_rows = span.nonzero()[0]
    bounds = np.append(span_rows.searchsorted(first_spans), len(span_rows))
    member = np.zeros_like(span)
    for run_first, run_stop in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if run_stop - run_first < 2 or not is_step[span_rows[run_first:run_stop]].any():
            continue
        first, stop = int(span_rows[run_first]), int(span_rows[run_stop - 1]) + 2
        run_ids = ids.stretch(first, stop) if order is None else ids.joined(order[first:stop])
        out.append(make_run(times[first:stop], steps[first:stop], codes[first:stop], run_ids))
        member[first:stop] = True
    alone = (~member).nonzero()[0].tolist()
    at = alone if order is None else order[alone].tolist()
    out += _events(times[alone], steps[alone], codes[alone], [ids.at(index) for index in at])
    return out


def _events(times: np.ndarray, steps: np.ndarray, codes: np.ndarray, ids: list[str]) -> list[Event]:
    return [
        Event(time_us, _ORDER_OF_CODE[code], event_id, CODES[code], (step,) if code < _WAIT_START else (None,))
        for time_us, step, code, event_id in zip(times.tolist(), steps.tolist(), codes.tolist(), ids)
    ]


def arrays(run) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """(times, steps, codes, ids) of a STEP_RUN's events: a START and its END in turn."""
    return (*columns(run), ids(run))


def columns(run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, steps, codes) of a STEP_RUN's events: a START and its END in turn."""
    times, steps, codes, _ = run[4]
    return (
        np.frombuffer(times, dtype=np.int64),
        np.frombuffer(steps, dtype=np.int64),
        np.frombuffer(codes, dtype=np.int8),
    )


def _joined_ids(run) -> RunIds:
    """A STEP_RUN's ids as `RunIds` (in a run a key's saved state kept from before: a string of them, or a tuple)."""
    kept = run[4][3]
    if isinstance(kept, RunIds):
        return kept
    return RunIds(kept if isinstance(kept, str) else " ".join(kept))


class RunFacts(NamedTuple):
    """What resolving a run's step spans reads most, as Python ints (fleet_goodput/core/timeline.py's `StepRun`)."""

    start_us: int  # its first span's start
    end_us: int  # its last span's end
    first_step: int  # the step its first span starts at
    first_end_step: int  # the step its first span ends at
    last_step: int  # the step its last span ends at
    span_us: int  # the time in its spans
    # Each span starts past the step the one before it ended at, and ends at or past its own first
    # step: the steps of each are its own, so counting them needs no running highest step.
    own_steps: bool


class RunShape(NamedTuple):
    """What applying a STEP_RUN needs of its columns, the timeline's state aside (`shapes`)."""

    start_us: int  # its first event's time
    end_us: int  # its last event's time
    # (window start, data-wait time, time between spans) of each window it covers, in order; None
    # where a data wait or a time between spans of none is at the window edge it ends at
    windows: list[tuple[int, int, int]] | None
    facts: RunFacts | None  # of its step spans (None: it has none)
    starts: np.ndarray  # its step spans: each one's start, end, first and last step
    ends: np.ndarray
    firsts: np.ndarray
    lasts: np.ndarray


def shapes(runs: list, window_us: int) -> list[RunShape]:
    """Each STEP_RUN's `RunShape` in windows of `window_us`, computed for all of them at once: a
    few dozen numpy calls a feed rather than a dozen a run (a run holds a few dozen spans).
    The runs do not overlap, in event order (as the timeline feeds them)."""
    if not runs:
        return []
    times = np.frombuffer(b"".join([run[4][0] for run in runs]), dtype=np.int64)
    steps = np.frombuffer(b"".join([run[4][1] for run in runs]), dtype=np.int64)
    codes = np.frombuffer(b"".join([run[4][2] for run in runs]), dtype=np.int8)
    span_bounds = np.cumsum([0] + [len(run[4][2]) // 2 for run in runs])  # run i's spans: bounds[i] on
    firsts = span_bounds[:-1]
    span_starts, span_ends = times[0::2], times[1::2]
    lengths = span_ends - span_starts
    stepping = codes[0::2] == _STEP_START
    step_bounds = np.concatenate(([0], np.add.reduceat(stepping, firsts, dtype=np.int64).cumsum()))
    step_starts, step_ends = span_starts[stepping], span_ends[stepping]
    step_firsts, step_lasts = steps[0::2][stepping], steps[1::2][stepping]
    run_starts, run_ends = span_starts[firsts], span_ends[span_bounds[1:] - 1]
    windows = _by_window(window_us, run_starts, run_ends, firsts, span_starts, span_ends, lengths, stepping)
    facts = _step_facts(step_bounds, step_starts, step_ends, step_firsts, step_lasts)
    columns = zip(
        run_starts.tolist(), run_ends.tolist(), step_bounds[:-1].tolist(), step_bounds[1:].tolist(), windows, facts
    )
    return [
        RunShape(
            start,
            end,
            run_windows,
            run_facts,
            step_starts[first:stop],
            step_ends[first:stop],
            step_firsts[first:stop],
            step_lasts[first:stop],
        )
        for start, end, first, stop, run_windows, run_facts in columns
    ]


def run_facts(starts: np.ndarray, ends: np.ndarray, firsts: np.ndarray, lasts: np.ndarray) -> RunFacts:
    """The `RunFacts` of one run's step spans (at least one), as `shapes` finds them for a feed's."""
    return _step_facts(np.array([0, len(starts)]), starts, ends, firsts, lasts)[0]


def _step_facts(bounds, starts, ends, firsts, lasts) -> list[RunFacts | None]:
    """The `RunFacts` of each run's step spans (run i's: bounds[i] to bounds[i + 1]; None where it has none)."""
    if not len(starts):
        return [None] * (len(bounds) - 1)
    has = (bounds[1:] > bounds[:-1]).tolist()
    heads, tails = np.minimum(bounds[:-1], len(starts) - 1), np.maximum(bounds[1:] - 1, 0)
    spans_done = np.concatenate(([0], (ends - starts).cumsum()))
    # Running counts of what breaks `own_steps`: a span ending below its first step (before span i),
    # and a span starting at or below the step the span before it ended at (up to span i).
    backwards = np.concatenate(([0], (lasts < firsts).cumsum()))
    overlapping = np.concatenate(([0], (firsts[1:] <= lasts[:-1]).cumsum()))
    own = (backwards[bounds[1:]] == backwards[bounds[:-1]]) & (overlapping[tails] == overlapping[heads])
    columns = zip(
        has,
        starts[heads].tolist(),
        ends[tails].tolist(),
        firsts[heads].tolist(),
        lasts[heads].tolist(),
        lasts[tails].tolist(),
        (spans_done[bounds[1:]] - spans_done[bounds[:-1]]).tolist(),
        own.tolist(),
    )
    return [RunFacts(*values) if run_has else None for run_has, *values in columns]


def _by_window(window_us: int, run_starts, run_ends, firsts, span_starts, span_ends, lengths, stepping) -> list:
    """`RunShape.windows` of each run: its data-wait time and time between spans in each window.

    The time of each kind before a window edge inside a run is found from running totals over the
    spans: the spans that start before the edge, less what the last of them runs past it; a window's
    time is the difference between its two edges'. A run ending at a window edge is left to the
    caller (None), which then touches the window a stretch of none at that edge starts in, as
    adding stretch by stretch does."""
    run_windows = run_starts - run_starts % window_us
    # Edges inside each run: its windows' starts but the first (none where it ends at an edge).
    edge_counts = np.where(run_ends % window_us == 0, 0, (run_ends - run_ends % window_us - run_windows) // window_us)
    wait_lengths = np.where(stepping, 0, lengths)
    wait_totals = np.add.reduceat(wait_lengths, firsts).tolist()
    gap_totals = (run_ends - run_starts - np.add.reduceat(lengths, firsts)).tolist()
    run_of_edge = np.arange(len(firsts)).repeat(edge_counts)
    if len(run_of_edge):
        rank = np.arange(len(run_of_edge)) - (edge_counts.cumsum() - edge_counts).repeat(edge_counts)
        edges = run_windows[run_of_edge] + (rank + 1) * window_us
        spans_done = np.concatenate(([0], lengths.cumsum()))  # the time in spans before span i
        waits_done = np.concatenate(([0], wait_lengths.cumsum()))
        last = span_starts.searchsorted(edges) - 1  # the last span starting before each edge
        past = np.maximum(span_ends[last] - edges, 0)  # how far it runs past the edge
        first_span = firsts[run_of_edge]
        span_before = spans_done[last + 1] - past - spans_done[first_span]
        wait_before = (waits_done[last + 1] - np.where(stepping[last], 0, past) - waits_done[first_span]).tolist()
        gap_before = (edges - run_starts[run_of_edge] - span_before).tolist()
    out, edge = [], 0
    for window, multiple, ends_at_edge, wait_total, gap_total, count in zip(
        run_windows.tolist(),
        (run_ends >= run_windows + window_us).tolist(),
        (run_ends % window_us == 0).tolist(),
        wait_totals,
        gap_totals,
        edge_counts.tolist(),
    ):
        if not multiple:
            out.append([(window, wait_total, gap_total)])
            continue
        if ends_at_edge:
            out.append(None)
            continue
        waits = [*wait_before[edge : edge + count], wait_total]
        gaps = [*gap_before[edge : edge + count], gap_total]
        out.append(
            [
                (window + index * window_us, wait - wait_earlier, gap - gap_earlier)
                for index, (wait, wait_earlier, gap, gap_earlier) in enumerate(
                    zip(waits, [0, *waits[:-1]], gaps, [0, *gaps[:-1]])
                )
            ]
        )
        edge += count
    return out


# A feed of more events than this has its ids checked for repeats in columns (polars), not in a Python
# set: the set made a Python string of each of a job's millions of ids (docs/performance.md). Under it
# the set costs less than polars' calls.
IDS_CHECKED_IN_COLUMNS = 20_000


def distinct_ids(events) -> bool:
    """Whether no two of `events` (a STEP_RUN: each of its events) carry the same id."""
    runs = [event[4][3] for event in events if event[3] == STEP_RUN]
    plain = [event[2] for event in events if event[3] != STEP_RUN]
    count = len(plain) + sum(size(event) for event in events if event[3] == STEP_RUN)
    if count < IDS_CHECKED_IN_COLUMNS:
        seen = set(plain)
        for kept in runs:
            seen.update(_ids_of(kept))
        return len(seen) == count
    import polars as pl  # only here: the key step of small jobs does without it

    texts = [
        kept.text if isinstance(kept, RunIds) else kept if isinstance(kept, str) else " ".join(kept) for kept in runs
    ]
    every = pl.concat([pl.Series(texts, dtype=pl.String).str.split(" ").explode(), pl.Series(plain, dtype=pl.String)])
    return every.n_unique() == count


def ids(run) -> RunIds | tuple[str, ...]:
    """A STEP_RUN's events' ids."""
    return _ids_of(run[4][3])


def _ids_of(ids) -> RunIds | tuple[str, ...]:
    """A run's ids: `RunIds`, or, in a run from a key's saved state, one string of them (ids hold
    no space), or a tuple (kept so before)."""
    return RunIds(ids) if isinstance(ids, str) else ids


def is_run(event) -> bool:
    return event[3] == STEP_RUN


def size(event) -> int:
    """The number of events an event stands for."""
    return len(event[4][2]) if event[3] == STEP_RUN else 1


def end_us(event) -> int:
    """The time of its last event."""
    return int.from_bytes(event[4][0][-8:], "little", signed=True) if event[3] == STEP_RUN else event[0]


def last_key(run) -> tuple[int, int, str]:
    """(time, same-instant order, id) of a STEP_RUN's last event, an END: it sorts there."""
    kept = run[4][3]
    return end_us(run), END_ORDER, kept[-1] if isinstance(kept, tuple) else _joined_ids(run).text.rpartition(" ")[2]


def expand(event) -> list[Event]:
    """The events a STEP_RUN stands for (a plain event: itself)."""
    if event[3] != STEP_RUN:
        return [Event._make(event)]
    return _events(*arrays(event))


def originals(events) -> list[Event]:
    """`events` with every STEP_RUN expanded."""
    return [original for event in events for original in expand(event)]


def spans_of(run, first: int, stop: int) -> list:
    """Spans `first` to `stop` (excluded) of a STEP_RUN: a STEP_RUN of them, or nothing."""
    if stop <= first:
        return []
    times, steps, codes = columns(run)
    first, stop = 2 * first, 2 * stop
    ids = _joined_ids(run).stretch(first, stop)
    return [Event._make(make_run(times[first:stop], steps[first:stop], codes[first:stop], ids))]


def taken_apart(run, touched: np.ndarray, cut_after: np.ndarray) -> list[Event]:
    """A STEP_RUN's spans where `touched` as their events, each stretch of the others as a run,
    stretches cut after each span where `cut_after`."""
    times, steps, codes = columns(run)
    ids = _joined_ids(run)
    out, first = [], 0
    cut_after[-1] = True  # the run's end ends its last stretch
    for span in (touched | cut_after).nonzero()[0].tolist():
        stop = span if touched[span] else span + 1  # the stretch's spans: first to stop (excluded)
        if stop > first:
            rows = slice(2 * first, 2 * stop)
            out.append(Event._make(make_run(times[rows], steps[rows], codes[rows], ids.stretch(2 * first, 2 * stop))))
        if touched[span]:
            rows = slice(2 * span, 2 * span + 2)
            out += _events(times[rows], steps[rows], codes[rows], [ids.at(2 * span), ids.at(2 * span + 1)])
        first = span + 1
    return out


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
        times = columns(event)[0]
        spans = len(times) // 2
        done = int(times[1::2].searchsorted(time_us, side="right"))  # spans ended at or before it
        before += spans_of(event, 0, done)
        if times[2 * done] <= time_us:  # the next span started at or before it: its START is before
            start, end = expand(spans_of(event, done, done + 1)[0])
            before.append(start)
            after.append(end)
            done += 1
        after += spans_of(event, done, spans)
    return before, after
