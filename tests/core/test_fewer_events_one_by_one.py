"""The key step's shortcuts (issue 25, item 2) never change a figure: each case feeds one timeline
the events one by one and another the same events as the decoder hands them on, as
tests/core/test_step_runs.py does, and compares everything the timeline reports; and checks that the
shortcut is taken."""

from __future__ import annotations

import pickle

from fleet_goodput.core import step_runs
from fleet_goodput.core.step_ledger import StepRun
from fleet_goodput.core.timeline import JobTimeline
from test_step_runs import as_decoded, both, outcome, runs_in, spans
from test_timeline import HOUR_US, PEAK, ev, sample, seconds_by_category, submit


def test_a_save_between_two_spans_at_their_instants_cuts_the_run_and_leaves_both_spans_in_it():
    # The simulator's checkpoint: it starts as a step ends and ends as the next step starts. In event
    # order the save comes after the one span and before the other: it touches neither.
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(10, 3),
        ev(40, "CHECKPOINT_SAVE_START"),
        ev(45, "CHECKPOINT_SAVE_END", 30),
        *spans(45, 3, first_step=31),
        ev(80, "FINISH"),
        sample(1, 2e15),
    ]
    reference, collapsed, decoded = both(events, 90)
    assert collapsed == reference
    assert runs_in(decoded) == 1
    timeline = JobTimeline("j", HOUR_US, PEAK)
    timeline.feed(as_decoded(events[:-2]))  # no FINISH: the spans after the save stay unresolved, as a run
    assert [type(span) for span in timeline.unresolved] == [StepRun]
    applied_as_runs = [first for first in timeline.seen_ids.values() if first[3] == "STEP_RUN"]
    assert len(applied_as_runs) == 12  # the spans' every event; the save's two one by one
    got = seconds_by_category(collapsed[0])
    assert (got["productive"], got["checkpoint_save"]) == (60, 5)


def test_an_event_at_a_span_s_instant_in_its_own_same_instant_order_takes_the_span_apart():
    # A STEP_END and a DATA_WAIT_END (another runtime END) at one instant: only their ids order them.
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(10, 3),
        ev(15, "DATA_WAIT_START"),
        ev(20, "DATA_WAIT_END"),
        ev(20, "CHECKPOINT_SAVE_START"),
        ev(30, "CHECKPOINT_SAVE_END", 10),
        ev(50, "FINISH"),
    ]
    reference, collapsed, _ = both(events, 60)
    assert collapsed == reference


def test_data_waits_idle_time_and_step_spans_of_runs_across_window_edges_are_added_where_they_ran():
    # 10 s windows: spans of 7.3 s, data waits of 2.6 s and 1.1 s idle between them straddle the edges.
    events, at = [submit(0), ev(0, "ALLOCATE", 8)], 3.0
    for n in range(12):
        events += [ev(at, "STEP_START", 1 + 5 * n), ev(at + 7.3, "STEP_END", 5 + 5 * n)]
        at += 8.4
        if n % 3 == 1:
            events += [ev(at, "DATA_WAIT_START", None), ev(at + 2.6, "DATA_WAIT_END", None)]
            at += 2.6
    events += [ev(at + 1, "CHECKPOINT_SAVE_START"), ev(at + 2, "CHECKPOINT_SAVE_END", 60), sample(0, 2.1e15)]
    reference, collapsed, decoded = both(events, at + 5, window_us=10_000_000)
    assert runs_in(decoded) == 1
    assert collapsed == reference  # every window's figures, the ideal floats bit for bit
    got = seconds_by_category(collapsed[0])
    assert got["data_wait"] == 4 * 2.6 and got["productive"] == 12 * 7.3


def test_a_run_saved_in_a_key_s_state_with_its_ids_in_one_string_is_read_as_before():
    # A store's state written before a run's ids were a tuple holds them space-separated.
    events = [submit(0), ev(0, "ALLOCATE", 8), *spans(10, 4), sample(1, 2e15)]
    decoded = as_decoded(events)
    saved = [
        e._replace(payload=(*e.payload[:3], " ".join(e.payload[3]))) if e.code == "STEP_RUN" else e for e in decoded
    ]
    assert runs_in(saved) == 1 and saved != decoded
    assert sorted(step_runs.originals(saved)) == sorted(events)
    outcomes = []
    for fed in (decoded, saved):
        timeline = JobTimeline("j", HOUR_US, PEAK)
        timeline.feed(fed)
        assert [type(span) for span in timeline.unresolved] == [StepRun]
        outcomes.append(outcome(timeline, 70, HOUR_US))
    assert outcomes[0] == outcomes[1]


def test_ids_applied_without_look_ups_are_still_found_repeated_in_a_later_feed():
    # A feed whose ids are all new applies its events without looking each id up; a later feed
    # (after a copy of the timeline, as a key's state is pickled) still finds a repeat of one of
    # them (a duplicate) and an id carried by a different event (a conflict), as one by one.
    first = [submit(0), ev(0, "ALLOCATE", 8), *spans(10, 4), sample(1, 2e15)]
    run_event = first[4]  # a STEP_END inside the run
    later = [
        run_event,
        run_event._replace(time_us=run_event.time_us + 60_000_000, code="DATA_WAIT_END", payload=(None,)),
        ev(60, "CHECKPOINT_SAVE_START"),
        ev(61, "CHECKPOINT_SAVE_END", 40),
    ]
    reference, collapsed = JobTimeline("j", HOUR_US, PEAK), JobTimeline("j", HOUR_US, PEAK)
    reference.feed(first)
    collapsed.feed(as_decoded(first))
    assert collapsed.ids.unindexed and not collapsed.ids._indexed  # the shortcut: no id looked up
    collapsed = pickle.loads(pickle.dumps(collapsed))
    reference.feed(later)
    collapsed.feed(later)
    assert outcome(collapsed, 70, HOUR_US) == outcome(reference, 70, HOUR_US)
    assert collapsed.counts()[("runtime", "duplicate")] == 1
    assert [r.reason.split(":")[0] for r in collapsed.rejections] == ["event_id conflict"]


def test_a_feed_with_a_repeated_id_looks_every_id_up():
    events = [submit(0), ev(0, "ALLOCATE", 8), *spans(10, 4), sample(1, 2e15)]
    events.append(events[3])  # a STEP_START delivered twice
    reference, collapsed, decoded = both(events, 70)
    assert collapsed == reference and collapsed[1][("runtime", "duplicate")] == 1
