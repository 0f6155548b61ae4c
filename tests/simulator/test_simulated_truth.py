"""The pipeline against the simulator's ground truth, and the invariants of every view.

The simulator computes its truth from its own timeline (fleet_goodput/simulator/
truth.py), never by reading the events it writes; the pipeline sees only the
events. Agreement per job, window and category to 1e-9 is the check.
"""

from __future__ import annotations

from collections import Counter

import duckdb
import fastavro
import pytest

from fleet_goodput.core.config import load_settings
from fleet_goodput.core.figure_vector import CATEGORIES
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.simulator import simulate
from fleet_goodput.store.views import connect

pytestmark = pytest.mark.slow  # a pipeline run per fleet: scheduled first (tests/conftest.py)

FIGURES = [*CATEGORIES, "ideal", "held"]
RELATIVE = 1e-9
FLEETS = {  # seed: (hours, jobs), small enough to run in a couple of seconds each
    1: (6, 60),
    2: (4, 40),
    20: (6, 80),  # the simulator's own test fleet: partial allocation, restore and FAIL all occur
}
# What a check below must see at least once in a fleet, so that it can fail there.
EMPTY_PROFILED_JOB, DISRUPTION = "a profiled job with nothing productive beside unprofiled jobs", "a disruption"
OCCURS = {1: {EMPTY_PROFILED_JOB}, 2: {DISRUPTION}, 20: {EMPTY_PROFILED_JOB, DISRUPTION}}


def _occurs(request, case: str) -> bool:
    return case in OCCURS[request.node.callspec.params["fleet"]]


@pytest.fixture(scope="module", params=sorted(FLEETS))
def fleet(request, tmp_path_factory):
    hours, jobs = FLEETS[request.param]
    root = tmp_path_factory.mktemp(f"seed{request.param}")
    simulation = simulate(root / "telemetry", seed=request.param, hours=hours, jobs=jobs)
    # The checks read the Parquet tables and connect(): goodput.duckdb is not read (build_views=False).
    outcome = run_batch(str(root / "telemetry"), str(root / "results"), load_settings(), build_views=False)
    return simulation, outcome, root


def _mismatches(truth_path, output, table, keys, figures):
    checks = " or ".join(
        f"abs(coalesce(t.{f}, 0) - coalesce(p.{f}, 0)) > {RELATIVE} * greatest(abs(coalesce(t.{f}, 0)), 1e-6)"
        for f in figures
    )
    return duckdb.sql(f"""
        select {", ".join(keys)}, {", ".join(f"t.{f} as truth_{f}, p.{f} as got_{f}" for f in figures)}
        from read_parquet('{truth_path}') t
        full outer join read_parquet('{output}/tables/{table}/date=*/*.parquet', hive_partitioning = true) p using ({", ".join(keys)})
        where {checks}
        limit 5""").fetchall()


def test_chip_seconds_per_job_window_and_category_equal_the_truth(fleet):
    simulation, outcome, root = fleet
    columns = [f"{figure}_chip_s" for figure in FIGURES]
    assert (
        _mismatches(
            root / "telemetry/truth/job_window.parquet",
            root / "results",
            "job_window",
            ["job_id", "window_start"],
            columns,
        )
        == []
    )


def test_ideal_is_null_only_without_a_profile_and_0_with_one_and_nothing_productive(fleet, request):
    """docs/metric.md section 1, "Unknown and empty factors", per window (job_window_enriched, what every mart sums)
    and per job (job_goodput): null and 0 are different answers, so they are compared as such."""
    _, _, root = fleet
    truth = root / "telemetry/truth/job_window.parquet"
    expected = {
        (job, window): ideal
        for job, window, ideal in duckdb.sql(
            f"select job_id, epoch_us(window_start), ideal_chip_s from read_parquet('{truth}')"
        ).fetchall()
    }
    expected_jobs = dict(
        duckdb.sql(f"""
        select job_id, sum(ideal_chip_s) from read_parquet('{truth}') group by job_id""").fetchall()
    )
    with connect(root / "results") as connection:
        got = {
            (job, window): ideal
            for job, window, ideal in connection.execute(
                "select job_id, epoch_us(window_start), ideal_chip_s from job_window_enriched"
            ).fetchall()
        }
        got_jobs = dict(connection.execute("select job_id, ideal_chip_s from job_goodput").fetchall())
        (profiled_without_productive,) = connection.execute(
            "select count(*) from job_goodput where productive_chip_s = 0 and ideal_chip_s = 0"
        ).fetchone()

    def same(truth_value, got_value) -> bool:
        if truth_value is None or got_value is None:
            return truth_value is got_value
        return abs(truth_value - got_value) <= RELATIVE * max(abs(truth_value), 1e-6)

    assert got.keys() == expected.keys()
    assert [key for key in expected if not same(expected[key], got[key])] == []
    assert [job for job in expected_jobs if not same(expected_jobs[job], got_jobs[job])] == []
    if _occurs(request, EMPTY_PROFILED_JOB):
        assert None in expected_jobs.values() and profiled_without_productive > 0


