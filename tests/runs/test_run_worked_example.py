"""`mpg run` end to end on the worked example of docs/metric.md section 4, as Avro files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import worked_example
from fleet_goodput.cli import main
from fleet_goodput.store.views import connect


@pytest.fixture(scope="module")
def worked_example_input(worked_example_run) -> Path:
    return worked_example_run[0]


@pytest.fixture(scope="module")
def worked_example_output(worked_example_run, tmp_path_factory) -> Path:
    """`mpg run` over the worked example (tests/conftest.py), copied: the tests here run and query it."""
    return Path(shutil.copytree(worked_example_run[1], tmp_path_factory.mktemp("out") / "out"))


def test_job_goodput_has_exactly_the_worked_example_numbers(worked_example_output):
    with connect(worked_example_output) as connection:
        cursor = connection.execute("select * from job_goodput")
        row = dict(zip([d[0] for d in cursor.description], cursor.fetchone()))
    chips = worked_example.CHIPS
    for name, seconds in worked_example.EXPECTED_SECONDS.items():
        assert row[f"{name}_chip_s"] == pytest.approx(seconds * chips, rel=1e-12), name
    for name, value in worked_example.EXPECTED_RATIOS.items():
        assert row[name] == pytest.approx(value, rel=1e-12), name
    assert (row["job_id"], row["status"], row["accelerator"], row["workload"]) == (
        "j1",
        "FINISHED",
        "tpu-v5e",
        "TRAINING",
    )
    assert row["pg_coverage"] == 1.0


def test_manifest_reconciles_and_records_the_as_of_time(worked_example_output):
    manifest = json.loads((worked_example_output / "manifest.json").read_text())
    assert manifest["reconciles"] is True
    assert manifest["as_of"] == "2026-01-01T00:09:40Z"  # the latest event time, t0 + 580 s
    assert manifest["streams"]["runtime"] == {
        "read": 14,
        "accepted": 14,
        "duplicate": 0,
        "rejected": 0,
        "late": 0,
        "waiting": 0,
        "reconciles": True,
    }


def test_rerun_replaces_its_partitions_byte_for_byte(worked_example_input, worked_example_output, tmp_path):
    before = {
        p.relative_to(worked_example_output): p.read_bytes()
        for p in (worked_example_output / "tables").rglob("*.parquet")
    }
    assert main(["run", "--input", str(worked_example_input), "--output", str(worked_example_output)]) == 0
    after = {
        p.relative_to(worked_example_output): p.read_bytes()
        for p in (worked_example_output / "tables").rglob("*.parquet")
    }
    assert before == after and len(after) >= 3


def test_sql_command_prints_csv(worked_example_output, capsys):
    assert (
        main(
            [
                "sql",
                "--output",
                str(worked_example_output),
                "--format",
                "csv",
                "select job_id, round(mpg, 4) as mpg from job_goodput",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines() == ["job_id,mpg", "j1,0.1724"]


def test_sql_command_names_a_bad_query(worked_example_output, capsys):
    assert main(["sql", "--output", str(worked_example_output), "select nope from job_goodput"]) == 2
    assert "nope" in capsys.readouterr().err


def test_run_explains_a_missing_input_folder(tmp_path, capsys):
    assert main(["run", "--input", str(tmp_path / "absent"), "--output", str(tmp_path / "out")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_run_explains_an_empty_input_folder(tmp_path, capsys):
    assert main(["run", "--input", str(tmp_path), "--output", str(tmp_path / "out")]) == 2
    assert "no telemetry" in capsys.readouterr().err


def test_run_rejects_a_malformed_as_of(worked_example_input, tmp_path, capsys):
    """Refused where the command line is read, as argparse refuses any argument: exit 2, nothing written."""
    with pytest.raises(SystemExit) as refused:
        main(["run", "--input", str(worked_example_input), "--output", str(tmp_path), "--as_of", "yesterday"])
    assert refused.value.code == 2
    assert "argument --as_of: not an ISO-8601 time: 'yesterday'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
