"""`mpg report`: published only on clean data, self-contained, drawn by a real browser, idempotent.

Outputs are the real pipeline's (see tests/quality_outputs.py, shared so the
pipeline runs once per test worker); corruptions are made on pristine copies.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import subprocess
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleet_goodput.cli import main
from fleet_goodput.quality.batches import open_views
from fleet_goodput.quality.checked_run import open_checked_run
from fleet_goodput.quality.period import Period
from fleet_goodput.report.advice import ClassMeasures, advise, best_interval, model_rg
from fleet_goodput.report.figures import checkpoint_advice
from fleet_goodput.report.specification import SPECIFICATION_PAGE, section_id
from quality_outputs import build_outputs, commit_change, pristine_copy, rewrite_partition, set_capacity_over_day

pytestmark = pytest.mark.slow  # end to end, tens of seconds: scheduled first (tests/conftest.py)

PERIOD = "2026-01-01_2026-01-03"


@pytest.fixture(scope="session")
def outputs(tmp_path_factory, worked_example_run) -> dict[str, Path]:
    return build_outputs(tmp_path_factory, worked_example_run)


@pytest.fixture(scope="module")
def published(outputs) -> Path:
    assert (
        main(
            [
                "report",
                "--output",
                str(outputs["fleet"]),
                "--from",
                "2026-01-01",
                "--to",
                "2026-01-03",
                "--require-complete",
            ]
        )
        == 0
    )
    return outputs["fleet"] / "reports" / PERIOD / "index.html"


@pytest.fixture(scope="module")
def one_day(outputs) -> Path:
    """The report of 2026-01-02 alone, published once for the tests that read it."""
    assert main(["report", "--output", str(outputs["fleet"]), "--date", "2026-01-02"]) == 0
    return outputs["fleet"] / "reports" / "2026-01-02" / "index.html"


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_report_names_the_run_it_was_made_from(published, outputs):
    from fleet_goodput.store.delta_store import Store

    run_id = Store(outputs["fleet"]).latest().run_id
    assert f"run {run_id}\n(reproduce with <code>mpg sql --output" in published.read_text()


def test_report_is_one_self_contained_page_with_every_section(published):
    page = published.read_text()
    assert not re.search(r"""(src|href)=["']https?:""", page), "the page must not fetch anything"
    assert "<script src" not in page and "<link" not in page
    for heading in (
        "Fleet ML Productivity Goodput",
        "Trend per day",
        "By cluster",
        "By accelerator",
        "By workload",
        "By size class",
        "By team",
        "Badput breakdown",
        "Where the jobs' chip-hours went (demand base)",
        "Capacity no job held (capacity base)",
        "Jobs that lost the most chip-hours",
        "Checkpoint-interval advice",
        "PG coverage",
        "Data quality",
        "Figures as CSV",
    ):
        assert f">{heading}<" in page, heading
    # The simulated fleet's scheduler names no queue: no section of one UNKNOWN row (tests/importers/test_importers_kubernetes.py
    # has a fleet that does).
    assert ">By queue<" not in page and ">By cluster queue<" not in page
    assert page.count('<svg class="chart"') >= 12
    assert 'width="640"' not in page and page.count('viewBox="0 0 ') == page.count('<svg class="chart"')
    assert page.count('<table class="sortable"') >= 10


def _factor_rows(folder: Path):
    for path in sorted(folder.glob("*.csv")):
        for row in _read_csv(path):
            if all(row.get(f) for f in ("sg", "rg", "pg", "mpg")):
                yield path.name, row


