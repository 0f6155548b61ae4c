"""The timeline arithmetic (docs/metric.md section 3) without Beam: one job at a time."""

from __future__ import annotations

import itertools
import random

import pytest

import worked_example
from fleet_goodput.core.events import PROFILE, make_event
from fleet_goodput.core.figure_vector import ALL_ALLOCATED, CATEGORIES, FIGURES, IDEAL
from fleet_goodput.core.timeline import JobTimeline

T0 = worked_example.T0_US
HOUR_US = 3_600_000_000
PEAK = {"tpu-v5e": 197e12, "h100": 989e12, "h100/bf16": 989e12, "h100/fp8": 1979e12}  # as config.peak_table makes it
_ids = itertools.count()


def ev(seconds: float, code: str, *payload):
    return make_event(T0 + int(seconds * 1_000_000), f"e{next(_ids)}", code, tuple(payload))


def submit(seconds=0, chips=8, workload="TRAINING", accelerator="tpu-v5e"):
    return ev(seconds, "SUBMIT", "c1", accelerator, chips, workload, None, None, None, None)


def sample(seconds, ideal_flops, step=1, duration_s=10.0):
    """A sample of 8 chips; 10 s per step, as the worked example's (docs/metric.md section 4)."""
    return ev(seconds, PROFILE, step, duration_s, 8, ideal_flops, "ANALYTIC")


def run(events, as_of_s, window_us=HOUR_US, shuffle_seed=None):
    timeline = JobTimeline("j", window_us, PEAK)
    if shuffle_seed is not None:
        events = list(events)
        random.Random(shuffle_seed).shuffle(events)
    timeline.feed(events)
    timeline.close(T0 + int(as_of_s * 1_000_000))
    return timeline, timeline.flush()


def seconds_by_category(deltas, chips=8) -> dict[str, float]:
    """Wall-clock seconds per figure summed over windows (chip-µs ÷ chips ÷ 1e6)."""
    totals = {figure: sum(v[i] for v in deltas.values()) / chips / 1e6 for i, figure in enumerate(FIGURES)}
    totals["ideal"] = sum(v[IDEAL] for v in deltas.values()) / chips
    return totals


def worked_example_events():
    events = []
    for seconds, stream, kind, fields in worked_example.TIMELINE:
        if stream == "scheduler":
            if kind == "SUBMIT":
                events.append(submit(seconds))
            elif kind == "FINISH":
                events.append(ev(seconds, kind))
            else:
                events.append(ev(seconds, kind, fields["chips"]))
        elif stream == "runtime":
            events.append(ev(seconds, kind, fields.get("step")))
        else:
            events.append(sample(seconds, 7.88e15, fields["step"]))
    return events


@pytest.mark.parametrize("shuffle_seed", [None, 1, 2, 3])
def test_worked_example_gives_mpg_md_numbers_in_any_input_order(shuffle_seed):
    timeline, deltas = run(worked_example_events(), as_of_s=580, shuffle_seed=shuffle_seed)
    got = seconds_by_category(deltas)
    for name, expected in worked_example.EXPECTED_SECONDS.items():
        assert got[name] == pytest.approx(expected, rel=1e-12), name
    assert timeline.status == "FINISHED" and not timeline.rejections


def test_conservation_holds_per_window_when_a_job_spans_windows():
    # The worked example moved to straddle a window edge: t=0 is 300 s before it.
    events = worked_example_events()
    timeline = JobTimeline("j", HOUR_US, PEAK)
    shift = HOUR_US - 300_000_000
    timeline.feed([e._replace(time_us=e.time_us + shift) for e in events])
    timeline.close(T0 + shift + 580_000_000)
    deltas = timeline.flush()
    assert len(deltas) == 2
    index = {figure: i for i, figure in enumerate(FIGURES)}
    for vector in deltas.values():
        assert vector[index["lifetime"]] == sum(vector[index[c]] for c in CATEGORIES)
        assert vector[index["all_allocated"]] == sum(vector[index[c]] for c in ALL_ALLOCATED)
    # Steps 1-10 (190-290 s) fall before the edge at 300 s and steps 11-20 of
    # the second attempt (480-580 s) after it: 10 steps x 5 s x 8 chips each.
    ideal_by_window = sorted((w, v[IDEAL]) for w, v in deltas.items())
    assert ideal_by_window[0][1] == pytest.approx(50 * 8)
    assert ideal_by_window[1][1] == pytest.approx(50 * 8)


