"""Issue 26: an operator's mistake is refused where it can be seen, and undone where it cannot.

A run with an --as_of far past the data is refused with the figures that make
it suspicious, unless confirmed; a run that was committed anyway (confirmed,
or over the wrong input folder) is undone by `mpg rollback`, and the right run
after it leaves the store row for row as if the mistake had never been made.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fleet_goodput import exits
from fleet_goodput.api import run as api_run
from fleet_goodput.api import simulate
from fleet_goodput.cli import main
from fleet_goodput.core.options import OptionsError
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.transaction import Transaction
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import split_by_time

pytestmark = pytest.mark.slow  # a dozen pipeline runs

CUT_US = 1_767_225_600_000_000 + 2 * 3600 * 1_000_000  # 2026-01-01T02:00Z, inside the simulated 4 h
# Ten days past January 1st's data, a slipped digit (2026-01-01 typed 2026-01-11): refused as the issue's
# typo eleven months past is (anything past the allowed lateness is), while the run that confirms it and the
# rollbacks cost a tenth of what they cost eleven months past (this test: 10.6 CPU s against 61.5).
TYPO = "2026-01-11T00:00:00Z"
TABLES = ("job_window", "jobs", "capacity_window", "rejected", "late")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, Path]:
    """A 4 h fleet cut at 02:00 into two days' worth of arrivals, another fleet (the wrong folder),
    and the store that saw only the right runs."""
    root = tmp_path_factory.mktemp("mistakes")
    simulate(root / "fleet", seed=3, hours=4, jobs=12)
    first, second = split_by_time(root / "fleet", [CUT_US], root / "parts")
    simulate(root / "other", seed=9, hours=4, jobs=6)
    for part in (first, second):
        assert main(["-q", "run", "--input", str(part), "--output", str(root / "right")]) == 0
    return {"first": first, "second": second, "other": root / "other", "right": root / "right", "root": root}


def _rows(output: Path, run: int | None = None) -> dict[str, list[tuple]]:
    """Every row of every table, `version` included, as `mpg sql` reads them."""
    with connect(output, run=run) as connection:
        return {name: connection.execute(f"select * from {name} order by all").fetchall() for name in TABLES}


def _streams(output: Path) -> dict:
    return json.loads(Path(output, "manifest.json").read_text())["streams"]


def _newest_scheduler_event(*folders: Path) -> datetime:
    """The newest scheduler event of the folders' Avro files, read without the project's code."""
    import fastavro

    return max(
        record["event_time"]
        for folder in folders
        for path in Path(folder, "scheduler").glob("*.avro")
        for record in fastavro.reader(path.open("rb"))
    )


@pytest.mark.parametrize("mistake", ["as_of", "folder"])
def test_a_mistaken_run_rolled_back_then_the_right_run_equals_a_store_that_never_saw_it(
    fleet, tmp_path, capsys, mistake
):
    output = tmp_path / "out"
    run = ["-q", "run", "--output", str(output), "--input"]
    assert main([*run, str(fleet["first"])]) == 0
    if mistake == "as_of":
        assert main([*run, str(fleet["second"]), "--as_of", TYPO]) == exits.USAGE
        refused = capsys.readouterr().err
        newest = _newest_scheduler_event(fleet["first"], fleet["second"])
        past = datetime(2026, 1, 11, tzinfo=timezone.utc) - newest
        assert (
            f"--as_of {TYPO} is {past.days} days {past.seconds // 3600} h past the newest scheduler event "
            f"({newest:%Y-%m-%dT%H:%M:%SZ}), more than the allowed lateness (1 h); "
            "the last run, 1, was as of 2026-01-01T02:00:00Z"
        ) in refused  # the first part's stated end, the cut
        assert "Nothing was committed" in refused and "--confirm_as_of" in refused
        assert len(Store(output).runs()) == 1
        assert main([*run, str(fleet["second"]), "--as_of", TYPO, "--confirm_as_of"]) == 0
    else:
        assert main([*run, str(fleet["other"])]) == 0
    mistaken = _rows(output)
    assert mistaken != _rows(fleet["right"])

    assert main(["rollback", "--output", str(output), "--to", "1"]) == 0
    said = capsys.readouterr().out
    assert "Committed run 3" in said and "rolled back to run 1" in said and "undoing run(s) 2" in said
    assert _rows(output) == _rows(output, run=1)
    if mistake == "as_of":  # a rollback of the rollback brings the mistake back; one more undoes that
        assert main(["rollback", "--output", str(output), "--to", "2"]) == 0
        assert _rows(output) == mistaken
        assert main(["rollback", "--output", str(output), "--to", "3"]) == 0
        assert _rows(output) == _rows(output, run=1)
    capsys.readouterr()

    assert main([*run, str(fleet["second"])]) == 0  # the files the mistaken run applied are read again
    assert _rows(output) == _rows(fleet["right"])
    assert _streams(output) == _streams(fleet["right"])
    capsys.readouterr()
    assert main(["runs", "--output", str(output), "--format", "json"]) == 0
    modes = [row["mode"] for row in json.loads(capsys.readouterr().out)]
    assert modes == (
        ["batch", "batch", "rollback to 1", "rollback to 2", "rollback to 3", "batch"]
        if mistake == "as_of"
        else ["batch", "batch", "rollback to 1", "batch"]
    )


def test_a_rollback_waits_for_no_run_and_refuses_what_it_cannot_do(fleet, tmp_path, capsys):
    output = tmp_path / "out"
    shutil.copytree(fleet["right"], output)
    with Store(output).lock():  # a run holds the output
        assert main(["rollback", "--output", str(output), "--to", "1"]) == exits.BUSY
    assert "in use by another run" in capsys.readouterr().err
    assert main(["rollback", "--output", str(output), "--to", "2"]) == exits.USAGE
    assert "run 2 is the latest run" in capsys.readouterr().err
    assert main(["rollback", "--output", str(output), "--to", "7"]) == exits.USAGE
    assert "no run 7" in capsys.readouterr().err
    assert len(Store(output).runs()) == 2


def test_an_as_of_before_the_last_run_says_the_figures_and_the_way_back(worked_example_run, tmp_path, capsys):
    output = tmp_path / "out"
    shutil.copytree(worked_example_run[1], output)
    assert (
        main(["run", "--input", str(worked_example_run[0]), "--output", str(output), "--as_of", "2026-01-01T00:05:00Z"])
        == exits.USAGE
    )
    err = capsys.readouterr().err
    # The worked example's last scheduler event is its FINISH, 580 s after midnight (tests/worked_example.py).
    assert (
        "--as_of 2026-01-01T00:05:00Z is earlier than run 1's as-of 2026-01-01T00:09:40Z; the newest scheduler "
        "event is 2026-01-01T00:09:40Z, the allowed lateness 1 h"
    ) in err
    assert "mpg rollback --to ID" in err


def test_an_as_of_within_the_lateness_past_the_data_needs_no_confirmation(worked_example_run, tmp_path):
    # FINISH at 00:09:40 + 1 h of allowed lateness reaches 01:09:40.
    assert (
        main(
            [
                "-q",
                "run",
                "--input",
                str(worked_example_run[0]),
                "--output",
                str(tmp_path / "out"),
                "--as_of",
                "2026-01-01T01:09:40Z",
            ]
        )
        == 0
    )


def test_the_python_api_refuses_an_unknown_beam_flag_as_the_command_line_does(worked_example_run, tmp_path, capsys):
    source = str(worked_example_run[0])
    assert main(["run", "--input", source, "--output", str(tmp_path / "cli"), "--bogus_flag"]) == exits.USAGE
    assert "unknown option --bogus_flag" in capsys.readouterr().err
    with pytest.raises(OptionsError, match="unknown option --bogus_flag"):
        api_run(source, tmp_path / "api", beam_args=["--bogus_flag"])
    with pytest.raises(OptionsError, match="did you mean --runner"):
        api_run(source, tmp_path / "api", beam_args=["--runer=DirectRunner"])
    with pytest.raises(OptionsError, match="--as_of in beam_args is an option of `mpg run`"):
        api_run(source, tmp_path / "api", beam_args=["--as_of=2026-01-01T00:00:00Z"])
    assert not (tmp_path / "api").exists()  # refused before anything was written


def test_a_store_of_an_older_state_format_is_refused_with_the_way_forward(worked_example_run, tmp_path, capsys):
    output = tmp_path / "out"
    shutil.copytree(worked_example_run[1], output)
    store = Store(output)
    latest = store.latest()
    # As a store a fleet-goodput older than the upgradable formats wrote (format 3 is upgraded:
    # tests/store/test_store_upgrade.py).
    older = dataclasses.replace(latest, run_id=2, state_format=2, manifest={**latest.manifest, "run_id": 2})
    Transaction(store, latest, "older").commit(older)
    assert (
        main(["run", "--input", str(worked_example_run[0]), "--output", str(output), "--as_of", "2026-01-01T01:00:00Z"])
        == exits.USAGE
    )
    err = capsys.readouterr().err
    assert "in format 2, which this fleet-goodput cannot upgrade" in err and "commit 2a074fd" in err
    assert "continues and reads it" in err and "mpg run --replace --input DIR --output" in err
    assert main(["check", "--output", str(output), "--upgrade"]) == exits.USAGE  # nor does the upgrade
    assert "cannot upgrade" in capsys.readouterr().err
    assert main(["sql", "--output", str(output), "select count(*) from jobs"]) == 0  # as it says
