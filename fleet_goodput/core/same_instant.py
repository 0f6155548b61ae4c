"""A job's events at one microsecond, in the order their meaning gives (docs/metric.md section 3,
"Events at one instant").

Event order ranks the events of one instant by their type alone (`events.same_instant_order`):
a SUBMIT, the ENDs of runtime spans, scheduler levels, a job's end, then the STARTs of runtime
spans. That is right for a span that ends as the next one starts, and wrong for a span of no
length, whose START and END share their instant: a block of steps a log gives no time to, a save
whose log gives no duration, a `with` block faster than the clock's microsecond. Applied END
first, the END finds nothing open and the START leaves a span open until something closes it,
so idle time after it counts as that span's.

Which END an instant's START pairs with depends on the spans open when the instant begins, so the
timeline puts each instant's events in order as it applies them (`in_meaning_order`):

1. a SUBMIT;
2. for each kind of span open, the END that closes it: the kinds that judge step time (a save,
   then a restore) after a step, so that a step ending at their instant has ended when they
   judge it;
3. spans of no length: each remaining START with a remaining END of its kind, in the order a
   training loop runs them (init, restore, compile, data wait, step, save), so that a save of no
   length preserves a step of no length at its instant;
4. ENDs with nothing to end (the timeline rejects them, as before), profiler samples;
5. scheduler levels, then a job's end (FINISH, FAIL, CANCEL);
6. the STARTs left: spans that open at the instant.

Steps pair by their numbers: a STEP_END ends the steps from its span's first step to its own, so
it pairs with a STEP_START at or below its step (an unknown step pairs with any), lowest steps
first. Events the order cannot tell apart (two ENDs of one kind and step) keep event order.
"""

from __future__ import annotations

from fleet_goodput.core.events import PROFILE, RUNTIME_TYPES, TERMINAL_TYPES, Event

# A runtime code's span kind, as the timeline names it (`step`, `checkpoint_save`, ...), and whether it starts it.
EDGES = {code: (code.rsplit("_", 1)[0].lower(), code.endswith("_START")) for code in RUNTIME_TYPES}
# Spans of no length at one instant, in the order a training loop runs them.
LOOP_ORDER = ("init", "checkpoint_restore", "compile", "data_wait", "step", "checkpoint_save")
# ENDs closing open spans at one instant: a save, then a restore, judge the step time ended before them.
CLOSING_ORDER = ("init", "compile", "data_wait", "step", "checkpoint_save", "checkpoint_restore")


def needs_meaning_order(events: list[Event]) -> bool:
    """Whether an instant's events could be ordered otherwise by meaning: two or more, one at least
    a runtime START or END."""
    return len(events) > 1 and any(event.code in EDGES for event in events)


def in_meaning_order(events: list[Event], open_spans: dict[str, int | None]) -> list[Event]:
    """One instant's events (in event order) in the order of the module docstring; `open_spans` maps
    each kind of span open when the instant begins to its first step (None: unknown, or no step)."""
    submits, samples, scheduler, ends_of_job = [], [], [], []
    starts, ends = {}, {}
    for event in events:
        edge = EDGES.get(event.code)
        if edge is not None:
            kind, starting = edge
            (starts if starting else ends).setdefault(kind, []).append(event)
        elif event.code == "SUBMIT":
            submits.append(event)
        elif event.code == PROFILE:
            samples.append(event)
        elif event.code in TERMINAL_TYPES:
            ends_of_job.append(event)
        else:
            scheduler.append(event)
    closing, spans, unmatched, opening = {}, {}, [], {}
    for kind in starts.keys() | ends.keys():
        kind_starts, kind_ends = _by_step(starts.get(kind, [])), _by_step(ends.get(kind, []))
        if kind in open_spans:
            end = _pairing_end(open_spans[kind], kind_ends)
            if end is not None:
                closing[kind] = [kind_ends.pop(end)]
        spans[kind], opening[kind] = [], []
        for start in kind_starts:
            end = _pairing_end(_step(start), kind_ends)
            if end is None:
                opening[kind].append(start)
            else:
                spans[kind] += [start, kind_ends.pop(end)]
        unmatched += kind_ends
    return [
        *submits,
        *_in_kind_order(closing, CLOSING_ORDER),
        *_in_kind_order(spans, LOOP_ORDER),
        *sorted(unmatched),
        *samples,
        *scheduler,
        *ends_of_job,
        *_in_kind_order(opening, LOOP_ORDER),
    ]


def _step(event: Event) -> int | None:
    return event.payload[0] if event.payload else None


def _by_step(events: list[Event]) -> list[Event]:
    """Step events lowest step first, unknown steps last (any other kind's have no step, or one
    that does not pair them: kept in event order)."""
    if not events or EDGES[events[0].code][0] != "step":
        return events
    return sorted(events, key=lambda event: (_step(event) is None, _step(event) or 0))


def _pairing_end(first_step: int | None, ends: list[Event]) -> int | None:
    """The position in `ends` of the first END that can end a span from `first_step`: any but a
    STEP_END below it."""
    for position, end in enumerate(ends):
        last_step = _step(end) if EDGES[end.code][0] == "step" else None
        if first_step is None or last_step is None or last_step >= first_step:
            return position
    return None


def _in_kind_order(by_kind: dict[str, list[Event]], order: tuple[str, ...]) -> list[Event]:
    return [event for kind in order for event in by_kind.get(kind, ())]
