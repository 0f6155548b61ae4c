"""A job's spans that follow one another as one STEP_RUN event (fleet_goodput/core/step_runs.py): fewer
events for the timeline to apply one by one, and never a different figure, count, rejection or late row.

Every case feeds one timeline the events one by one (the reference) and another the same events
as the decoder hands them on (each file's step events in columns, `step_runs.collapse`d per job),
and compares everything the timeline reports; the first case also checks figures by hand.
"""

from __future__ import annotations

import io
from collections import defaultdict

import fastavro
import numpy as np
import pytest

from fleet_goodput import schemas
from fleet_goodput.core import step_ledger, step_runs
from fleet_goodput.core.config import load_settings, peak_table
from fleet_goodput.core.events import Event, pack, unpack
from fleet_goodput.core.figure_vector import IDEAL
from fleet_goodput.core.session import WAITING, new_state
from fleet_goodput.core.step_ledger import StepRun
from fleet_goodput.core.timeline import JobTimeline
from fleet_goodput.simulator import simulate
from fleet_goodput.telemetry.columnar import decode_file_fast
from fleet_goodput.telemetry.decode import decode_file
from test_timeline import HOUR_US, PEAK, T0, ev, sample, sample_in_precision, seconds_by_category, submit


def spans(first_s: float, count: int, seconds: float = 10, steps: int = 10, first_step: int = 1):
    """`count` step spans back to back from `first_s`, each `seconds` long and `steps` steps."""
    events = []
    for n in range(count):
        start = first_s + n * seconds
        events += [
            ev(start, "STEP_START", first_step + n * steps),
            ev(start + seconds, "STEP_END", first_step + (n + 1) * steps - 1),
        ]
    return events


def as_decoded(events, files: int = 2):
    """`events` as the decoder hands them on from `files` files (step events round robin, in columns)
    and the key step collapses them."""
    steps = [
        e
        for e in events
        if (e.code in step_runs.CODES[:2] and e.payload[0] is not None)
        or (e.code in step_runs.CODES[2:] and e.payload == (None,))
    ]
    others = [tuple(e) for e in events if e not in steps]
    blocks = []
    for part in range(files):
        mine = steps[part::files]
        if mine:
            blocks.append(
                step_runs.make_block(
                    np.array([e.time_us for e in mine]),
                    np.array([e.payload[0] or 0 for e in mine]),
                    step_runs.code_numbers(e.code for e in mine),
                    " ".join(e.event_id for e in mine),
                )
            )
    return [Event._make(e) for e in step_runs.collapse(unpack(pack(others + blocks)))]


def outcome(timeline: JobTimeline, as_of_s: float, window_us: int):
    timeline.close(T0 + int(as_of_s * 1_000_000))
    deltas = timeline.flush()
    return (
        dict(deltas),
        timeline.counts(),
        timeline.summary() if timeline.submit else None,
        sorted((tuple(r.event), r.reason) for r in timeline.rejections),
    )


def both(events, as_of_s: float, window_us: int = HOUR_US, peaks: dict = PEAK):
    """(the reference's outcome, the collapsed events' outcome, the collapsed events)."""
    reference, collapsed = JobTimeline("j", window_us, peaks), JobTimeline("j", window_us, peaks)
    reference.feed(events)
    decoded = as_decoded(events)
    collapsed.feed(decoded)
    return outcome(reference, as_of_s, window_us), outcome(collapsed, as_of_s, window_us), decoded


def runs_in(events) -> int:
    return sum(step_runs.is_run(e) for e in events)


def test_a_run_awaiting_a_checkpoint_is_pending_then_productive_up_to_the_saved_step():
    # 8 chips from 0 s; four 10 s spans of 10 steps from 100 s (steps 1-40); a save of step 20
    # from 140 s to 150 s; as of 160 s. Steps 1-20 are preserved: 20 s productive; steps 21-40
    # await a later save: 20 s pending; 100 s idle before the spans, 10 s after the save.
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(100, 4),
        ev(140, "CHECKPOINT_SAVE_START"),
        ev(150, "CHECKPOINT_SAVE_END", 20),
        sample(0, 197e12 * 8 * 0.5, duration_s=1.0),
    ]  # 1 s steps on 8 chips at half the peak
    reference, collapsed, decoded = both(events, 160)
    assert runs_in(decoded) == 1 and len(decoded) == 6  # the 8 step events as one
    assert collapsed == reference
    got = seconds_by_category(collapsed[0])
    assert (got["productive"], got["pending"], got["checkpoint_save"], got["idle"]) == (20, 20, 10, 110)
    assert got["ideal"] == pytest.approx(20 * 0.5)  # half of the 20 productive seconds
    assert collapsed[1][("runtime", "accepted")] == 10


