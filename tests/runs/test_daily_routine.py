"""The documented daily routine, end to end, over three simulated days (deploy/, README).

Each day, the files that have landed are run into the store (`mpg run`), then
the day is validated and published (`mpg report --date D --require-complete`).
The day's files straddle midnight, as rotated files do: day D's last file runs
to 03:00 the next morning. The first day also carries a clock a day ahead: a
runtime event and a scheduler event of a job nobody else has heard of; and a
stray STEP_END minutes before its as-of time, whose rejection is provisional
(it is inside the allowed lateness). The routine must pass every day, the
stray clock must not move the as-of time, the provisional rejection must not
fail the gate, and after the third day the store must equal one run over
every file. When the
data stops early (the fourth day has only three hours), the report must fail
and say why.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from fleet_goodput.cli import main
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.delta_store import Store
from fleet_goodput.telemetry.avro_io import split_by_time, write_events
from test_split_invariance import _assert_same_job_windows, _capacity, _job_windows, _jobs

pytestmark = pytest.mark.slow

HOUR_US = 3600 * 1_000_000
DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]
# Day D's files run to 03:00 on D + 1: each day's delivery straddles midnight.
CUTS = [START_US + (24 * (day + 1) + 3) * HOUR_US for day in range(len(DAYS) - 1)]
AHEAD_US = CUTS[0] + 24 * HOUR_US  # the stray clock: a day after the first delivery's end


@pytest.fixture(scope="module")
def routine(tmp_path_factory):
    root = tmp_path_factory.mktemp("routine")
    simulate(root / "fleet", seed=11, hours=3 * 24 + 3, jobs=40)
    deliveries = split_by_time(root / "fleet", CUTS, root / "days")
    # The simulator states what it observed, so each delivery's as-of time is its stated end, the cut.
    first_as_of_us = CUTS[0]
    # The stray clock's files land with the first day's (and are in the fleet the single run reads).
    for folder in (root / "fleet", deliveries[0]):
        write_events(
            folder / "runtime" / "stray-end.avro",
            "runtime",
            [
                {
                    "event_id": "stray-end",
                    "event_time": first_as_of_us - 5 * 60_000_000,
                    "job_id": "job-00000",
                    "type": "STEP_END",
                    "step": 10**9,
                    "attempt": None,
                }
            ],
        )
        write_events(
            folder / "runtime" / "clock-ahead.avro",
            "runtime",
            [
                {
                    "event_id": "ahead-step",
                    "event_time": AHEAD_US,
                    "job_id": "job-clock-ahead",
                    "type": "STEP_START",
                    "step": 1,
                    "attempt": None,
                }
            ],
        )
        write_events(
            folder / "scheduler" / "clock-ahead.avro",
            "scheduler",
            [
                {
                    "event_id": "ahead-submit",
                    "event_time": AHEAD_US,
                    "job_id": "job-clock-ahead",
                    "type": "SUBMIT",
                    "cluster": "nowhere",
                    "accelerator": "tpu-v5e",
                    "chips": 8,
                    "workload": "TRAINING",
                    "framework": None,
                    "team": None,
                    "topology": None,
                    "priority": None,
                }
            ],
        )
    store = root / "store"
    days, said = [], []
    for day, delivery in zip(DAYS, deliveries):
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            ran = main(["run", "--input", str(delivery), "--output", str(store)])
        said.append(printed.getvalue())
        reported = main(["report", "--output", str(store), "--date", day, "--require-complete"])
        days.append((ran, reported, Store(store).latest().manifest))
    whole = run_batch(str(root / "fleet"), str(root / "whole"), load_settings(), build_views=False)
    return store, root / "whole", days, whole, said


def test_every_day_of_the_routine_passes(routine):
    _, _, days, _, _ = routine
    assert [(ran, reported) for ran, reported, _ in days] == [(0, 0)] * len(DAYS)
    for (_, _, manifest), cut in zip(days, CUTS):  # past the day's midnight, within its last file
        assert format_time_us(cut - 3 * HOUR_US) < manifest["as_of"] <= format_time_us(cut)
        assert manifest["reconciles"]


def test_a_provisional_rejection_does_not_fail_the_gate(routine):
    _, _, days, _, _ = routine
    ran, reported, first = days[0]
    assert ["runtime", "rejected"] in [pair for pair, _ in first["pending_counts"]] and reported == 0


def test_a_clock_a_day_ahead_waits_instead_of_moving_the_as_of(routine):
    _, _, days, _, _ = routine
    first = days[0][2]
    assert first["as_of_us"] == CUTS[0] < AHEAD_US  # the delivery's stated end
    assert first["streams"]["scheduler"]["waiting"] >= 1 and first["streams"]["runtime"]["waiting"] >= 1
    waiting = sum(counts["waiting"] for counts in first["streams"].values())
    assert f"{waiting:,} event(s) after the as-of time wait in the store" in routine[4][0]
    assert all(counts["late"] == 0 for _, _, manifest in days for counts in manifest["streams"].values())


def test_three_daily_runs_equal_one_run_over_everything(routine):
    store, whole_output, days, whole, _ = routine
    last = days[-1][2]
    assert last["as_of_us"] == whole.manifest["as_of_us"]
    assert last["streams"] == whole.manifest["streams"]
    _assert_same_job_windows(_job_windows(store), _job_windows(whole_output), min_rows=100)
    assert _capacity(store) == _capacity(whole_output)
    assert _jobs(store) == _jobs(whole_output)


def test_a_day_whose_data_stops_early_fails_and_says_why(routine, capsys):
    store, _, days, _, _ = routine
    capsys.readouterr()
    assert main(["report", "--output", str(store), "--date", "2026-01-04", "--require-complete"]) == 1
    err = capsys.readouterr().err
    assert "NOT published" in err
    assert (
        f"the data covers the whole period (as-of at or after 2026-01-04 24:00 UTC): observed {days[-1][2]['as_of']}"
    ) in err