def test_csv_figures_agree_with_the_page_and_the_metric(published):
    folder = published.parent
    (total,) = _read_csv(folder / "fleet_total.csv")
    sg, rg, pg, mpg = (float(total[k]) for k in ("sg", "rg", "pg", "mpg"))
    assert sg * rg * pg == pytest.approx(mpg, rel=1e-12)
    assert f"{mpg:.1%}" in published.read_text()
    checked = 0
    for name, row in _factor_rows(folder):
        assert float(row["sg"]) * float(row["rg"]) * float(row["pg"]) == pytest.approx(float(row["mpg"]), rel=1e-12), (
            name
        )
        checked += 1
    assert checked > 30
    days = _read_csv(folder / "fleet_by_day.csv")
    assert [d["day"] for d in days] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert sum(float(d["capacity_chip_h"]) for d in days) == pytest.approx(float(total["capacity_chip_h"]))
    assert len(_read_csv(folder / "fleet_by_window.csv")) == 72
    teams = {row["team"] for row in _read_csv(folder / "by_team.csv")}
    assert teams == {"research", "vision", "serving", "inference", "UNKNOWN"}
    demand = {row["category"]: float(row["chip_h"]) for row in _read_csv(folder / "demand_breakdown.csv")}
    assert demand["lost"] > 0 and demand["checkpoint_save"] > 0 and "idle_capacity" not in demand
    clusters = {row["cluster"]: row for row in _read_csv(folder / "capacity_breakdown.csv")}
    assert set(clusters) == {"c1", "c2"}
    assert float(clusters["c1"]["capacity_chip_h"]) == pytest.approx(48 * 72)  # 48 chips online for 3 days
    top = _read_csv(folder / "top_jobs.csv")
    assert top[0]["job_id"].startswith("train-") and top[0]["top_cause"] == "queued"


def _job_windows(output: Path) -> list[dict]:
    """job_window rows with the job's team, straight from the Parquet files (not through the views)."""
    windows = pq.read_table(output / "tables" / "job_window").to_pylist()
    teams = {row["job_id"]: row["team"] or "UNKNOWN" for row in pq.read_table(output / "tables" / "jobs").to_pylist()}
    return [{**row, "team": teams[row["job_id"]]} for row in windows]


def test_segment_factors_are_ratios_of_sums_of_the_windows(published, outputs):
    """Independent truth: SG, RG, PG, MPG per team summed in Python from the Parquet rows."""
    windows = _job_windows(outputs["fleet"])
    for row in _read_csv(published.parent / "by_team.csv"):
        mine = [w for w in windows if w["team"] == row["team"]]
        total = {
            k: sum(w[f"{k}_chip_s"] or 0 for w in mine)  # null ideal: a window without a profile
            for k in ("lifetime", "all_allocated", "productive", "ideal", "profiled_productive")
        }
        assert float(row["sg"]) == pytest.approx(total["all_allocated"] / total["lifetime"], rel=1e-12)
        assert float(row["rg"]) == pytest.approx(total["productive"] / total["all_allocated"], rel=1e-12)
        if total["profiled_productive"]:
            pg = total["ideal"] / total["profiled_productive"]
            assert float(row["pg"]) == pytest.approx(pg, rel=1e-12)
            assert float(row["mpg"]) == pytest.approx(
                total["all_allocated"] / total["lifetime"] * total["productive"] / total["all_allocated"] * pg,
                rel=1e-12,
            )
        assert int(row["jobs"]) == len({w["job_id"] for w in mine})


def test_factors_are_written_out_once():
    """SG, RG, PG, MPG are defined by the goodput_factors macro only; marts, headline and report call it."""
    root = Path(__file__).parents[2]
    sources = [*root.glob("sql/**/*.sql"), *root.glob("fleet_goodput/**/*.py")]
    definitions = [
        path.relative_to(root).as_posix()
        for path in sources
        if re.search(r"ratio\((sum\()?\s*(totals\.)?productive_chip_s", path.read_text())
    ]
    assert definitions == []
    macros = (root / "sql" / "derived" / "macros.sql").read_text()
    assert "create or replace macro goodput_factors" in macros
    for mart in ("fleet_daily", "fleet_by_window", "segment_daily", "goodput_by_segment", "job_goodput"):
        assert "goodput_factors(" in (root / "sql" / "marts" / f"{mart}.sql").read_text(), mart


