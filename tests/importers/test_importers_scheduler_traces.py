"""`philly` and `openb` importers on the real public samples: counts, jobs checked by hand, a pipeline run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fleet_goodput.core.timeutil import parse_time_us
from fleet_goodput.importers.reading import MICROS, utc_us
from importing import PUBLIC_DATA, SETTINGS, by_job, import_to, rejected_rows, run_and_read

PHILLY, OPENB = PUBLIC_DATA / "philly", PUBLIC_DATA / "openb"
PHILLY_JOB = "application_1506638472019_14164"  # 4 GPUs, three attempts (second record of jobs.json)
TRACE_START = parse_time_us("2023-01-01T00:00:00Z")


# ---- philly ---------------------------------------------------------------
def test_philly_whole_sample_counts(tmp_path):
    imported, summary = import_to("philly", PHILLY, tmp_path / "out")
    jobs = json.loads((PHILLY / "jobs.json").read_text())
    attempts = sum(len(job["attempts"]) for job in jobs)
    assert summary["jobs"] == len(jobs) == 3034
    # SUBMIT + FINISH per job, an ALLOCATE per attempt, a PREEMPT per attempt after the first; one CAPACITY.
    assert summary["events"] == {
        "scheduler": 2 * len(jobs) + attempts + (attempts - len(jobs)) + 1,
        "runtime": 0,
        "profiler": 0,
    }
    assert summary["rejected"] == {}
    capacity = [r for r in imported.streams["scheduler"] if r["type"] == "CAPACITY"]
    assert [(r["chips"], r["event_time"]) for r in capacity] == [(321 * 2 + 231 * 8, utc_us("2017-09-04 10:30:41"))]
    source = json.loads((tmp_path / "out" / "SOURCE.json").read_text())
    assert source["licence"] == "CC BY 4.0" and source["capacity_gpus_by_memory"] == {"12GB": 642, "24GB": 1848}


def test_philly_job_with_three_attempts_matches_the_source(tmp_path):
    imported, _ = import_to("philly", PHILLY, tmp_path / "out", limit=2)
    events = [(r["type"], r["event_time"], r["chips"]) for r in by_job(imported, "scheduler", PHILLY_JOB)]
    assert events == [
        ("SUBMIT", utc_us("2017-10-06 23:27:26"), 4),
        ("ALLOCATE", utc_us("2017-10-06 23:27:35"), 4),
        ("PREEMPT", utc_us("2017-10-07 04:02:10"), 0),
        ("ALLOCATE", utc_us("2017-10-07 04:02:24"), 4),
        ("PREEMPT", utc_us("2017-10-09 02:19:15"), 0),
        ("ALLOCATE", utc_us("2017-10-09 02:49:20"), 4),
        ("FINISH", utc_us("2017-10-09 06:45:55"), 0),
    ]


def test_philly_subset_through_the_pipeline_reconciles(tmp_path):
    import_to("philly", PHILLY, tmp_path / "in", limit=40)
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert manifest["reconciles"] and manifest["streams"]["scheduler"]["rejected"] == 0
    assert len(jobs) == 40
    job = jobs[PHILLY_JOB]
    queued_s = 9 + 14 + (30 * 60 + 5)  # before the first attempt, and the two gaps between attempts
    lifetime_s = (utc_us("2017-10-09 06:45:55") - utc_us("2017-10-06 23:27:26")) / MICROS
    assert job["queued_chip_s"] == pytest.approx(4 * queued_s)
    assert job["lifetime_chip_s"] == pytest.approx(4 * lifetime_s)
    # No runtime stream: all-allocated time is "runtime not measured", not idle; RG, PG and MPG unknown.
    assert job["unmeasured_chip_s"] == pytest.approx(4 * (lifetime_s - queued_s)) and job["idle_chip_s"] == 0
    assert (job["rg"], job["pg"], job["mpg"]) == (None, None, None) and job["status"] == "FINISHED"


# ---- openb ----------------------------------------------------------------
def test_openb_whole_sample_counts_and_rejects_cpu_only_pods(tmp_path):
    imported, summary = import_to("openb", OPENB, tmp_path / "out")
    assert summary["jobs"] == 8152 - 1088
    assert summary["rejected"] == {"CPU-only pod (num_gpu = 0): no accelerator demand": 1088}
    rows = rejected_rows(tmp_path / "out")
    assert len(rows) == 1088 and all(row["where"].startswith("line ") for row in rows)
    types = [r["type"] for r in imported.streams["scheduler"]]
    # 897 pods never scheduled, 34 running at the trace's last instant (no end event).
    assert types.count("ALLOCATE") == 8152 - 1088 - (897 - 36)
    assert types.count("CAPACITY") == 2
    capacity = {r["chips"] for r in imported.streams["scheduler"] if r["type"] == "CAPACITY"}
    assert capacity == {
        sum(json.loads((tmp_path / "out" / "SOURCE.json").read_text())["capacity_gpus_by_model"].values())
    }


def test_openb_pods_match_the_source(tmp_path):
    imported, _ = import_to("openb", OPENB, tmp_path / "out", limit=10)
    # openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0 → deleted while running, before the last instant.
    assert [
        (r["type"], r["event_time"], r["chips"], r["priority"]) for r in by_job(imported, "scheduler", "openb-pod-0000")
    ] == [
        ("SUBMIT", TRACE_START, 1, 2),
        ("ALLOCATE", TRACE_START, 1, None),
        ("CANCEL", TRACE_START + 12537496 * MICROS, 0, None),
    ]
    # openb-pod-0001 holds 460 milli-GPU: counted as one whole GPU.
    assert {r["chips"] for r in by_job(imported, "scheduler", "openb-pod-0001") if r["type"] != "CANCEL"} == {1}


def test_openb_subset_through_the_pipeline_reconciles(tmp_path):
    """300 pods over 150 days, in daily windows, as a planner would run a months-long trace (hourly
    windows give the same job figures in 24 times the rows)."""
    import_to("openb", OPENB, tmp_path / "in", limit=300)
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out", dataclasses.replace(SETTINGS, window_s=86_400))
    assert manifest["reconciles"] and manifest["streams"]["scheduler"]["rejected"] == 0
    pod = jobs["openb-pod-0000"]
    assert pod["status"] == "CANCELLED" and pod["queued_chip_s"] == 0
    assert pod["unmeasured_chip_s"] == pytest.approx(12537496) and pod["idle_chip_s"] == 0
