"""queue_daily (waits and held chip-time per partition and day) against a small fleet computed by hand.

Cluster `c`, 16 h100, observed from 2026-01-01T00:00Z to 2026-01-02T02:00Z (the as-of time).
Queue `gpu` (a Slurm partition, say); times are day 1 unless said:
- a, 4 chips: submitted 22:00, holds them 23:00 to day 2 01:00, finishes. Wait 3,600 s. Day 1: queued
  1 h x 4 = 14,400, held 1 h x 4 = 14,400; day 2: held 14,400. FINISHED.
- b, 2 chips: submitted and holds them 20:00, preempted 21:00, holds them again 21:30, times out
  22:00. Wait 0. Held 1 h 30 x 2 = 10,800, queued 30 min x 2 = 3,600. FAILED.
- h, 1 chip: submitted 10:00 held (--hold), cancelled 10:20 without ever starting. Queued 1,200.
- x, 1 chip: submitted 12:00, holds it 12:10, cancelled 12:40. Wait 600; held 1,800, queued 600.
- r, 8 chips: submitted day 2 00:30, holds them 00:45, still running at 02:00. Wait 900; held
  1 h 15 x 8 = 36,000, queued 15 min x 8 = 7,200.
- p, 2 chips: submitted day 2 01:00, still pending at 02:00. Queued 1 h x 2 = 7,200.
Queue `urgent`: u, 4 chips, submitted and holds them 21:00, finishes 21:30: wait 0, held 7,200.

gpu day 1: submitted a, b, h, x; started a, b, x, waits 3,600, 0, 600: mean 1,400, median 600,
p90 600 + 0.8 x 3,000 = 3,000 (interpolated); h ended unstarted. Held 14,400 finished + 10,800 failed
+ 1,800 cancelled = 27,000; queued 14,400 + 3,600 + 1,200 + 600 = 19,800.
gpu day 2: submitted r, p; started r (900 s); p waiting. Held 14,400 finished (a's second hour) +
36,000 not ended = 50,400; queued 7,200 + 7,200 = 14,400.
"""

from __future__ import annotations

from itertools import count

import pytest

from fleet_goodput.core.config import load_settings
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00Z
MIN = 60 * 1_000_000
DAY2 = 24 * 60
NUMBERS = count()


def _event(job, minutes, kind, chips, queue="gpu", reason=None):
    return {
        "event_id": f"e{next(NUMBERS)}",
        "event_time": T0 + minutes * MIN,
        "job_id": job,
        "type": kind,
        "cluster": "c",
        "accelerator": "h100",
        "chips": chips,
        "workload": None,
        "framework": None,
        "team": None,
        "topology": None,
        "priority": None,
        "queue": queue if kind == "SUBMIT" else None,
        "reason": reason,
    }


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    root = tmp_path_factory.mktemp("queue-daily")
    records = [
        _event(None, 0, "CAPACITY", 16),
        _event("a", 22 * 60, "SUBMIT", 4),
        _event("a", 23 * 60, "ALLOCATE", 4),
        _event("a", DAY2 + 60, "FINISH", 0),
        _event("b", 20 * 60, "SUBMIT", 2),
        _event("b", 20 * 60, "ALLOCATE", 2),
        _event("b", 21 * 60, "PREEMPT", 0, reason="PREEMPTED"),
        _event("b", 21 * 60 + 30, "ALLOCATE", 2),
        _event("b", 22 * 60, "FAIL", 0, reason="TIMEOUT"),
        _event("h", 10 * 60, "SUBMIT", 1),
        _event("h", 10 * 60 + 20, "CANCEL", 0, reason="CANCELLED by 0 (never started: JobHeldUser)"),
        _event("x", 12 * 60, "SUBMIT", 1),
        _event("x", 12 * 60 + 10, "ALLOCATE", 1),
        _event("x", 12 * 60 + 40, "CANCEL", 0),
        _event("r", DAY2 + 30, "SUBMIT", 8),
        _event("r", DAY2 + 45, "ALLOCATE", 8),
        _event("p", DAY2 + 60, "SUBMIT", 2),
        _event("u", 21 * 60, "SUBMIT", 4, queue="urgent"),
        _event("u", 21 * 60, "ALLOCATE", 4),
        _event("u", 21 * 60 + 30, "FINISH", 0),
    ]
    write_events(
        root / "in" / "scheduler" / "part-0.avro", "scheduler", records, observed={"c": (T0, T0 + (DAY2 + 120) * MIN)}
    )
    run_batch(str(root / "in"), str(root / "out"), load_settings(), build_views=False)
    with connect(root / "out") as connection:
        found = connection.execute("""
            select day::varchar, queue, cluster_queue, submitted, started, mean_wait_s, p50_wait_s, p90_wait_s,
                   waiting, ended_unstarted, held_chip_s, finished_held_chip_s, failed_held_chip_s,
                   cancelled_held_chip_s, not_ended_held_chip_s, queued_chip_s
            from queue_daily where cluster = 'c'""").fetchall()
    return {(row[0], row[1]): row[2:] for row in found}


def test_queue_daily_by_hand(rows):
    approx = pytest.approx
    assert rows == {
        ("2026-01-01", "gpu"): (
            "gpu",
            4,
            3,
            approx(1400.0),
            approx(600.0),
            approx(3000.0),
            0,
            1,
            approx(27_000.0),
            approx(14_400.0),
            approx(10_800.0),
            approx(1_800.0),
            0,
            approx(19_800.0),
        ),
        ("2026-01-02", "gpu"): (
            "gpu",
            2,
            1,
            approx(900.0),
            approx(900.0),
            approx(900.0),
            1,
            0,
            approx(50_400.0),
            approx(14_400.0),
            0,
            0,
            approx(36_000.0),
            approx(14_400.0),
        ),
        ("2026-01-01", "urgent"): ("urgent", 1, 1, 0, 0, 0, 0, 0, approx(7_200.0), approx(7_200.0), 0, 0, 0, 0),
    }