@pytest.mark.parametrize("save_at", [5, 10, 25, 40, None])
def test_a_save_cuts_a_run_where_it_would_cut_its_spans(save_at):
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(10, 4),
        ev(60, "CHECKPOINT_SAVE_START"),
        ev(70, "CHECKPOINT_SAVE_END", save_at),
        *spans(70, 3, first_step=41),
        sample(15, 5e15),
        sample(35, 9e15),
    ]  # the second sample applies from the third span on
    reference, collapsed, decoded = both(events, 120)
    assert runs_in(decoded) == 1  # one run across the save: the timeline takes it apart there
    assert collapsed == reference


def test_data_waits_and_idle_time_between_step_spans_are_part_of_a_run():
    # Spans 10-30 s (steps 1-20), a data wait 30-35 s, idle 35-37 s, spans 37-57 s (steps 21-40),
    # a save of step 40 57-60 s; as of 70 s: 40 s productive, 5 s data wait, 3 s saving, and
    # idle 0-10, 35-37 and 60-70 s: 22 s.
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(10, 2),
        ev(30, "DATA_WAIT_START", None),
        ev(35, "DATA_WAIT_END", None),
        *spans(37, 2, first_step=21),
        ev(57, "CHECKPOINT_SAVE_START"),
        ev(60, "CHECKPOINT_SAVE_END", 40),
        sample(1, 2e15),
    ]
    reference, collapsed, decoded = both(events, 70)
    assert runs_in(decoded) == 1 and len(decoded) == 6  # the 10 span events as one
    assert collapsed == reference
    got = seconds_by_category(collapsed[0])
    assert (got["productive"], got["data_wait"], got["checkpoint_save"], got["idle"]) == (40, 5, 3, 22)
    # Time between spans while a save runs (asynchronously) is the save's, as one by one.
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        ev(5, "CHECKPOINT_SAVE_START"),
        *spans(10, 2),
        ev(31, "DATA_WAIT_START", None),
        ev(33, "DATA_WAIT_END", None),
        *spans(36, 3, first_step=21),
        ev(70, "CHECKPOINT_SAVE_END", 20),
        sample(1, 2e15),
    ]
    reference, collapsed, decoded = both(events, 80, window_us=32_000_000)
    assert runs_in(decoded) == 1 and collapsed == reference


def test_a_restore_and_steps_redone_after_it():
    # Restored to step 20, the job redoes 21-40 (preserved by a save of step 40 before): lost;
    # then new steps from 41 count their own ideal.
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(10, 4),
        ev(50, "CHECKPOINT_SAVE_START"),
        ev(55, "CHECKPOINT_SAVE_END", 40),
        ev(60, "CHECKPOINT_RESTORE_START"),
        ev(61, "CHECKPOINT_RESTORE_END", 20),
        *spans(61, 5, first_step=21),
        ev(200, "FINISH"),
        sample(5, 4e15),
    ]
    reference, collapsed, decoded = both(events, 300)
    assert runs_in(decoded) == 2
    assert collapsed == reference
    got = seconds_by_category(collapsed[0])
    assert got["lost"] == 20 and got["productive"] == 40 + 30


def test_events_inside_a_run_take_its_spans_apart():
    # A PREEMPT and a data wait land inside runs; a sample inside one changes the ideal of later spans only.
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(10, 6),
        ev(35, "PREEMPT", 4),
        ev(80, "ALLOCATE", 8),
        *spans(80, 6, first_step=1),
        ev(95, "DATA_WAIT_START"),
        ev(96, "DATA_WAIT_END"),
        sample(105, 3e15),
        sample(12, 1e15),
        ev(150, "CHECKPOINT_SAVE_START"),
        ev(151, "CHECKPOINT_SAVE_END", 60),
    ]
    reference, collapsed, _ = both(events, 170)
    assert collapsed == reference


