"""`mpg import job`: a one-off job's scheduling stated by hand (fleet_goodput/importers/job.py), through
`mpg run`, to figures computed by hand; a statement that contradicts itself is refused with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet_goodput.cli import main
from fleet_goodput.store.views import connect

STATEMENT = Path(__file__).parents[1] / "data" / "job" / "llama-7b.yaml"


@pytest.mark.slow  # one mpg run, a few seconds
def test_a_stated_job_through_mpg_run(tmp_path, capsys):
    """8 h100 chips; submitted 09:55; attempt 1 10:00-11:00, preempted (spot VM reclaimed); attempt 2
    11:05-13:00, finished. By hand: lifetime 185 min x 8 = 1,480 chip-min; queued 5 + 5 min x 8 = 80
    chip-min; all-allocated 175 min x 8 = 1,400 chip-min; SG 175 / 185 = 94.6%. No runtime stream: RG
    unknown, the held time unmeasured. No capacity: the headline gives the job's own factors."""
    assert main(["import", "job", str(STATEMENT), "--out", str(tmp_path / "in")]) == 0
    assert main(["run", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    with connect(tmp_path / "out") as connection:
        cursor = connection.execute("select * from job_goodput")
        job = dict(zip([d[0] for d in cursor.description], cursor.fetchone()))
        (interruptions,) = connection.execute("select count(*) from interruptions where cause = 'SPOT'").fetchone()
    assert (job["job_id"], job["status"], job["team"], job["cluster"]) == ("llama-7b-0412", "FINISHED", "nlp", "my-box")
    assert job["lifetime_chip_s"] == 1480 * 60 and job["queued_chip_s"] == 80 * 60
    assert job["all_allocated_chip_s"] == 1400 * 60 and job["unmeasured_chip_s"] == 1400 * 60
    assert job["sg"] == pytest.approx(175 / 185) and job["rg"] is None and interruptions == 1
    assert "SG  94.6%; RG, PG and MPG cannot be measured" in printed and "demand 24.7 chip-h" in printed


@pytest.mark.parametrize(
    "statement, reason",
    [
        (
            "job: j\naccelerator: h900\nchips: 8\nattempts: [{start: 2026-01-01T10:00:00Z}]",
            "accelerator: 'h900' is not in the accelerator catalogue",
        ),
        (
            "job: j\naccelerator: h100\nchips: 0\nattempts: [{start: 2026-01-01T10:00:00Z}]",
            "chips: chips must be a positive whole number, not 0",
        ),
        ("job: j\naccelerator: h100\nchips: 8\nattempts: []", "attempts: a list of at least one attempt"),
        (
            "job: j\naccelerator: h100\nchips: 8\nattempts:\n- {start: 2026-01-01T10:00:00Z, end: 2026-01-01T09:00:00Z}",
            "attempt 1: ends before it starts",
        ),
        (
            "job: j\naccelerator: h100\nchips: 8\nattempts:\n- {start: 2026-01-01T10:00:00Z, end: 2026-01-01T11:00:00Z}\n"
            "- {start: 2026-01-01T10:30:00Z}",
            "attempt 2: starts before the end of attempt 1",
        ),
        (
            "job: j\naccelerator: h100\nchips: 8\nattempts:\n- {start: 2026-01-01T10:00:00Z, end: 2026-01-01T11:00:00Z, "
            "ended: FAIL}\n- {start: 2026-01-01T12:00:00Z}",
            "attempt 1: ends the job (FAIL) but attempts follow it",
        ),
        (
            "job: j\naccelerator: h100\nchips: 8\nsubmit: 2026-01-01T11:00:00Z\nattempts: [{start: 2026-01-01T10:00:00Z}]",
            "attempt 1: starts before the submit",
        ),
        ("job: j\nchip: 8", "unknown field(s) chip"),
    ],
)
def test_a_statement_that_contradicts_itself_is_refused_with_its_reason(tmp_path, capsys, statement, reason):
    source = tmp_path / "job.yaml"
    source.write_text(statement)
    assert main(["import", "job", str(source), "--out", str(tmp_path / "out")]) == 1
    assert reason in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_statement_imports_to_its_events(tmp_path):
    assert main(["import", "job", str(STATEMENT), "--out", str(tmp_path / "in")]) == 0
    import fastavro

    with open(next((tmp_path / "in" / "scheduler").glob("*.avro")), "rb") as handle:
        events = [(r["type"], r["chips"], r["reason"]) for r in fastavro.reader(handle)]
    assert events == [
        ("SUBMIT", 8, None),
        ("ALLOCATE", 8, None),
        ("PREEMPT", 0, "spot VM reclaimed"),
        ("ALLOCATE", 8, None),
        ("FINISH", 0, None),
    ]
    assert json.loads((tmp_path / "in" / "SOURCE.json").read_text())["importer"] == "job"
