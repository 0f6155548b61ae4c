"""Clocks reset into the past in the middle of a fleet's history (docs/metric.md, "Time and the as-of time").

The fleet here has a history that starts in 2000 (an old trace: four jobs of a cluster `old`, twelve
scheduler events, so the history-start rule takes them for history), then the worked example in 2026.
A SUBMIT dated 2001-01-01 falls in the middle of that history, so only the per-job rule can catch it:
no other event of its job follows it within the longest queue wait taken for real (92 days).
"""

from __future__ import annotations

import pytest

import worked_example
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.session import MAX_QUEUE_WAIT_US
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events

pytestmark = pytest.mark.slow  # eleven pipeline runs over years of history, about 15 CPU s: scheduled first

T0 = worked_example.T0_US
DAY_US = 86_400 * 1_000_000
Y2000_JUNE_US = 959_817_600_000_000  # 2000-06-01T00:00:00Z
Y2001_US = 978_307_200_000_000  # 2001-01-01T00:00:00Z: where a host's clock lands when it resets
QUEUE_REASON = (
    "no other event of its job within 92 days after this SUBMIT (a clock reset to a past date?): "
    "a queue wait that long is not taken for real, so no figure rests on it"
)


def _scheduler(event_id: str, job_id: str | None, kind: str, time_us: int, chips: int, cluster: str = "c1") -> dict:
    return {
        "event_id": event_id,
        "event_time": time_us,
        "job_id": job_id,
        "type": kind,
        "cluster": cluster,
        "accelerator": "tpu-v5e",
        "chips": chips,
        "workload": "TRAINING" if kind == "SUBMIT" else None,
        "framework": None,
        "team": None,
        "topology": None,
        "priority": None,
    }


def _old_trace() -> list[dict]:
    """Four jobs of 2000, each queued 10 min and run 1 h on 4 chips: 12 scheduler events."""
    events = []
    for n in range(4):
        start = Y2000_JUNE_US + n * 7200 * 1_000_000
        events += [
            _scheduler(f"old{n}-s", f"old{n}", "SUBMIT", start, 4, "old"),
            _scheduler(f"old{n}-a", f"old{n}", "ALLOCATE", start + 600_000_000, 4, "old"),
            _scheduler(f"old{n}-f", f"old{n}", "FINISH", start + 4_200_000_000, 0, "old"),
        ]
    return events


def _fleet(root, *extra: dict) -> None:
    records = worked_example.records()
    records["scheduler"] += _old_trace() + list(extra)
    for stream, rows in records.items():
        write_events(root / stream / "part-0.avro", stream, rows)


def _figures(output) -> dict:
    with connect(output) as connection:
        jobs = {
            row[0]: row[1:]
            for row in connection.execute(
                "select job_id, lifetime_chip_s, queued_chip_s, sg, rg, pg, mpg from job_goodput"
            ).fetchall()
        }
        rejected = dict(connection.execute("select event_id, reason from rejected").fetchall())
        windows = connection.execute("select count(*) from job_window").fetchone()[0]
    return {"jobs": jobs, "rejected": rejected, "job_windows": windows}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    _fleet(root / "in")
    run_batch(str(root / "in"), str(root / "out"), load_settings(), build_views=False)
    return _figures(root / "out")


@pytest.mark.parametrize("chunk_hours", [None, 24])
def test_a_submit_years_before_the_rest_of_its_job_is_rejected(clean, tmp_path, chunk_hours):
    """j2's SUBMIT is dated 2001, its ALLOCATE 2026; j3's SUBMIT is dated 2001 and nothing else of j3 came.
    Both SUBMITs are rejected with the per-job reason, j2's ALLOCATE for want of a SUBMIT, and every other
    job's figures are the clean run's, in one pass and in a backfill in daily chunks."""
    _fleet(
        tmp_path / "in",
        _scheduler("j2-submit", "j2", "SUBMIT", Y2001_US, 8),
        _scheduler("j2-allocate", "j2", "ALLOCATE", T0 + 200_000_000, 8),
        _scheduler("j3-submit", "j3", "SUBMIT", Y2001_US + 60_000_000, 8),
    )
    outcome = run_batch(
        str(tmp_path / "in"), str(tmp_path / "out"), load_settings(), chunk_hours=chunk_hours, build_views=False
    )
    assert outcome.manifest["reconciles"] and outcome.manifest["as_of_us"] == T0 + 580_000_000
    figures = _figures(tmp_path / "out")
    assert figures["rejected"] == {
        "j2-submit": QUEUE_REASON,
        "j3-submit": QUEUE_REASON,
        "j2-allocate": "no SUBMIT for this job at or before this event",
    }
    others = {job: row for job, row in figures["jobs"].items() if job not in ("j2", "j3")}
    assert others == clean["jobs"]
    assert all(row[0] == 0 for job, row in figures["jobs"].items() if job in ("j2", "j3"))  # nothing rests on them
    assert clean["jobs"]["j1"][2:] == pytest.approx((380 / 580, 200 / 380, 0.5, 100 / 580))
    assert clean["jobs"]["old0"][:2] == (4 * 4200.0, 4 * 600.0)  # the old trace's figures, by hand