def test_a_run_across_window_edges_adds_each_span_s_ideal_where_it_ran():
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(3, 40, seconds=7.3, steps=3),
        ev(400, "FINISH"),
        sample(0, 2.1e15),
        sample(100, 3.3e15),
    ]
    reference, collapsed, _ = both(events, 400, window_us=60_000_000)
    assert collapsed == reference  # the ideal floats too, bit for bit


@pytest.mark.parametrize("at_once", [1, 2, 7])
def test_runs_valued_a_few_spans_at_a_time_give_the_same_ideal_bit_for_bit(at_once, monkeypatch):
    """Productive runs are valued in groups of at most `VALUED_AT_ONCE` spans, a long run in pieces,
    so one job's millions of spans never take their Python lists at once: the same floats, added in
    the same order, whatever the group size, across window edges and with a peak not known."""
    monkeypatch.setattr(step_ledger, "VALUED_AT_ONCE", at_once)
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(3, 40, seconds=7.3, steps=3),
        ev(310, "CHECKPOINT_SAVE_START"),
        ev(311, "CHECKPOINT_SAVE_END", 60),
        *spans(312, 9, seconds=1.1, steps=2, first_step=121),
        ev(400, "FINISH"),
        sample(0, 2.1e15),
        sample(100, 3.3e15),
        sample_in_precision(200, 1.7e13, "fp8"),  # a precision the catalogue has no peak for on tpu-v5e
    ]
    reference, collapsed, decoded = both(events, 400, window_us=60_000_000)
    assert runs_in(decoded) >= 2 and collapsed == reference


@pytest.mark.parametrize("workload", ["SERVING", "BULK_INFERENCE", "TRAINING"])
def test_serving_and_batch_inference_count_each_span_as_it_ends(workload):
    # Steps 11-20 twice in a row (ENDed twice at step 20): for batch inference the second redid it.
    events = [
        submit(0, workload=workload),
        ev(0, "ALLOCATE", 8),
        *spans(10, 2),
        ev(30, "STEP_START", 20),
        ev(40, "STEP_END", 20),
        *spans(40, 3, first_step=21),
        ev(90, "FINISH"),
        sample(1, 2e15),
    ]
    reference, collapsed, decoded = both(events, 100)
    assert runs_in(decoded) == 1
    assert collapsed == reference


def test_each_event_of_a_run_is_counted_rejected_or_found_repeated_as_itself():
    run = spans(10, 3)
    # No SUBMIT before them: each of the six events is rejected with its own reason.
    reference, collapsed, decoded = both([*run, submit(100)], 120)
    assert runs_in(decoded) == 1 and collapsed == reference and len(collapsed[3]) == 6
    # Delivered twice (in other files): every repeat is one duplicate.
    events = [submit(0), ev(0, "ALLOCATE", 8), *run]
    timeline = JobTimeline("j", HOUR_US, PEAK)
    timeline.feed(as_decoded(events) + as_decoded(run, files=3))
    assert timeline.counts()[("runtime", "duplicate")] == 6 and timeline.counts()[("runtime", "accepted")] == 6
    # A different event under one of the run's ids is a conflict, judged against the run's event.
    conflict = run[3]._replace(payload=(99,))
    reference, collapsed, _ = both([*events, conflict], 60)
    assert collapsed == reference and "event_id conflict" in collapsed[3][0][1]


def test_a_run_cut_at_the_frontier_is_late_and_waiting_event_by_event():
    events = [submit(0), ev(0, "ALLOCATE", 8), *spans(10, 5)]
    decoded = as_decoded(events)
    frontier = T0 + 35_000_000  # inside the third span: its START is late, its END is not
    state = new_state("j", JobTimeline("j", HOUR_US, PEAK), frontier)
    late = state.admit(decoded)
    assert sorted(late) == sorted(e for e in events if e.time_us <= frontier)
    assert sorted(step_runs.originals(state.waiting)) == sorted(e for e in events if e.time_us > frontier)
    before, after = step_runs.split_at(decoded, T0 + 45_000_000)
    assert sum(map(step_runs.size, after)) == 3 and runs_in(after) == 1  # END of span 4, then span 5 as a run


