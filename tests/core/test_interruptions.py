"""Why jobs stopped (docs/metric.md, "Why jobs stopped"): each interruption of a running attempt, what
it cost and how long the job took to get going again, hand-computed; then the marts over a Slurm import."""

from __future__ import annotations

import pytest

from fleet_goodput.core.interruptions import cause_of
from test_timeline import T0, ev, run, submit


def test_each_interruption_of_a_running_attempt_with_its_cost_and_recovery():
    events = [
        submit(0),
        ev(10, "ALLOCATE", 8),
        ev(10, "STEP_START", 1),
        ev(30, "STEP_END", 5),
        ev(30, "CHECKPOINT_SAVE_START"),
        ev(32, "CHECKPOINT_SAVE_END", 5),
        ev(32, "STEP_START", 6),
        ev(40, "STEP_END", 8),
        ev(45, "PREEMPT", 0, "NODE_FAIL: xid 79"),  # steps 6-8 (32-40 s) were not saved
        ev(60, "ALLOCATE", 8),
        ev(62, "CHECKPOINT_RESTORE_START"),
        ev(70, "CHECKPOINT_RESTORE_END", 5),
        ev(70, "STEP_START", 6),
        ev(90, "STEP_END", 10),
        ev(100, "FAIL", "TIMEOUT"),
    ]
    timeline, _ = run(events, as_of_s=100)
    assert timeline.summary()["interruptions"] == [
        {
            "time": T0 + 45_000_000,
            "event": "PREEMPT",
            "cause": "NODE_FAIL",
            "reason": "NODE_FAIL: xid 79",
            "run_s": 35.0,
            "reallocated_s": 15.0,
            "recovered_s": 25.0,
            "lost_chip_s": 8 * 8.0,
        },
        {
            "time": T0 + 100_000_000,
            "event": "FAIL",
            "cause": "TIMEOUT",
            "reason": "TIMEOUT",
            "run_s": 40.0,
            "reallocated_s": None,
            "recovered_s": None,
            "lost_chip_s": 8 * 20.0,
        },
    ]
    assert timeline.summary()["end_reason"] == "TIMEOUT"


def test_only_running_attempts_are_interrupted():
    """A preemption of a partial allocation, a cancel while queued and a finish are not interruptions;
    a job that never resumes work has no recovery, and one without a reason gets its event's cause."""
    partial, _ = run([submit(0), ev(5, "ALLOCATE", 4), ev(9, "PREEMPT", 0), ev(12, "CANCEL")], as_of_s=20)
    assert partial.summary()["interruptions"] == []
    waiting, _ = run([submit(0), ev(5, "ALLOCATE", 8), ev(9, "PREEMPT", 0), ev(20, "ALLOCATE", 8)], as_of_s=30)
    (only,) = waiting.summary()["interruptions"]
    assert (only["cause"], only["run_s"], only["reallocated_s"], only["recovered_s"]) == ("PREEMPTED", 4.0, 11.0, None)


@pytest.mark.parametrize(
    "event, reason, cause",
    [
        ("PREEMPT", "PREEMPTED", "PREEMPTED"),
        ("FAIL", "FAILED (exit 3:0)", "FAILED"),
        ("CANCEL", "CANCELLED by 1000", "CANCELLED"),
        ("FAIL", "node_fail: psu", "NODE_FAIL"),
        ("FAIL", None, "FAILED"),
        ("PREEMPT", "", "PREEMPTED"),
    ],
)
def test_a_cause_is_the_first_word_of_the_reason(event, reason, cause):
    assert cause_of(event, reason) == cause


def test_the_report_section_sums_the_recorded_slurm_run_by_cause(tmp_path):
    """The report's "Why jobs stopped" rows over tests/data/slurm: one per cause here, each cost being the
    requested GPUs × the seconds until the job held them again (no runtime stream: no work is known lost)."""
    from datetime import date

    from fleet_goodput.quality.period import Period
    from fleet_goodput.report.figures import interruptions
    from fleet_goodput.runs.batch import run_batch
    from fleet_goodput.store.views import connect
    from importing import FIXTURES, SETTINGS, import_to

    import_to("slurm", FIXTURES / "slurm", tmp_path / "in")
    run_batch(str(tmp_path / "in"), str(tmp_path / "out"), SETTINGS, build_views=False)
    with connect(tmp_path / "out") as connection:
        rows = interruptions(connection, Period(date(2026, 11, 26), date(2026, 11, 26)))
    by_cause = {
        row["cause"]: (row["interruptions"], row["mean_run_s"], row["lost_chip_h"] * 3600, row["cost_chip_h"] * 3600)
        for row in rows
    }
    # sacct: 4 PREEMPTED 04:30:44-46, again 52 (4 GPUs); 5 NODE_FAIL same times (2 GPUs); 9 REQUEUED (1 GPU);
    # 1 TIMEOUT after 89 s, 7 FAILED after 1 s, 8 CANCELLED after 2 s: those ended their jobs.
    assert by_cause == {
        "PREEMPTED": (1, 2.0, 0.0, 4 * 6.0),
        "NODE_FAIL": (1, 2.0, 0.0, 2 * 6.0),
        "REQUEUED": (1, 2.0, 0.0, 1 * 6.0),
        "TIMEOUT": (1, 89.0, 0.0, 0.0),
        "FAILED": (1, 1.0, 0.0, 0.0),
        "CANCELLED": (1, 2.0, 0.0, 0.0),
    }
    assert [row["cause"] for row in rows][:3] == ["PREEMPTED", "NODE_FAIL", "REQUEUED"]  # costliest first