def test_a_queue_wait_of_weeks_is_real(clean, tmp_path):
    """A SUBMIT 91 days before its job's ALLOCATE is within the longest wait taken for real: the job
    is queued all that time (8 chips × 91 days), one row per hour of it."""
    wait_us = 91 * DAY_US
    assert wait_us < MAX_QUEUE_WAIT_US
    _fleet(
        tmp_path / "in",
        _scheduler("j2-submit", "j2", "SUBMIT", T0 + 200_000_000 - wait_us, 8),
        _scheduler("j2-allocate", "j2", "ALLOCATE", T0 + 200_000_000, 8),
    )
    run_batch(str(tmp_path / "in"), str(tmp_path / "out"), load_settings(), build_views=False)
    figures = _figures(tmp_path / "out")
    assert figures["rejected"] == {}
    assert figures["jobs"]["j2"][:2] == (8 * (wait_us + 380_000_000) / 1e6, 8 * wait_us / 1e6)
    assert {job: row for job, row in figures["jobs"].items() if job != "j2"} == clean["jobs"]


def test_a_submit_waits_for_its_job_in_later_runs(tmp_path):
    """Daily runs: a SUBMIT with nothing else of its job yet counts as queued while its wait is
    plausible, and stands once its ALLOCATE comes within the wait; a lone SUBMIT whose wait passes the
    longest one taken for real is rejected then, and the figures it gave are withdrawn."""
    submit = _scheduler("j2-submit", "j2", "SUBMIT", T0 + 600_000_000, 8)
    lone = _scheduler("j3-submit", "j3", "SUBMIT", T0 + 600_000_000, 8)
    capacity = [_scheduler(f"cap-{day}", None, "CAPACITY", T0 + day * DAY_US, 8) for day in (1, 2, 100)]
    allocate = _scheduler("j2-allocate", "j2", "ALLOCATE", T0 + 2 * DAY_US, 8)
    output = str(tmp_path / "out")
    write_events(
        tmp_path / "d0" / "scheduler" / "part-0.avro",
        "scheduler",
        worked_example.records()["scheduler"] + [submit, lone, capacity[0]],
    )
    run_batch(str(tmp_path / "d0"), output, load_settings(), build_views=False)
    assert _figures(output)["jobs"]["j3"][1] == 8 * (DAY_US - 600_000_000) / 1e6  # queued until the as-of
    write_events(tmp_path / "d1" / "scheduler" / "part-0.avro", "scheduler", [allocate, capacity[1]])
    run_batch(str(tmp_path / "d1"), output, load_settings(), build_views=False)
    write_events(tmp_path / "d2" / "scheduler" / "part-0.avro", "scheduler", [capacity[2]])
    run_batch(str(tmp_path / "d2"), output, load_settings(), build_views=False)
    figures = _figures(output)
    assert figures["rejected"] == {"j3-submit": QUEUE_REASON}
    assert figures["jobs"]["j2"][1] == 8 * (2 * DAY_US - 600_000_000) / 1e6  # queued until its ALLOCATE
    assert figures["jobs"]["j3"][:2] == (0, 0)


def _cost(output) -> dict:
    """What a run materialised: rows of each figure table, and the bytes of the state it keeps."""
    with connect(output) as connection:
        rows = {
            table: connection.execute(f"select count(*) from {table}").fetchone()[0]
            for table in ("job_window", "capacity_level", "jobs")
        }
    state = sum(path.stat().st_size for path in (output / "state").rglob("*") if path.is_file())
    return {**rows, "state_bytes": state}


@pytest.mark.parametrize("case", ["capacity", "submit"])
def test_a_2001_dated_event_costs_what_a_clean_run_costs(tmp_path, case):
    """A CAPACITY level of 2001 (accepted: the history starts in 2000) or a SUBMIT of 2001 (rejected)
    in the middle of the history: the run materialises what the clean run does, give or take the
    one stretch of the level, whatever the years between. The level's capacity is still exact when
    queried: 16 chips × every second from 2001 to the as-of time, and 16 × 86,400 chip-s on a day of
    2010 that no other event touches."""
    _fleet(tmp_path / "clean")
    run_batch(str(tmp_path / "clean"), str(tmp_path / "clean-out"), load_settings(), build_views=False)
    extra = (
        _scheduler("reset-capacity", None, "CAPACITY", Y2001_US, 16, "c9")
        if case == "capacity"
        else _scheduler("reset-submit", "j2", "SUBMIT", Y2001_US, 8)
    )
    _fleet(tmp_path / "in", extra, _scheduler("j2-allocate", "j2", "ALLOCATE", T0 + 200_000_000, 8))
    run_batch(str(tmp_path / "in"), str(tmp_path / "out"), load_settings(), build_views=False)
    clean, cost = _cost(tmp_path / "clean-out"), _cost(tmp_path / "out")
    assert cost["job_window"] == clean["job_window"] and cost["jobs"] == clean["jobs"]
    assert cost["capacity_level"] == clean["capacity_level"] + (case == "capacity")
    assert cost["state_bytes"] < 1.5 * clean["state_bytes"]
    if case == "capacity":
        with connect(tmp_path / "out") as connection:
            total, day_2010 = connection.execute("""
                select sum(capacity_chip_s), sum(capacity_chip_s) filter (where date = '2010-06-01')
                from capacity_window where cluster = 'c9'""").fetchone()
        assert total == 16 * (T0 + 580_000_000 - Y2001_US) / 1e6 and day_2010 == 16 * 86_400