def test_one_day_report_has_an_hourly_trend_and_the_change_from_the_day_before(published, one_day, outputs):
    folder = one_day.parent
    page = one_day.read_text()
    assert ">Trend per hour<" in page and "vs 2026-01-01" in page
    trend = re.search(r'<svg class="chart" data-chart="fleet_trend".*?</svg>', page, re.S).group(0)
    assert trend.count("<title>SG ") == 24, "SG every hour (RG and PG only in hours with allocated jobs)"
    assert trend.count("<polyline") == 4
    (total,) = _read_csv(folder / "fleet_total.csv")
    by_day = {d["day"]: d for d in _read_csv(published.parent / "fleet_by_day.csv")}
    for factor in ("sg", "rg", "pg", "mpg"):
        assert float(total[f"{factor}_change"]) == pytest.approx(
            float(by_day["2026-01-02"][factor]) - float(by_day["2026-01-01"][factor]), rel=1e-9
        )
        assert float(total[factor]) == pytest.approx(float(by_day["2026-01-02"][factor]), rel=1e-12)
    (first,) = _read_csv(outputs["fleet"] / "reports" / PERIOD / "fleet_total.csv")
    assert first["mpg_change"] == "", "the period before the first day has no data: no change"


def test_each_worst_job_has_a_page_with_its_timeline(published):
    page = published.read_text()
    top = _read_csv(published.parent / "top_jobs.csv")
    links = re.findall(r'<a href="(jobs/[^"]+\.html)">', page)
    assert len(links) == len(top) == 10
    for link, job in zip(links, top):
        job_page = (published.parent / link).read_text()
        assert f"<h1>Job {job['job_id']}</h1>" in job_page
        strip = re.search(r'data-chart="job_timeline".*?</svg>', job_page, re.S).group(0)
        hours = [float(h) for h in re.findall(r": ([\d,.]+) chip-h \(", strip)]
        assert hours and sum(hours) == pytest.approx(
            float(job["lifetime_chip_h"]), abs=0.005 * len(hours)
        )  # 2 decimals
        assert 'href="../index.html"' in job_page


def test_checkpoint_advice_uses_the_save_counts_the_pipeline_measured(outputs):
    """`jobs.checkpoint_saves` as the pipeline wrote it: C and s are measured, not estimated."""
    saves = {"train": 6, "small": 4, "gpu-train": 6, "batch": 0, "serve": 0}  # the fleet's checkpoint cycles
    with open_views(open_checked_run(outputs["fleet"])) as connection:
        written = dict(connection.execute("select job_id, checkpoint_saves from jobs").fetchall())
        rows = checkpoint_advice(connection, Period(date(2026, 1, 1), date(2026, 1, 3)))
    assert written == {job_id: saves[job_id.rsplit("-", 1)[0]] for job_id in written} and len(written) == 13
    advice = {(row["accelerator"], row["size_class"]): row for row in rows}
    big, small = advice[("tpu-v5e", "9-64")], advice[("tpu-v5e", "1-8")]
    assert big["interval_source"] == small["interval_source"] == "measured saves"
    assert (big["saves"], small["saves"]) == (3 * 6, 3 * 4)
    # One preemption of a running attempt per train-<day> job and of gpu-train-1 (jobs.disruptions).
    assert (big["disruptions"], small["disruptions"], advice[("h100", "9-64")]["disruptions"]) == (3, 0, 1)
    assert big["interval_s"] == pytest.approx(1200) and big["save_cost_s"] == pytest.approx(40)
    assert small["interval_s"] == pytest.approx(1200) and small["save_cost_s"] == pytest.approx(20)
    assert big["best_interval_s"] == pytest.approx(math.sqrt(2 * 40 * big["mtbf_s"]))
    assert big["recoverable_chip_h"] > 0 and f"recovers ~{big['recoverable_chip_h']:,.1f} chip-h" in big["advice"]