def test_waiting_events_past_the_as_of_time_are_counted_one_by_one():
    events = [submit(0), ev(0, "ALLOCATE", 8), *spans(10, 5)]
    state = new_state("j", JobTimeline("j", HOUR_US, PEAK))
    state.admit(as_decoded(events))
    advance = state.advance(T0 + 33_000_000, T0 + 20_000_000)
    assert advance.provisional_counts[("runtime", WAITING)] == 5  # END of span 3 and spans 4, 5


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim")
    simulate(root, seed=7, hours=3)
    return root


def test_the_simulated_fleet_decoded_in_step_blocks_is_the_same_events_far_fewer_to_apply(simulated):
    reference, blocks = defaultdict(list), defaultdict(list)
    for path in sorted((simulated / "runtime").glob("*.avro")):
        data = path.read_bytes()
        for key, batch in decode_file("runtime", str(path), io.BytesIO(data), None).batches.items():
            reference[key] += batch
        decoded = decode_file_fast("runtime", str(path), io.BytesIO(data), None, step_blocks=True)
        for key, batch in decoded.batches.items():
            blocks[key] += unpack(pack(batch))
    collapsed = {key: step_runs.collapse(batch) for key, batch in blocks.items()}
    for key, batch in reference.items():
        assert sorted(map(tuple, step_runs.originals(collapsed[key]))) == sorted(map(tuple, batch))
    events, items = sum(map(len, reference.values())), sum(map(len, collapsed.values()))
    assert items * 3 < events  # the fleet's files shuffle each job's events: runs are found across them


def test_a_step_block_s_ids_cross_without_their_job_id_and_come_back_whole():
    """Where every id of a job's block begins with its job id, the block carries the rest of each;
    else (one id not so) each whole. Either way the key step gets every id back exactly."""
    ids = {
        "job-1": ["job-1-r0", "job-1-r1", "job-1", "job-1-r3"],  # one id is the job id itself
        "job-2": ["job-2-r0", "x-job-2-r1", "job-2-r2", "job-2-r3"],
    }
    records = [
        {
            "event_id": event_id,
            "event_time": T0 + n * 1_000_000,
            "job_id": job_id,
            "type": ("STEP_START", "STEP_END")[n % 2],
            "step": n,
            "attempt": None,
        }
        for job_id, job_ids in ids.items()
        for n, event_id in enumerate(job_ids)
    ]
    buffer = io.BytesIO()
    fastavro.writer(buffer, schemas.load("runtime"), records)
    decoded = decode_file_fast("runtime", "file.avro", io.BytesIO(buffer.getvalue()), None, step_blocks=True)
    blocks = {
        job_id: event[4][3]
        for job_id, batch in decoded.batches.items()
        for event in batch
        if event[3] == step_runs.STEP_BLOCK
    }
    assert blocks == {"job-1": ("job-1", "-r0 -r1  -r3"), "job-2": ("", " ".join(ids["job-2"]))}
    for job_id, batch in decoded.batches.items():
        collapsed = step_runs.collapse(unpack(pack(batch)))
        assert sorted(event.event_id for event in step_runs.originals(collapsed)) == sorted(ids[job_id])


def test_simulated_jobs_give_the_same_figures_fed_as_runs(simulated):
    """Every simulated job's whole history, fed both ways, as of its last event."""
    settings = load_settings()
    peaks = peak_table(settings.accelerators)
    by_job = defaultdict(list)
    for stream in ("scheduler", "runtime", "profiler"):
        for path in sorted((simulated / stream).glob("*.avro")):
            decoded = decode_file(stream, str(path), io.BytesIO(path.read_bytes()), settings.accelerators)
            for key, batch in decoded.batches.items():
                by_job[key] += batch
    applied_at_once = 0
    for key, batch in sorted(by_job.items()):
        if key.startswith("\x1f"):  # capacity
            continue
        events = [Event._make(e) for e in batch]
        as_of_s = (max(e.time_us for e in events) - T0) / 1e6 + 1
        reference, collapsed, decoded = both(events, as_of_s, peaks=peaks)
        assert collapsed == reference, key
        applied_at_once += runs_in(decoded)
    assert applied_at_once > 100


