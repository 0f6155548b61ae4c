"""interruptions_by_queue, reliability_daily and queue_waits against small fleets computed by hand.

Cluster `c`, 16 h100, queue `gpu` (a Slurm partition, say), times on 2026-01-01:
- job A, 8 chips: all held 01:00-03:00, PREEMPTED at 03:00, held again 03:30-05:00,
  PREEMPTED at 05:00, held again 05:10, finished 06:00;
- job B, 4 chips: held 00:00-02:00, then FAIL with NODE_FAIL.

By hand: interruptions A@03:00 (ran 2 h, restarted 30 min later), A@05:00 (ran
1 h 30 min, restarted 10 min later), B@02:00 (ran 2 h, ended the job).
PREEMPTED: 2 interruptions, restart mean 20 min, median 20 min, p90 = 10 min +
0.9 x 20 min = 28 min (interpolated). Running time: A 2 h + 1 h 30 + 50 min =
4 h 20 min, B 2 h: 6 h 20 min = 22,800 s over 3 interruptions, TBI 7,600 s.
"""

from __future__ import annotations

import pytest

from fleet_goodput.core.config import load_settings
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00Z
MIN = 60 * 1_000_000


def _event(event_id, minutes, kind, chips, job=None, reason=None):
    return {
        "event_id": event_id,
        "event_time": T0 + minutes * MIN,
        "job_id": job,
        "type": kind,
        "cluster": "c",
        "accelerator": "h100",
        "chips": chips,
        "workload": "TRAINING" if kind == "SUBMIT" else None,
        "framework": None,
        "team": None,
        "topology": None,
        "priority": None,
        "queue": "gpu" if kind == "SUBMIT" else None,
        "reason": reason,
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("queues")
    records = [
        _event("cap", 0, "CAPACITY", 16),
        _event("a-s", 60, "SUBMIT", 8, "a"),
        _event("a-1", 60, "ALLOCATE", 8, "a"),
        _event("a-2", 180, "PREEMPT", 0, "a", "PREEMPTED"),
        _event("a-3", 210, "ALLOCATE", 8, "a"),
        _event("a-4", 300, "PREEMPT", 0, "a", "PREEMPTED"),
        _event("a-5", 310, "ALLOCATE", 8, "a"),
        _event("a-6", 360, "FINISH", 0, "a", "COMPLETED"),
        _event("b-s", 0, "SUBMIT", 4, "b"),
        _event("b-1", 0, "ALLOCATE", 4, "b"),
        _event("b-2", 120, "FAIL", 0, "b", "NODE_FAIL: xid 79"),
    ]
    write_events(
        root / "in" / "scheduler" / "part-0.avro", "scheduler", records, observed={"c": (T0, T0 + 24 * 60 * MIN)}
    )
    run_batch(str(root / "in"), str(root / "out"), load_settings(), build_views=False)
    return root / "out"


def test_interruptions_by_queue_by_hand(store):
    with connect(store) as connection:
        rows = {
            row[0]: row[1:]
            for row in connection.execute("""
            select cause, queue, cluster_queue, interruptions, jobs, mean_run_s, restarts, mean_restart_s,
                   p50_restart_s, p90_restart_s
            from interruptions_by_queue""").fetchall()
        }
    assert rows["PREEMPTED"] == (
        "gpu",
        "gpu",
        2,
        1,
        pytest.approx(6300.0),
        2,
        pytest.approx(1200.0),
        pytest.approx(1200.0),
        pytest.approx(1680.0),
    )
    assert rows["NODE_FAIL"] == ("gpu", "gpu", 1, 1, pytest.approx(7200.0), 0, None, None, None)


def test_reliability_daily_by_hand(store):
    with connect(store) as connection:
        row = connection.execute("""
            select day::varchar, running_s, interruptions, mean_tbi_s, restarts, mean_ttr_s, p90_ttr_s
            from reliability_daily""").fetchall()
    assert row == [
        (
            "2026-01-01",
            pytest.approx(22_800.0),
            3,
            pytest.approx(7_600.0),
            2,
            pytest.approx(1200.0),
            pytest.approx(1680.0),
        )
    ]


@pytest.fixture(scope="module")
def waits(tmp_path_factory):
    """Queue `gpu`, all submitted on 2026-01-01, 16 h100 online:
    - a (8 chips): submitted and started 01:00 (wait 0); b (4): submitted and started 00:00 (wait 0);
    - c (2): submitted 00:30, started 02:00 (wait 5,400 s);
    - f (2): submitted 00:00, 1 chip from 01:00 (partial: not a start), both from 02:00 (wait 7,200 s);
    - d (2): submitted 03:00, never allocated: waiting at the as-of time;
    - e (2): submitted 04:00, cancelled 04:30 while queued.
    Started 4: waits 0, 0, 5,400, 7,200: mean 3,150 s, median 2,700 s, p90 5,400 + 0.7 x 1,800 = 6,660 s."""
    root = tmp_path_factory.mktemp("waits")
    records = [
        _event("cap", 0, "CAPACITY", 16),
        _event("a-s", 60, "SUBMIT", 8, "a"),
        _event("a-1", 60, "ALLOCATE", 8, "a"),
        _event("a-2", 360, "FINISH", 0, "a"),
        _event("b-s", 0, "SUBMIT", 4, "b"),
        _event("b-1", 0, "ALLOCATE", 4, "b"),
        _event("b-2", 120, "FINISH", 0, "b"),
        _event("c-s", 30, "SUBMIT", 2, "c"),
        _event("c-1", 120, "ALLOCATE", 2, "c"),
        _event("c-2", 360, "FINISH", 0, "c"),
        _event("f-s", 0, "SUBMIT", 2, "f"),
        _event("f-1", 60, "ALLOCATE", 1, "f"),
        _event("f-2", 120, "ALLOCATE", 2, "f"),
        _event("f-3", 180, "FINISH", 0, "f"),
        _event("d-s", 180, "SUBMIT", 2, "d"),
        _event("e-s", 240, "SUBMIT", 2, "e"),
        _event("e-1", 270, "CANCEL", 0, "e", "CANCELLED by 0"),
    ]
    write_events(
        root / "in" / "scheduler" / "part-0.avro", "scheduler", records, observed={"c": (T0, T0 + 12 * 60 * MIN)}
    )
    run_batch(str(root / "in"), str(root / "out"), load_settings(), build_views=False)
    return root / "out"


def test_queue_waits_by_hand(waits):
    with connect(waits) as connection:
        rows = connection.execute("""
            select day::varchar, queue, cluster_queue, submitted, started, mean_wait_s, p50_wait_s, p90_wait_s,
                   max_wait_s, waiting, waiting_chips, ended_unstarted
            from queue_waits""").fetchall()
        statuses = dict(connection.execute("select job_id, status from jobs").fetchall())
    assert rows == [
        (
            "2026-01-01",
            "gpu",
            "gpu",
            6,
            4,
            pytest.approx(3150.0),
            pytest.approx(2700.0),
            pytest.approx(6660.0),
            pytest.approx(7200.0),
            1,
            2,
            1,
        )
    ]
    assert statuses == {
        "a": "FINISHED",
        "b": "FINISHED",
        "c": "FINISHED",
        "f": "FINISHED",
        "d": "PENDING",
        "e": "CANCELLED",
    }