def test_data_quality_summary_is_in_the_report(published):
    page = published.read_text()
    assert "PASSED" in page and "at least 95% of jobs name their team" in page
    quality = json.loads((published.parent / "quality.json").read_text())
    assert quality["passed"]
    link = re.search(r'href="([^"]+)">data-quality index', page).group(1)
    assert (published.parent / link).resolve().exists()


def test_every_link_of_the_report_resolves_in_its_folder(published):
    """The pages link each other, the CSVs, the Data Docs and the metric's specification,
    which the report carries (metric.html, from the installed package's docs/metric.md)."""
    folder = published.parent
    pages = [published, folder / SPECIFICATION_PAGE, *sorted((folder / "jobs").glob("*.html"))]
    specification_links = 0
    for page in pages:
        for link in re.findall(r'href="([^"]+)"', page.read_text()):
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            assert target.is_file(), f"{page.name}: {link}"
            if anchor:
                assert f'id="{anchor}"' in target.read_text(), f"{page.name}: {link}"
            specification_links += path.endswith(SPECIFICATION_PAGE)
    assert specification_links >= 3 + 10, "the report links the specification three times, each job page once"
    specification = (folder / SPECIFICATION_PAGE).read_text()
    for heading in re.findall(r"^## (.+)$", (Path(__file__).parents[2] / "docs" / "metric.md").read_text(), re.M):
        assert f'<h2 id="{section_id(heading)}">{heading}</h2>' in specification


def test_rerun_replaces_the_period_report(published, outputs):
    before = sorted(p.name for p in published.parent.iterdir())
    first = published.read_text()
    # What a report stopped by a full disk or Ctrl-C left: the rerun removes it.
    (published.parent.parent / f".{PERIOD}.tmp-1" / "jobs").mkdir(parents=True)
    assert main(["report", "--output", str(outputs["fleet"]), "--from", "2026-01-01", "--to", "2026-01-03"]) == 0
    assert sorted(p.name for p in published.parent.iterdir()) == before
    assert published.read_text() == first
    assert not [p.name for p in published.parent.parent.iterdir() if p.name.startswith(".")], (
        "no temporary folders left behind"
    )


def _corrupt_conservation(output: Path) -> None:
    def change(table: pa.Table) -> pa.Table:
        values = table.column("init_chip_s").to_pylist()
        values[0] += 1800.0
        return table.set_column(table.schema.get_field_index("init_chip_s"), "init_chip_s", [values])

    rewrite_partition(output, "job_window", "2026-01-02", change)


def _duplicate_key(output: Path) -> None:
    commit_change(output, "job_window", lambda table: pa.concat_tables([table, table.slice(0, 1)]))


def _drop_partition(output: Path) -> None:
    set_capacity_over_day(output, None, "2026-01-02", None)


def _duplicate_stretch(output: Path) -> None:
    commit_change(output, "capacity_level", lambda table: pa.concat_tables([table, table.slice(0, 1)]))


def _inflate_ideal(output: Path) -> None:
    def change(table: pa.Table) -> pa.Table:
        ideal = [None if v is None else v * 10 for v in table.column("ideal_chip_s").to_pylist()]
        return table.set_column(table.schema.get_field_index("ideal_chip_s"), "ideal_chip_s", [ideal])

    rewrite_partition(output, "job_window", "2026-01-03", change)


def _lose_rejections(output: Path) -> None:
    commit_change(output, "rejected", lambda table: table.slice(0, 0))


# Each in another table or day, so that one output can hold them all.
CORRUPTIONS = [
    (_corrupt_conservation, "[job_window] chip-seconds conserved: all_allocated = productive"),
    (_duplicate_key, "[job_window] one row per job_id, window_start"),
    (
        _drop_partition,
        "[capacity_window] capacity_window has a partition for every day of the period: missing: 2026-01-02",
    ),
    (
        _duplicate_stretch,
        "[capacity_window] no window is covered twice by the stretches of one cluster and accelerator",
    ),
    (_lose_rejections, "[manifest] the manifest's rejected counts match the rejected table"),
]