def test_a_run_is_kept_as_one_while_it_awaits_resolution():
    events = [submit(0), ev(0, "ALLOCATE", 8), *spans(10, 4)]
    timeline = JobTimeline("j", HOUR_US, PEAK)
    timeline.feed(as_decoded(events))
    assert len(timeline.unresolved) == 1 and isinstance(timeline.unresolved[0], StepRun)
    assert timeline.flush(provisional=True)[T0 - T0 % HOUR_US][IDEAL] == 0.0  # no sample yet: no ideal


def test_a_run_whose_steps_go_back_is_an_implicit_restore():
    # Steps 1-40, then after a pause steps from 1 again without a restore: the first 40 s are lost.
    events = [submit(0), ev(0, "ALLOCATE", 8), *spans(10, 4), *spans(55, 3), ev(100, "FINISH")]
    reference, collapsed, decoded = both(events, 100)
    assert runs_in(decoded) == 2
    assert collapsed == reference
    assert seconds_by_category(collapsed[0])["lost"] == 40 and collapsed[2]["disruptions"] == 1


def test_events_at_a_run_s_first_or_last_instant_but_outside_it_leave_it_whole():
    # A data wait ends as the first span starts and another begins as the last one ends; a save
    # starts at that instant too, and a PREEMPT (after a STEP_END at its instant) cuts the job there.
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        ev(5, "DATA_WAIT_START"),
        ev(10, "DATA_WAIT_END"),
        *spans(10, 4),
        ev(50, "DATA_WAIT_START"),
        ev(50, "CHECKPOINT_SAVE_START"),
        ev(50, "PREEMPT", 0),
        sample(1, 1e15),
    ]
    reference, collapsed, decoded = both(events, 60)
    assert collapsed == reference
    timeline = JobTimeline("j", HOUR_US, PEAK)
    timeline.feed([e for e in decoded if e.code != "PREEMPT"])
    assert [type(span) for span in timeline.unresolved] == [StepRun]  # applied at once
    assert seconds_by_category(collapsed[0])["lost"] == 40  # the PREEMPT found the four spans unsaved


def test_an_event_in_the_idle_time_between_two_spans_of_a_run_cuts_it_there():
    # Saved at step 20 just before a PREEMPT at 32 s (between spans), the job resumes at step 21:
    # its spans follow on, but the PREEMPT and the ALLOCATE must come between them.
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(10, 2),
        ev(30.5, "CHECKPOINT_SAVE_START"),
        ev(31, "CHECKPOINT_SAVE_END", 20),
        ev(32, "PREEMPT", 0),
        ev(40, "ALLOCATE", 8),
        *spans(45, 2, first_step=21),
        ev(70, "FINISH"),
        sample(1, 2e15),
    ]
    reference, collapsed, decoded = both(events, 80)
    assert runs_in(decoded) == 1  # one run from 10 s to 65 s, taken apart by the timeline
    assert collapsed == reference
    got = seconds_by_category(collapsed[0])
    assert (got["productive"], got["queued"]) == (40, 8)


def test_an_interruption_counts_the_step_time_of_runs_and_their_first_step_as_recovery():
    # 40 s of unsaved steps (a data wait and idle time between them) lost to a PREEMPT at 60 s;
    # back at 70 s, the job waits for data and steps again at 80 s: recovered 20 s after the PREEMPT.
    wait = [ev(30, "DATA_WAIT_START", None), ev(35, "DATA_WAIT_END", None)]
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(10, 2),
        *wait,
        *spans(37, 2, first_step=21),
        ev(60, "PREEMPT", 0),
        ev(70, "ALLOCATE", 8),
        ev(75, "DATA_WAIT_START", None),
        ev(80, "DATA_WAIT_END", None),
        *spans(80, 2, first_step=41),
        sample(1, 2e15),
    ]
    reference, collapsed, decoded = both(events, 110)
    assert runs_in(decoded) == 1 and collapsed == reference  # one run, cut at the PREEMPT and ALLOCATE
    (interruption,) = collapsed[2]["interruptions"]
    assert (interruption["lost_chip_s"], interruption["recovered_s"]) == (40 * 8, 20)