def test_ideal_of_a_span_cut_by_a_window_edge_is_shared_in_proportion():
    start = HOUR_US // 1_000_000 - 30  # a 100 s step span with 30 s before the edge
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        ev(start, "STEP_START", 1),
        ev(start + 100, "STEP_END", 10),
        sample(1, 8 * 197e12),
        ev(start + 100, "FINISH"),
    ]
    _, deltas = run(events, as_of_s=start + 100)
    ideal = sorted(v[IDEAL] for v in deltas.values() if v[IDEAL])
    # 10 steps x (8 x 197e12 / 197e12) chip-s = 80 chip-s, split 30:70.
    assert ideal == pytest.approx([24.0, 56.0])


CASES = {
    # name: (events, as_of_s, expected wall-clock seconds per category, workload)
    "serving step is productive at STEP_END": (
        lambda: [submit(workload="SERVING"), ev(0, "ALLOCATE", 8), ev(10, "STEP_START", 1), ev(20, "STEP_END", 1)],
        30,
        {"idle": 20, "productive": 10},
    ),
    "training step without checkpoint is pending at as-of": (
        lambda: [submit(), ev(0, "ALLOCATE", 8), ev(10, "STEP_START", 1), ev(20, "STEP_END", 1)],
        30,
        {"idle": 20, "pending": 10},
    ),
    "open step span at as-of is pending, never productive": (
        lambda: [submit(), ev(0, "ALLOCATE", 8), ev(10, "STEP_START", 1)],
        30,
        {"idle": 10, "pending": 20},
    ),
    "restore to an earlier step loses the steps after it": (
        lambda: [
            submit(),
            ev(0, "ALLOCATE", 8),
            ev(0, "STEP_START", 1),
            ev(10, "STEP_END", 1),
            ev(10, "CHECKPOINT_SAVE_START"),
            ev(12, "CHECKPOINT_SAVE_END", 1),
            ev(12, "STEP_START", 2),
            ev(20, "STEP_END", 2),
            ev(20, "CHECKPOINT_RESTORE_START"),
            ev(25, "CHECKPOINT_RESTORE_END", 1),
            ev(25, "FINISH"),
        ],
        25,
        {"productive": 10, "checkpoint_save": 2, "lost": 8, "checkpoint_restore": 5},
    ),
    "data wait inside a step span wins over the step": (
        lambda: [
            submit(),
            ev(0, "ALLOCATE", 8),
            ev(0, "STEP_START", 1),
            ev(2, "DATA_WAIT_START"),
            ev(5, "DATA_WAIT_END"),
            ev(10, "STEP_END", 1),
            ev(10, "FINISH"),
        ],
        10,
        {"productive": 7, "data_wait": 3},
    ),
    "partial allocation is partial, then all-allocated": (
        lambda: [submit(chips=8), ev(10, "ALLOCATE", 4), ev(30, "ALLOCATE", 8), ev(40, "FINISH")],
        40,
        {"queued": 10, "partial": 20, "idle": 10},
    ),
    "runtime span outside all-allocated time is clipped, not counted": (
        lambda: [submit(), ev(0, "INIT_START"), ev(10, "ALLOCATE", 8), ev(15, "INIT_END"), ev(20, "FINISH")],
        20,
        {"queued": 10, "init": 5, "idle": 5, "clipped_runtime": 10},
    ),
    "FAIL loses unpreserved steps": (
        lambda: [submit(), ev(0, "ALLOCATE", 8), ev(0, "STEP_START", 1), ev(10, "STEP_END", 5), ev(12, "FAIL")],
        30,
        {"lost": 10, "idle": 2},
    ),
    "a still-running job ends at the as-of time": (
        lambda: [submit(), ev(100, "ALLOCATE", 8)],
        250,
        {"queued": 100, "idle": 150},
    ),
    # docs/metric.md section 3: a span left open is closed by the first disruption.
    # Here a PREEMPT to partial closes the open step span (its time is lost)
    # and the init span; back on all chips, nothing is reported: idle.
    "a PREEMPT below the request closes the spans left open": (
        lambda: [
            submit(),
            ev(0, "ALLOCATE", 8),
            ev(0, "INIT_START"),
            ev(5, "STEP_START", 1),
            ev(10, "PREEMPT", 4),
            ev(20, "ALLOCATE", 8),
            ev(30, "FINISH"),
        ],
        30,
        {"init": 5, "lost": 5, "partial": 10, "idle": 10},
    ),
    # A process killed mid-step leaves its STEP_START; the next attempt's INIT_START closes the span (its
    # time lost to the restore to step 10), rather than the step running on through the restart.
    "a restart of the runtime closes the step a killed process left open": (
        lambda: [
            submit(),
            ev(0, "ALLOCATE", 8),
            ev(0, "STEP_START", 1),
            ev(10, "STEP_END", 10),
            ev(10, "CHECKPOINT_SAVE_START"),
            ev(12, "CHECKPOINT_SAVE_END", 10),
            ev(12, "STEP_START", 11),
            ev(20, "INIT_START"),
            ev(25, "INIT_END"),
            ev(25, "CHECKPOINT_RESTORE_START"),
            ev(30, "CHECKPOINT_RESTORE_END", 10),
            ev(30, "STEP_START", 11),
            ev(40, "STEP_END", 20),
            ev(40, "FINISH"),
        ],
        40,
        {"productive": 20, "checkpoint_save": 2, "lost": 8, "init": 5, "checkpoint_restore": 5},
    ),
    "the next START of its kind closes a span left open": (
        lambda: [
            submit(),
            ev(0, "ALLOCATE", 8),
            ev(0, "COMPILE_START"),
            ev(5, "COMPILE_START"),
            ev(8, "COMPILE_END"),
            ev(10, "FINISH"),
        ],
        10,
        {"compile": 8, "idle": 2},
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_categories(name):
    make_events, as_of_s, expected = CASES[name]
    timeline, deltas = run(make_events(), as_of_s)
    got = seconds_by_category(deltas)
    for figure in CATEGORIES + ("clipped_runtime",):
        assert got[figure] == pytest.approx(expected.get(figure, 0)), figure
    assert got["lifetime"] == pytest.approx(sum(got[c] for c in CATEGORIES))


REJECTIONS = {
    "STEP_END without its start": (
        [submit(), ev(1, "ALLOCATE", 8), ev(5, "STEP_END", 3)],
        "STEP_END without an open STEP_START",
    ),
    "events before SUBMIT": ([ev(0, "ALLOCATE", 8), submit(5)], "no SUBMIT for this job at or before this event"),
    "a second SUBMIT": ([submit(0), submit(5)], "second SUBMIT for a job already submitted"),
    "events after the job ended": (
        [submit(0), ev(1, "ALLOCATE", 8), ev(5, "FINISH"), ev(6, "STEP_START", 1)],
        "after the job ended (FINISHED)",
    ),
    "more chips than requested": (
        [submit(0, chips=8), ev(1, "ALLOCATE", 9)],
        "ALLOCATE of 9 chips is above the 8 requested: a job holds at most its request",
    ),
    "steps going backwards": (
        [submit(0), ev(1, "ALLOCATE", 8), ev(2, "STEP_START", 10), ev(3, "STEP_END", 9)],
        "STEP_END at step 9 is before its STEP_START's step 10: step numbers going backwards",
    ),
    "a sample implying PG far above any peak": (
        [submit(0), sample(1, 1e308)],
        "ideal_flops 1e+308 over 8 chips in 10 s implies PG 6.35e+291 against the tpu-v5e bf16 peak (the sample "
        "names no precision): more FLOPs than the chips' peak allows (a faster precision the sample does not name, "
        "FLOPs of more chips than it gives, or a duration in the wrong unit)",
    ),
}


@pytest.mark.parametrize("name", REJECTIONS)
def test_rejections_are_specific_and_counted(name):
    events, reason = REJECTIONS[name]
    timeline, _ = run(events, as_of_s=10)
    assert [r.reason for r in timeline.rejections] == [reason]
    assert sum(timeline.accepted.values()) + len(timeline.rejections) == len(events)


def test_repeated_event_ids_are_dropped_and_counted():
    events = worked_example_events()
    timeline, deltas = run(events + events[3:6], as_of_s=580)
    assert dict(timeline.duplicates) == {"runtime": 3}
    assert seconds_by_category(deltas)["productive"] == pytest.approx(200)


def test_incremental_flushes_add_up_to_one_batch():
    """Feeding in two parts with a provisional flush between gives the same
    totals: pending reported early is moved when the checkpoint arrives."""
    events = sorted(worked_example_events())
    whole, whole_deltas = run(events, as_of_s=580)
    timeline = JobTimeline("j", HOUR_US, PEAK)
    cut = T0 + 295_000_000  # after steps 1-10 ended, before their checkpoint completed
    timeline.feed([e for e in events if e.time_us <= cut])
    timeline.advance_to(cut)
    first = timeline.flush(provisional=True)
    assert seconds_by_category(first)["pending"] == pytest.approx(100)
    timeline.feed([e for e in events if e.time_us > cut])
    timeline.close(T0 + 580_000_000)
    second = timeline.flush()
    combined = {f: seconds_by_category(first)[f] + seconds_by_category(second)[f] for f in FIGURES}
    for figure in FIGURES:
        assert combined[figure] == pytest.approx(seconds_by_category(whole_deltas)[figure]), figure


def sample_in_precision(seconds, ideal_flops, precision):
    return ev(seconds, PROFILE, 1, 1.0, 8, ideal_flops, "ANALYTIC", precision)


def test_a_sample_is_judged_against_the_peak_of_its_precision():
    """docs/metric.md section 3, "The peak a sample is measured against": up to its own precision's peak,
    never above it. 1.5x the h100 bf16 peak is possible in fp8 (0.75 of 1979 TFLOP/s), not in bf16."""
    flops = 1.5 * 8 * 989e12  # over 8 chips in 1 s
    for precision, accepted in (("fp8", True), ("bf16", False), (None, False)):
        timeline, _ = run([submit(0, accelerator="h100"), sample_in_precision(1, flops, precision)], as_of_s=10)
        assert (len(timeline.samples), len(timeline.rejections)) == ((1, 0) if accepted else (0, 1)), precision
    assert [r.reason for r in timeline.rejections] == [
        "ideal_flops 1.1868e+16 over 8 chips in 1 s implies PG 1.5 against the h100 bf16 peak (the sample names no "
        "precision): more FLOPs than the chips' peak allows (a faster precision the sample does not name, FLOPs of "
        "more chips than it gives, or a duration in the wrong unit)"
    ]
    timeline, _ = run([submit(0, accelerator="h100"), sample_in_precision(1, 2.5 * 8 * 989e12, "fp8")], as_of_s=10)
    assert [r.reason for r in timeline.rejections] == [
        "ideal_flops 1.978e+16 over 8 chips in 1 s implies PG 1.25 against the h100 fp8 peak: more FLOPs than the "
        "chips' peak allows (FLOPs of more chips than it gives, or a duration in the wrong unit)"
    ]


def test_a_sample_exactly_at_the_peak_is_accepted():
    timeline, _ = run([submit(0), sample(1, 8 * 197e12, duration_s=1.0)], as_of_s=10)  # PG 1 against the bf16 peak
    assert not timeline.rejections and len(timeline.samples) == 1


def test_a_sample_naming_no_precision_is_never_measured_above_the_bf16_peak():
    """Formerly a sample naming no precision could claim 5x the bf16 peak and every step it covered showed
    PG up to 5. Now any sample faster than bf16 that does not say so is rejected, and its job's PG is unknown."""
    events = [
        submit(0, accelerator="h100"),
        ev(0, "ALLOCATE", 8),
        ev(0, "STEP_START", 1),
        ev(10, "STEP_END", 10),
        sample_in_precision(5, 1.2 * 8 * 989e12, None),
        ev(10, "FINISH"),
    ]
    timeline, deltas = run(events, as_of_s=10)
    assert len(timeline.rejections) == 1 and not timeline.samples
    assert sum(v[IDEAL] for v in deltas.values()) == 0
    assert sum(v[FIGURES.index("profiled_productive")] for v in deltas.values()) == 0


@pytest.mark.parametrize("shuffle_seed", [None, 1, 2, 3, 4])
def test_an_event_id_carried_by_two_events_is_a_conflict_whatever_the_order(shuffle_seed):
    fail, finish = ev(10, "FAIL"), ev(15, "FINISH")
    finish = finish._replace(event_id=fail.event_id)
    timeline, _ = run([submit(0), ev(1, "ALLOCATE", 8), finish, fail, fail], as_of_s=20, shuffle_seed=shuffle_seed)
    assert timeline.status == "FAILED" and timeline.end_us == fail.time_us
    assert [(r.event.code, r.reason) for r in timeline.rejections] == [
        (
            "FINISH",
            f"event_id conflict: already carried by a different event (FAIL at {fail.time_us} µs); "
            "the earlier in event-time order is kept",
        )
    ]
    assert dict(timeline.duplicates) == {"scheduler": 1}


def test_unknown_ideal_is_null_and_empty_productive_time_is_zero():
    """docs/metric.md section 1, "Unknown and empty factors", on job_window rows."""
    from fleet_goodput.transforms.goodput import to_job_window_row

    steps = [ev(0, "ALLOCATE", 8), ev(0, "STEP_START", 1), ev(10, "STEP_END", 1), ev(10, "FINISH")]
    _, unprofiled = run([submit(0), *steps], as_of_s=10)
    _, profiled_idle = run([submit(0), ev(0, "ALLOCATE", 8), sample(1, 8e12), ev(10, "FINISH")], as_of_s=10)
    _, profiled = run([submit(0), *steps, sample(5, 8 * 197e12)], as_of_s=10)
    row = {
        name: to_job_window_row(("j", w, 0, v))
        for name, deltas in (("unprofiled", unprofiled), ("profiled_idle", profiled_idle), ("profiled", profiled))
        for w, v in deltas.items()
    }
    assert row["unprofiled"]["ideal_chip_s"] is None and row["unprofiled"]["productive_chip_s"] == 80
    assert row["profiled_idle"]["ideal_chip_s"] is None and row["profiled_idle"]["productive_chip_s"] == 0
    assert row["profiled"]["ideal_chip_s"] == pytest.approx(8.0)


def test_checkpoint_saves_count_the_saves_completed():
    """A save counts once its END closes it: a save cut by a disruption, an END
    without a START and a repeated END are not saves."""
    save_end = ev(30, "CHECKPOINT_SAVE_END", 2)
    events = [
        submit(),
        ev(0, "ALLOCATE", 8),
        ev(0, "STEP_START", 1),
        ev(10, "STEP_END", 1),
        ev(10, "CHECKPOINT_SAVE_START"),
        ev(12, "CHECKPOINT_SAVE_END", 1),
        ev(12, "STEP_START", 2),
        ev(20, "STEP_END", 2),
        ev(20, "CHECKPOINT_SAVE_START"),
        ev(22, "PREEMPT", 0),
        ev(25, "ALLOCATE", 8),
        ev(26, "CHECKPOINT_SAVE_END", 2),  # its START went with the preemption
        ev(28, "CHECKPOINT_SAVE_START"),
        save_end,
        save_end,
        ev(30, "FINISH"),
    ]
    timeline, _ = run(events, as_of_s=30)
    assert timeline.checkpoint_saves == 2 and timeline.summary()["checkpoint_saves"] == 2
    assert [r.reason for r in timeline.rejections] == ["CHECKPOINT_SAVE_END without an open CHECKPOINT_SAVE_START"]
    assert dict(timeline.duplicates) == {"runtime": 1}


def steps(start_s, first, last, seconds_per_step=10):
    """A STEP span of steps first..last, from start_s at seconds_per_step each."""
    return [ev(start_s, "STEP_START", first), ev(start_s + (last - first + 1) * seconds_per_step, "STEP_END", last)]


def save(start_s, step, seconds=10):
    return [ev(start_s, "CHECKPOINT_SAVE_START"), ev(start_s + seconds, "CHECKPOINT_SAVE_END", step)]


# Progress is counted once (the timeline's docstring): a step already preserved is never productive
# again. One step is 10 s, and the sample makes its ideal 8 chip-s, so 1 s per step in `ideal` below.
REDONE_STEPS = {
    "steps going back to 1 after a checkpoint: the unpreserved steps and the redone ones are lost": (
        lambda: [
            *steps(0, 1, 10),
            *save(100, 10),
            *steps(110, 11, 16),
            *steps(170, 1, 10),
            *steps(270, 11, 20),
            *save(370, 20),
            ev(380, "FINISH"),
        ],
        380,
        {"productive": 200, "lost": 60 + 100, "checkpoint_save": 20},
        20,
    ),
    "a span reaching past the preserved step is productive, its ideal only the new steps": (
        lambda: [*steps(0, 1, 10), *save(100, 10), *steps(110, 6, 15), ev(210, "FINISH")],
        210,
        {"productive": 200, "checkpoint_save": 10},
        15,
    ),
    "a restore to an older checkpoint: steps redone up to the latest one are lost": (
        lambda: [
            *steps(0, 1, 10),
            *save(100, 10),
            *steps(110, 11, 20),
            *save(210, 20),
            ev(220, "CHECKPOINT_RESTORE_START"),
            ev(230, "CHECKPOINT_RESTORE_END", 10),
            *steps(230, 11, 20),
            ev(330, "FINISH"),
        ],
        330,
        {"productive": 200, "lost": 100, "checkpoint_save": 20, "checkpoint_restore": 10},
        20,
    ),
    "a step span restarted without its END: the runtime restarted, its time is lost": (
        lambda: [*steps(0, 1, 10), *save(100, 10), ev(110, "STEP_START", 11), *steps(130, 11, 12), ev(150, "FINISH")],
        150,
        {"productive": 100 + 20, "lost": 20, "checkpoint_save": 10},
        12,
    ),
    "a step split around a pause continues: productive, its ideal counted once": (
        lambda: [
            *steps(0, 1, 5),
            ev(50, "STEP_START", 6),
            ev(55, "STEP_END", 6),
            ev(60, "STEP_START", 6),
            ev(65, "STEP_END", 6),
            *save(65, 6),
            ev(75, "FINISH"),
        ],
        75,
        {"productive": 60, "checkpoint_save": 10, "idle": 5},
        6,
    ),
    "finishing while redoing preserved steps preserves nothing new": (
        lambda: [*steps(0, 1, 10), *save(100, 10), *steps(110, 1, 5), ev(160, "FINISH")],
        160,
        {"productive": 100, "lost": 50, "checkpoint_save": 10},
        10,
    ),
    "batch inference redoing finished steps: lost": (
        lambda: [*steps(0, 1, 5), *steps(50, 1, 5), *steps(100, 6, 7), ev(120, "FINISH")],
        120,
        {"productive": 70, "lost": 50},
        7,
    ),
    "serving steps numbered afresh are new requests: productive": (
        lambda: [*steps(0, 1, 5), *steps(50, 1, 5), ev(100, "FINISH")],
        100,
        {"productive": 100},
        10,
    ),
}
_WORKLOAD_OF_CASE = {
    "batch inference redoing finished steps: lost": "BULK_INFERENCE",
    "serving steps numbered afresh are new requests: productive": "SERVING",
}


def _redone_case(name):
    make_events, as_of_s, expected, ideal_steps = REDONE_STEPS[name]
    head = [submit(workload=_WORKLOAD_OF_CASE.get(name, "TRAINING")), ev(0, "ALLOCATE", 8), sample(1, 8 * 197e12)]
    return [*head, *make_events()], as_of_s, expected, ideal_steps


@pytest.mark.parametrize("name", REDONE_STEPS)
def test_a_step_already_preserved_is_never_productive_again(name):
    events, as_of_s, expected, ideal_steps = _redone_case(name)
    timeline, deltas = run(events, as_of_s)
    got = seconds_by_category(deltas)
    assert not timeline.rejections
    for figure in CATEGORIES:
        assert got[figure] == pytest.approx(expected.get(figure, 0)), figure
    assert got["all_allocated"] == pytest.approx(sum(got[c] for c in ALL_ALLOCATED))
    assert got["ideal"] == pytest.approx(ideal_steps)


@pytest.mark.parametrize("name", REDONE_STEPS)
def test_redone_steps_do_not_depend_on_where_the_input_is_cut(name):
    """Fed in two parts at every instant an event happens, with a provisional flush and a pickled
    timeline between (as a run that continues an earlier one): the same figures as one feed."""
    import pickle

    events, as_of_s, _, _ = _redone_case(name)
    _, whole = run(events, as_of_s)
    whole_seconds = seconds_by_category(whole)
    for cut in sorted({e.time_us for e in events}):
        timeline = JobTimeline("j", HOUR_US, PEAK)
        timeline.feed([e for e in events if e.time_us <= cut])
        timeline.advance_to(cut)
        first = seconds_by_category(timeline.flush(provisional=True))
        timeline = pickle.loads(pickle.dumps(timeline))
        timeline.feed([e for e in events if e.time_us > cut])
        timeline.close(T0 + int(as_of_s * 1_000_000))
        second = seconds_by_category(timeline.flush())
        for figure in (*FIGURES, "ideal"):
            assert first[figure] + second[figure] == pytest.approx(whole_seconds[figure]), (cut, figure)


DISRUPTIONS = {
    # name: (events after SUBMIT, disruptions)
    "never allocated (was -1: allocations - 1)": ([ev(50, "CANCEL")], 0),
    "partial, then all its chips (was 1)": ([ev(10, "ALLOCATE", 4), ev(30, "ALLOCATE", 8), ev(40, "FINISH")], 0),
    "preempted while running, restored on the next allocation": (
        [
            ev(0, "ALLOCATE", 8),
            *steps(0, 1, 2),
            ev(30, "PREEMPT", 0),
            ev(40, "ALLOCATE", 8),
            ev(40, "CHECKPOINT_RESTORE_START"),
            ev(45, "CHECKPOINT_RESTORE_END", 0),
            ev(50, "FINISH"),
        ],
        1,
    ),
    "preempted while partial: nothing was running": (
        [ev(0, "ALLOCATE", 4), ev(10, "PREEMPT", 0), ev(20, "ALLOCATE", 8), ev(30, "FINISH")],
        0,
    ),
    "a PREEMPT to fewer chips while running": ([ev(0, "ALLOCATE", 8), ev(10, "PREEMPT", 4), ev(20, "FAIL")], 1),
    "failed while running": ([ev(0, "ALLOCATE", 8), ev(10, "FAIL")], 1),
    "failed while queued": ([ev(10, "FAIL")], 0),
    "cancelled while running: the owner's decision": ([ev(0, "ALLOCATE", 8), ev(10, "CANCEL")], 0),
    "restored inside its allocation after steps ran": (
        [
            ev(0, "ALLOCATE", 8),
            *steps(0, 1, 2),
            ev(20, "CHECKPOINT_RESTORE_START"),
            ev(25, "CHECKPOINT_RESTORE_END", 0),
            *steps(25, 1, 2),
            ev(45, "FINISH"),
        ],
        1,
    ),
    "steps going back inside its allocation, twice": (
        [ev(0, "ALLOCATE", 8), *steps(0, 1, 2), *steps(20, 1, 3), *steps(50, 2, 2), ev(60, "FINISH")],
        2,
    ),
}


UNENDED_RUNS = {
    # name: (events after SUBMIT, runs of the runtime that stopped without an end mark)
    "a run that ends its spans and FINISHes": (
        [ev(0, "ALLOCATE", 8), ev(0, "INIT_START"), ev(5, "INIT_END"), *steps(5, 1, 2), ev(30, "FINISH")],
        0,
    ),
    "init, then a restore, then steps: one run": (
        [
            ev(0, "ALLOCATE", 8),
            ev(0, "INIT_START"),
            ev(5, "INIT_END"),
            ev(5, "CHECKPOINT_RESTORE_START"),
            ev(8, "CHECKPOINT_RESTORE_END", 0),
            *steps(8, 1, 2),
            ev(30, "FINISH"),
        ],
        0,
    ),
    "steps, then the runtime starts again without an end: killed": (
        [
            ev(0, "ALLOCATE", 8),
            *steps(0, 1, 2),
            ev(25, "INIT_START"),
            ev(30, "INIT_END"),
            *steps(30, 1, 2),
            ev(60, "FINISH"),
        ],
        1,
    ),
    "a step left open when the job ends": (
        [ev(0, "ALLOCATE", 8), *steps(0, 1, 2), ev(20, "STEP_START", 3), ev(40, "FINISH")],
        1,
    ),
    "a PREEMPT between runs is their end": (
        [
            ev(0, "ALLOCATE", 8),
            *steps(0, 1, 2),
            ev(25, "PREEMPT", 0),
            ev(30, "ALLOCATE", 8),
            ev(30, "INIT_START"),
            ev(35, "INIT_END"),
            *steps(35, 1, 2),
            ev(60, "FINISH"),
        ],
        0,
    ),
}


@pytest.mark.parametrize("name", UNENDED_RUNS)
def test_runs_of_the_runtime_that_stopped_without_an_end_are_counted(name):
    events, expected = UNENDED_RUNS[name]
    timeline, _ = run([submit(), *events], as_of_s=100)
    assert not timeline.rejections
    assert timeline.summary()["unended_runs"] == expected


@pytest.mark.parametrize("name", DISRUPTIONS)
def test_disruptions_count_the_events_that_cut_or_restarted_a_running_attempt(name):
    events, expected = DISRUPTIONS[name]
    timeline, _ = run([submit(), *events], as_of_s=100)
    assert not timeline.rejections
    assert timeline.disruptions == expected and timeline.summary()["disruptions"] == expected
