"""Philly in its own published format (issue 22): `cluster_job_log` as msr-fiddle/philly-traces
documents it, with Killed and Failed jobs, a job running at the snapshot and jobs the trace
cannot place; an import that reads nothing exits non-zero with the reasons. The fixture
(tests/data/philly-cluster-job-log, see tests/data/README.md) holds the trace README's own
example entry and jobs written in its schema; expected events are read off it by hand."""

from __future__ import annotations

import json
import shutil

import pytest

from fleet_goodput.cli import main
from fleet_goodput.importers.reading import MICROS, utc_us
from importing import FIXTURES, by_job, import_to, rejected_rows, run_and_read

LOG = FIXTURES / "philly-cluster-job-log"
README_JOB = "application_1506638472019_14199"  # the example entry of the trace's README
KILLED, FAILED, RUNNING = (
    "application_1506638472019_14201",
    "application_1506638472019_14230",
    "application_1506638472019_99001",
)


def events(imported, job: str) -> list[tuple]:
    return [(r["type"], r["event_time"], r["chips"]) for r in by_job(imported, "scheduler", job)]


def test_philly_cluster_job_log_maps_every_status_and_running_jobs(tmp_path):
    imported, summary = import_to("philly", LOG, tmp_path / "in")
    assert summary["jobs"] == 4
    assert events(imported, README_JOB) == [
        ("SUBMIT", utc_us("2017-10-07 01:11:39"), 8),
        ("ALLOCATE", utc_us("2017-10-07 01:12:09"), 8),
        ("PREEMPT", utc_us("2017-10-07 01:13:23"), 0),
        ("ALLOCATE", utc_us("2017-10-07 01:13:30"), 8),
        ("FINISH", utc_us("2017-10-09 06:53:12"), 0),
    ]
    assert events(imported, KILLED) == [  # two machines with two GPUs each
        ("SUBMIT", utc_us("2017-10-07 01:50:10"), 4),
        ("ALLOCATE", utc_us("2017-10-07 02:00:10"), 4),
        ("CANCEL", utc_us("2017-10-07 03:30:10"), 0),
    ]
    assert events(imported, FAILED)[-1] == ("FAIL", utc_us("2017-10-07 04:25:00"), 0)
    assert events(imported, RUNNING) == [  # end_time null: still running at the snapshot
        ("SUBMIT", utc_us("2017-10-09 06:00:00"), 4),
        ("ALLOCATE", utc_us("2017-10-09 06:30:00"), 4),
    ]
    teams = {r["job_id"]: r["team"] for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"}
    assert teams[README_JOB] == "ee9e8c" and teams[FAILED] == "0e4a51"
    assert sorted((row["item"], row["reason"]) for row in rejected_rows(tmp_path / "in")) == [
        (
            "application_1506638472019_99002",
            "no attempts: the job never started, and the trace gives no time it left the queue",
        ),
        (
            "application_1506638472019_99003",
            "an attempt without a start time (a logging error, as the trace's README says)",
        ),
    ]
    assert json.loads((tmp_path / "in" / "SOURCE.json").read_text())["running_at_snapshot"] == 1

    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert manifest["reconciles"]
    assert {job: jobs[job]["status"] for job in (README_JOB, KILLED, FAILED, RUNNING)} == {
        README_JOB: "FINISHED",
        KILLED: "CANCELLED",
        FAILED: "FAILED",
        RUNNING: "RUNNING",
    }
    # The running job, as of the trace's last scheduler event (the README job's FINISH):
    # queued 06:00-06:30, then holding 4 GPUs until 06:53:12.
    as_of = utc_us("2017-10-09 06:53:12")
    running = jobs[RUNNING]
    assert running["queued_chip_s"] == pytest.approx(4 * 1800)
    assert running["lifetime_chip_s"] == pytest.approx(4 * (as_of - utc_us("2017-10-09 06:00:00")) / MICROS)
    failed = jobs[FAILED]  # 1 GPU: queued 1 min, 10 min held, queued 10 min, 5 min held
    assert (failed["queued_chip_s"], failed["lifetime_chip_s"]) == pytest.approx((11 * 60, 26 * 60))


def test_philly_import_that_reads_nothing_exits_non_zero_saying_why(tmp_path, capsys):
    source = tmp_path / "philly"
    source.mkdir()
    shutil.copy(LOG / "cluster_machine_list", source)
    unplaceable = [
        job for job in json.loads((LOG / "cluster_job_log").read_text()) if job["jobid"].endswith(("99002", "99003"))
    ]
    (source / "cluster_job_log").write_text(json.dumps(unplaceable))
    assert main(["import", "philly", str(source), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "nothing usable" in err and "no attempts: the job never started" in err
    assert "an attempt without a start time" in err
    # No telemetry: the rejected rows alone, each with its reason.
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["import_rejected.jsonl"]