def test_a_corrupt_output_is_not_published_and_every_failure_is_named(outputs, tmp_path, capsys):
    """One output with every corruption above, so one report (seconds of Great Expectations) checks them
    all: a failure that went unnamed, or named only when alone, is missing from what it printed."""
    output = pristine_copy(outputs["fleet"], tmp_path / "out")
    for corrupt, _ in CORRUPTIONS:
        corrupt(output)
    _inflate_ideal(output)
    assert main(["report", "--output", str(output)]) == 1
    err = capsys.readouterr().err
    assert "NOT published" in err
    assert [failure for _, failure in CORRUPTIONS if failure not in err] == []
    # An ideal above the time it ran in sets its jobs' PG aside (no view shows PG above 1): a warning.
    (summary,) = [json.loads(path.read_text()) for path in (output / "quality").glob("*/summary.json")]
    warned = {check["title"] for check in summary["checks"] if not check["success"] and check["severity"] == "warning"}
    assert "no window's ideal chip-time passes the profiled productive chip-time it ran in" in warned
    assert not (output / "reports").exists()


def _browser() -> str | None:
    return next(
        (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
    )


def _chromium(tmp_path: Path) -> list[str]:
    return [
        _browser(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1200,3000",
    ]


def _drawn(page: Path, tmp_path: Path, screenshot: Path) -> dict[str, int]:
    """The draw check's findings, recorded on <body> by the page's script in a real browser,
    which also takes a screenshot of the page (one launch: a second costs a second)."""
    dom = subprocess.run(
        [*_chromium(tmp_path), f"--screenshot={screenshot}", "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    body = re.search(r"<body([^>]*)>", dom).group(1)
    found = dict(re.findall(r'data-([\w-]+)="(\d+)"', body))
    assert "charts-drawn" in found, "the page's draw check did not run"
    assert all(int(n) > 0 for n in re.findall(r'data-drawn-marks="(\d+)"', dom))
    return {name: int(value) for name, value in found.items()}


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (Debian package `chromium`)")
@pytest.mark.parametrize("which", ["period", "one_day", "job"])
def test_pages_draw_in_headless_chromium(published, one_day, tmp_path, which):
    """Every chart drawn, none narrower than a half column, no label outside its chart or on another; a screenshot."""
    if which == "one_day":
        page = one_day
    elif which == "job":
        page = published.parent / re.search(r'<a href="(jobs/[^"]+)">', published.read_text()).group(1)
    else:
        page = published
    screenshot = tmp_path / f"{which}.png"
    drawn = _drawn(page, tmp_path, screenshot)
    assert drawn["charts"] >= {"period": 12, "one_day": 8, "job": 2}[which] and drawn["charts-drawn"] == drawn["charts"]
    assert drawn["narrowest-chart"] >= drawn["text-width"] * 0.45, "charts fill their column"
    assert drawn["labels-outside"] == 0 and drawn["labels-overlapping"] == 0
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 30_000


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (Debian package `chromium`)")
def test_a_click_on_a_heading_sorts_its_table(published, tmp_path):
    click = (
        "<script>document.querySelector('table[data-table=by_team] th:nth-child(2)').click();"
        "document.querySelector('table[data-table=top_jobs] th:nth-child(1)').click();</script></body>"
    )
    page = tmp_path / "clicked.html"
    page.write_text(published.read_text().replace("</body>", click))
    dom = subprocess.run(
        [*_chromium(tmp_path), "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout

    def column(table: str, index: int) -> list[str]:
        body = re.search(rf'data-table="{table}".*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
        return [re.findall(r'<td[^>]*data-v="([^"]*)"', row)[index] for row in re.findall(r"<tr>(.*?)</tr>", body)]

    jobs = [int(v) for v in column("by_team", 1)]
    assert jobs == sorted(jobs, reverse=True) and jobs != [
        int(r["jobs"]) for r in _read_csv(published.parent / "by_team.csv")
    ]
    ids = column("top_jobs", 0)
    assert ids == sorted(ids, reverse=True)


def test_partial_day_report_says_so(outputs):
    assert main(["report", "--output", str(outputs["worked"]), "--date", "2026-01-01"]) == 0
    page = (outputs["worked"] / "reports" / "2026-01-01" / "index.html").read_text()
    assert "Partial period" in page and "2026-01-01T00:09:40Z" in page
    assert "17.2%" in page  # the worked example's MPG, 100/580


@pytest.mark.parametrize(
    "measures, interval, save_cost, mtbf",
    [
        # one disruption losing 600 s of a 1200 s interval, 6 saves of 40 s in 7800 s of steps
        (ClassMeasures(1, 240, 600, 7800, 7200, 120, 8580, 8580 * 32), 1200, 240 * 1200 / 7800, 8580),
        (ClassMeasures(4, 400, 1000, 40_000, 39_000, 200, 50_000, 50_000 * 8), 500, 5, 12_500),
        # measured: 6 saves of 40 s preserving 7200 s of steps
        (ClassMeasures(1, 240, 600, 7800, 7200, 120, 8580, 8580 * 32, saves=6), 1200, 40, 8580),
    ],
)
def test_advice_estimates(measures, interval, save_cost, mtbf):
    advice = advise(measures)
    assert advice.interval_s == pytest.approx(interval)
    assert advice.save_cost_s == pytest.approx(save_cost)
    assert advice.mtbf_s == pytest.approx(mtbf)
    assert advice.best_interval_s == pytest.approx(math.sqrt(2 * save_cost * mtbf))
    assert advice.rg_best >= advice.rg_now
    assert advice.recoverable_chip_h == pytest.approx(
        (advice.rg_best - advice.rg_now) * measures.all_allocated_chip_s / 3600
    )


def test_model_rg_is_best_at_the_young_daly_interval():
    s, m, t_rm = 30.0, 14_400.0, 120.0
    best = best_interval(s, m)
    assert all(model_rg(best, s, m, t_rm) >= model_rg(best * k, s, m, t_rm) for k in (0.5, 0.8, 1.25, 2.0))
    assert model_rg(2 * m, s, m, t_rm) == 0.0


def test_no_disruption_gives_no_estimate():
    advice = advise(ClassMeasures(0, 100, 0, 10_000, 10_000, 0, 12_000, 96_000))
    assert advice.best_interval_s is None and advice.recoverable_chip_h == 0.0
    assert advice.save_overhead == pytest.approx(0.01)


def test_the_report_names_the_dashboards_its_settings_give_as_text(outputs, tmp_path, capsys):
    """`report: dashboards:` in the settings file: each title and address shown (as text: the report loads
    and links nothing remote), in the file's order; an address that is no http(s) URL is a bad argument."""
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        "report:\n  dashboards:\n    Fleet goodput: https://grafana.example.com/d/fleet?from=now-7d\n"
        "    Interruptions: http://grafana.local:3000/d/interruptions\n"
    )
    assert main(["report", "--output", str(outputs["fleet"]), "--date", "2026-01-03", "--config", str(settings)]) == 0
    page = (outputs["fleet"] / "reports" / "2026-01-03" / "index.html").read_text()
    assert (
        "<b>Fleet goodput</b> <code>https://grafana.example.com/d/fleet?from=now-7d</code>; "
        "<b>Interruptions</b> <code>http://grafana.local:3000/d/interruptions</code>."
    ) in page
    assert 'href="http' not in page
    settings.write_text("report:\n  dashboards:\n    Fleet: javascript:alert(1)\n")
    capsys.readouterr()
    assert main(["report", "--output", str(outputs["fleet"]), "--date", "2026-01-03", "--config", str(settings)]) == 2
    assert "report.dashboards.Fleet: expected an http:// or https:// URL of printable ASCII" in capsys.readouterr().err
