"""Stores without runtime telemetry: RG, PG and MPG unknown everywhere, never 0, and held time not idle.

A Slurm accounting dump (tests/data/slurm, recorded from a real Slurm) and the
Kubernetes watch streams (tests/data/kubernetes) give scheduler events alone:
nothing says what the chips did while a job held them. Every view, the
report's tables and every job page are walked: no RG, PG or MPG reads 0 (they
are unknown: null, "n/a"), and the held time is "runtime not measured"
(`unmeasured`), never `idle` badput. Beside them, a job with a runtime stream
keeps its figures (RG 0 where it reported nothing productive).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from fleet_goodput.cli import main
from fleet_goodput.store.tables import TABLES
from fleet_goodput.store.views import connect
from importing import FIXTURES

pytestmark = pytest.mark.slow  # two imports, runs and reports

FACTORS = ("rg", "pg", "mpg", "pg_coverage")


@pytest.fixture(scope="module", params=["slurm", "kubernetes"])
def store(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp(request.param)
    sources = (
        [str(FIXTURES / "slurm")]
        if request.param == "slurm"
        else [str(path) for path in sorted((FIXTURES / "kubernetes").iterdir()) if path.suffix != ".md"]
    )
    extra = ["--cluster", "gke-1"] if request.param == "kubernetes" else []
    assert main(["-q", "import", request.param, *sources, *extra, "--out", str(root / "in")]) == 0
    assert main(["-q", "run", "--input", str(root / "in"), "--output", str(root / "out")]) == 0
    assert main(["-q", "report", "--output", str(root / "out")]) == 0
    return root / "out"


def _views(connection) -> dict[str, list[str]]:
    names = [
        row[0]
        for row in connection.execute("select view_name from duckdb_views() where not internal order by 1").fetchall()
    ]
    return {name: [row[0] for row in connection.execute(f"describe {name}").fetchall()] for name in names}


def test_no_view_shows_a_runtime_factor_of_zero_or_idle_held_time(store):
    with connect(store) as connection:
        views = _views(connection)
        factor_views = {name: [c for c in columns if c in FACTORS] for name, columns in views.items()}
        checked = 0
        for name, factors in factor_views.items():
            if not factors:
                continue
            rows = connection.execute(f"select count(*) from {name}").fetchone()[0]
            zeros = connection.execute(
                f"select count(*) from {name} where " + " or ".join(f"{f} is not null" for f in factors)
            ).fetchone()[0]
            assert zeros == 0, (name, "a runtime factor is known without any runtime telemetry")
            checked += rows
        assert checked > 0 and {"fleet_daily", "job_goodput", "goodput_by_segment", "segment_daily"} <= set(
            name for name, factors in factor_views.items() if factors
        )
        for name, columns in views.items():
            # The raw tables keep the timeline's category (no runtime span covered the time); every view reads it.
            if "idle_chip_s" in columns and name not in TABLES:
                assert connection.execute(f"select coalesce(sum(idle_chip_s), 0) from {name}").fetchone()[0] == 0, name
        held = connection.execute(
            "select sum(all_allocated_chip_s), sum(unmeasured_chip_s) from job_goodput"
        ).fetchone()
        assert held[0] > 0 and held[1] == pytest.approx(held[0])  # all of it "runtime not measured"
        categories = dict(connection.execute("select category, sum(chip_s) from badput_daily group by all").fetchall())
        assert categories["idle"] == 0 and categories["unmeasured"] == pytest.approx(held[0])


def test_the_report_and_every_job_page_say_not_measured_never_zero(store):
    reports = sorted((store / "reports").iterdir())
    assert len(reports) == 1
    folder = reports[0]
    for table in folder.glob("*.csv"):
        with open(table, encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                for factor in FACTORS:
                    assert row.get(factor) in (None, ""), (table.name, factor, row)
    pages = [folder / "index.html", *(folder / "jobs").glob("*.html")]
    assert len(pages) > 1
    for page in pages:
        text = page.read_text(encoding="utf-8")
        # A factor cell of 0 would read "0.0%" beside RG, PG or MPG.
        assert not re.search(r">(RG|PG|MPG)</[^>]+>\s*<[^>]+>0\.0%", text), page.name
    with open(folder / "demand_breakdown.csv", encoding="utf-8") as handle:
        spent = {row["category"]: float(row["chip_h"]) for row in csv.DictReader(handle)}
    assert spent["idle"] == 0 and spent["unmeasured"] > 0
    # The jobs that lost the most are ranked by what the scheduler measured (queueing, partial allocation).
    with open(folder / "top_jobs.csv", encoding="utf-8") as handle:
        causes = {row["top_cause"] for row in csv.DictReader(handle)}
    assert causes and causes <= {"queued", "partial", "lost"}


def test_every_job_page_lists_each_interruption_with_its_cause_and_reason(store):
    from fleet_goodput.report.render import job_page_name

    folder = next((store / "reports").iterdir())
    with connect(store) as connection:
        stops = connection.execute("select job_id, cause, reason from interruptions order by all").fetchall()
    assert stops  # the fixtures preempt, fail, requeue and evict
    shown = 0
    for job_id, cause, reason in stops:
        page = folder / job_page_name(job_id)
        if page.exists():
            text = page.read_text(encoding="utf-8")
            assert f'data-v="{cause}"' in text and (reason is None or reason in text), (job_id, cause, reason)
            shown += 1
    assert shown > 0


def test_the_report_has_a_queue_section_where_the_scheduler_names_queues(store):
    folder = next((store / "reports").iterdir())
    with open(folder / "queues.csv", encoding="utf-8") as handle:
        rows = {row["queue"]: row for row in csv.DictReader(handle)}
    with connect(store) as connection:
        expected = dict(connection.execute("select queue, sum(submitted) from queue_waits group by all").fetchall())
    assert {queue: int(row["submitted"]) for queue, row in rows.items() if int(row["submitted"])} == {
        queue: n for queue, n in expected.items()
    }
    page = (folder / "index.html").read_text(encoding="utf-8")
    named = any(queue != "UNKNOWN" for queue in expected)
    assert ("Queues: waits to start, and interruptions" in page) == named