def test_capacity_per_window_equals_the_truth(fleet):
    """The `capacity_window` view, which cuts the stored stretches of `capacity_level` at window edges."""
    _, _, root = fleet
    with connect(root / "results") as connection:
        mismatches = connection.execute(
            f"""
            select cluster, accelerator, window_start, t.capacity_chip_s, p.capacity_chip_s
            from read_parquet(?) t
            full outer join capacity_window p using (cluster, accelerator, window_start)
            where abs(coalesce(t.capacity_chip_s, 0) - coalesce(p.capacity_chip_s, 0))
                  > {RELATIVE} * greatest(abs(coalesce(t.capacity_chip_s, 0)), 1e-6)
            limit 5""",
            [str(root / "telemetry/truth/capacity_window.parquet")],
        ).fetchall()
    assert mismatches == []


def test_job_states_equal_the_truth(fleet):
    _, _, root = fleet
    assert (
        duckdb.sql(f"""
        select job_id, t.status, p.status from read_parquet('{root}/telemetry/truth/jobs.parquet') t
        full outer join read_parquet('{root}/results/tables/jobs/date=*/*.parquet') p using (job_id)
        where t.status is distinct from p.status or t.requested_chips is distinct from p.requested_chips""").fetchall()
        == []
    )


def test_disruptions_per_job_equal_the_truth(fleet, request):
    """Preemptions and failures of running attempts, as the simulator decided them; the old count
    (allocations − 1 + failed) was −1 for a job never allocated and counted partial allocations."""
    _, _, root = fleet
    assert (
        duckdb.sql(f"""
        select job_id, t.disruptions, p.disruptions from read_parquet('{root}/telemetry/truth/jobs.parquet') t
        full outer join read_parquet('{root}/results/tables/jobs/date=*/*.parquet') p using (job_id)
        where t.disruptions is distinct from p.disruptions""").fetchall()
        == []
    )
    [(disrupted,)] = duckdb.sql(f"""
        select count(*) from read_parquet('{root}/telemetry/truth/jobs.parquet') where disruptions > 0""").fetchall()
    assert (disrupted > 0) == _occurs(request, DISRUPTION)


def test_checkpoint_saves_per_job_equal_the_save_ends_in_the_avro_files(fleet):
    """The truth tables keep no save count, so the count comes from the runtime
    files themselves: every CHECKPOINT_SAVE_END the simulator wrote ends a save it made."""
    _, _, root = fleet
    written = Counter()
    for path in sorted((root / "telemetry" / "runtime").glob("*.avro")):
        with open(path, "rb") as handle:
            written.update(r["job_id"] for r in fastavro.reader(handle) if r["type"] == "CHECKPOINT_SAVE_END")
    got = dict(
        duckdb.sql(f"""
        select job_id, checkpoint_saves from read_parquet('{root}/results/tables/jobs/date=*/*.parquet')""").fetchall()
    )
    assert sum(written.values()) > 0
    assert got == {job_id: written[job_id] for job_id in got} and set(written) <= set(got)


def test_every_event_is_accepted_and_the_manifest_reconciles(fleet):
    simulation, outcome, _ = fleet
    streams = outcome.manifest["streams"]
    assert outcome.manifest["reconciles"]
    assert {name: c["accepted"] for name, c in streams.items()} == simulation.events
    assert outcome.manifest["as_of_us"] == simulation.as_of_us


# ---- invariants on every row of every view -------------------------------------
RATIO_VIEWS = ("job_goodput", "fleet_daily", "goodput_by_segment")


@pytest.mark.parametrize("view", RATIO_VIEWS)
def test_sg_rg_pg_multiply_to_mpg_and_stay_in_0_1(fleet, view):
    _, _, root = fleet
    with connect(root / "results") as connection:
        rows = connection.execute(f"select sg, rg, pg, mpg, pg_coverage from {view}").fetchall()
    assert rows
    for sg, rg, pg, mpg, coverage in rows:
        for value in (sg, rg, pg, mpg, coverage):
            assert value is None or 0 <= value <= 1 + 1e-12
        if None not in (sg, rg, pg):
            assert mpg == pytest.approx(sg * rg * pg, rel=1e-12, abs=1e-15)


def test_conservation_in_every_job_window_row(fleet):
    _, _, root = fleet
    runtime = " + ".join(f"{c}_chip_s" for c in CATEGORIES[2:])
    with connect(root / "results") as connection:
        broken = connection.execute(f"""
            select job_id, window_start from job_window
            where abs(lifetime_chip_s - (queued_chip_s + partial_chip_s + all_allocated_chip_s)) > 1e-6
               or abs(all_allocated_chip_s - ({runtime})) > 1e-6""").fetchall()
        lifetimes = connection.execute("""
            select j.job_id, j.requested_chips * epoch(coalesce(j.end_time, m.as_of) - j.submit_time), g.lifetime_chip_s
            from jobs j join job_goodput g using (job_id), (select max(window_start) + interval 1 hour as as_of from job_window) m
            where j.end_time is not null""").fetchall()
    assert broken == []
    for job_id, expected, got in lifetimes:
        assert got == pytest.approx(expected, rel=1e-12), job_id


def test_badput_shares_of_demand_sum_to_one(fleet):
    _, _, root = fleet
    with connect(root / "results") as connection:
        (total,) = connection.execute("select sum(share) from badput_breakdown where base = 'demand'").fetchone()
    assert total == pytest.approx(1.0, rel=1e-12)
