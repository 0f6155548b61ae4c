"""`mpg report`: published only on clean data, self-contained, drawn by a real browser, idempotent.

Outputs are the real pipeline's (see test_quality.build_outputs, shared so the
pipeline runs once per session); corruptions are made on pristine copies.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from fleet_goodput.cli import main
from fleet_goodput.report.advice import ClassMeasures, advise, best_interval, model_rg
from test_quality import build_outputs, commit_change, pristine_copy, rewrite_partition

PERIOD = "2026-01-01_2026-01-03"


@pytest.fixture(scope="session")
def outputs(tmp_path_factory) -> dict[str, Path]:
    return build_outputs(tmp_path_factory)


@pytest.fixture(scope="module")
def published(outputs) -> Path:
    assert main(["report", "--output", str(outputs["fleet"]), "--from", "2026-01-01", "--to", "2026-01-03",
                 "--require-complete"]) == 0
    return outputs["fleet"] / "reports" / PERIOD / "index.html"


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_report_is_one_self_contained_page_with_every_section(published):
    page = published.read_text()
    assert not re.search(r"""(src|href)=["']https?:""", page), "the page must not fetch anything"
    assert "<script src" not in page and "<link" not in page
    for heading in ("Fleet ML Productivity Goodput", "Trend per day", "By accelerator", "By workload",
                    "By size class", "By team", "Badput breakdown", "Jobs that lost the most chip-hours",
                    "Checkpoint-interval advice", "PG coverage", "Data quality", "Figures as CSV"):
        assert f">{heading}<" in page, heading
    assert page.count('<svg class="chart"') >= 10


def test_csv_figures_agree_with_the_page_and_the_metric(published):
    folder = published.parent
    (total,) = _read_csv(folder / "fleet_total.csv")
    sg, rg, pg, mpg = (float(total[k]) for k in ("sg", "rg", "pg", "mpg"))
    assert sg * rg * pg == pytest.approx(mpg, rel=1e-12)
    assert f"{mpg:.1%}" in published.read_text()
    days = _read_csv(folder / "fleet_by_day.csv")
    assert [d["day"] for d in days] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert sum(float(d["capacity_chip_h"]) for d in days) == pytest.approx(float(total["capacity_chip_h"]))
    teams = {row["team"] for row in _read_csv(folder / "by_team.csv")}
    assert teams == {"research", "vision", "serving", "inference", "UNKNOWN"}
    badput = {row["category"]: float(row["chip_h"]) for row in _read_csv(folder / "badput.csv")}
    assert badput["lost"] > 0 and badput["checkpoint_save"] > 0 and badput["idle_capacity"] > 0
    top = _read_csv(folder / "top_jobs.csv")
    assert top[0]["job_id"].startswith("train-") and top[0]["top_cause"] == "queued"


def test_checkpoint_advice_recovers_the_fleets_interval(published):
    """Training jobs in the fleet save every 1200 s of steps and lose 600 s per preemption."""
    advice = {(row["accelerator"], row["size_class"]): row for row in _read_csv(published.parent / "checkpoint_advice.csv")}
    big = advice[("tpu-v5e", "9-64")]
    assert int(big["disruptions"]) == 3
    assert float(big["interval_s"]) == pytest.approx(1200)
    assert float(big["save_cost_s"]) == pytest.approx(40 * 1200 / 1300, rel=1e-9)  # 6.5 intervals of steps, 6 saves
    assert float(big["best_interval_s"]) < float(big["interval_s"]) and "shorten" in big["advice"]
    assert advice[("tpu-v5e", "1-8")]["advice"].startswith("no disruption observed")


def test_data_quality_summary_is_in_the_report(published):
    page = published.read_text()
    assert "PASSED" in page and "at least 95% of jobs name their team" in page
    quality = json.loads((published.parent / "quality.json").read_text())
    assert quality["passed"]
    link = re.search(r'href="([^"]+)">data-quality index', page).group(1)
    assert (published.parent / link).resolve().exists()


def test_rerun_replaces_the_period_report(published, outputs):
    before = sorted(p.name for p in published.parent.iterdir())
    first = published.read_text()
    assert main(["report", "--output", str(outputs["fleet"]), "--from", "2026-01-01", "--to", "2026-01-03"]) == 0
    assert sorted(p.name for p in published.parent.iterdir()) == before
    assert published.read_text() == first
    assert [p.name for p in published.parent.parent.iterdir()] == [PERIOD], "no temporary folders left behind"


def _corrupt_conservation(output: Path) -> None:
    def change(table: pa.Table) -> pa.Table:
        values = table.column("init_chip_s").to_pylist()
        values[0] += 1800.0
        return table.set_column(table.schema.get_field_index("init_chip_s"), "init_chip_s", [values])

    rewrite_partition(output, "job_window", "2026-01-02", change)


def _duplicate_key(output: Path) -> None:
    commit_change(output, "job_window", lambda table: pa.concat_tables([table, table.slice(0, 1)]))


def _drop_partition(output: Path) -> None:
    commit_change(output, "capacity_window", lambda table: table.filter(pc.not_equal(table.column("date"), "2026-01-02")))


def _inflate_ideal(output: Path) -> None:
    def change(table: pa.Table) -> pa.Table:
        ideal = [None if v is None else v * 10 for v in table.column("ideal_chip_s").to_pylist()]
        return table.set_column(table.schema.get_field_index("ideal_chip_s"), "ideal_chip_s", [ideal])

    rewrite_partition(output, "job_window", "2026-01-03", change)


def _lose_rejections(output: Path) -> None:
    commit_change(output, "rejected", lambda table: table.slice(0, 0))


@pytest.mark.parametrize("corrupt, failure", [
    (_corrupt_conservation, "[job_window] chip-seconds conserved: all_allocated = productive"),
    (_duplicate_key, "[job_window] one stored row per job_id, window_start and version"),
    (_drop_partition, "[capacity_window] capacity_window has a partition for every day of the period: missing: 2026-01-02"),
    (_inflate_ideal, "[views] PG is in [0, 1] on every view row"),
    (_lose_rejections, "[manifest] the manifest's rejected counts match the rejected table"),
], ids=["conservation", "duplicate-key", "dropped-partition", "pg-above-1", "rejections-lost"])
def test_corrupt_output_is_not_published_and_the_failure_is_named(outputs, tmp_path, capsys, corrupt, failure):
    output = pristine_copy(outputs["fleet"], tmp_path / "out")
    corrupt(output)
    assert main(["report", "--output", str(output)]) == 1
    err = capsys.readouterr().err
    assert "NOT published" in err
    assert failure in err
    assert not (output / "reports").exists()


def _browser() -> str | None:
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (Debian package `chromium`)")
def test_charts_draw_in_headless_chromium(published, tmp_path):
    flags = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,3000"]
    url = published.resolve().as_uri()
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    body = re.search(r'<body data-charts="(\d+)" data-charts-drawn="(\d+)"', dom)
    assert body, "the page's draw check did not run"
    charts, drawn = map(int, body.groups())
    assert charts >= 10 and drawn == charts
    assert all(int(n) > 0 for n in re.findall(r'data-drawn-marks="(\d+)"', dom))
    screenshot = tmp_path / "report.png"
    subprocess.run([*flags, f"--screenshot={screenshot}", url], capture_output=True, timeout=120, check=True)
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 50_000


def test_partial_day_report_says_so(outputs):
    assert main(["report", "--output", str(outputs["worked"]), "--date", "2026-01-01"]) == 0
    page = (outputs["worked"] / "reports" / "2026-01-01" / "index.html").read_text()
    assert "Partial period" in page and "2026-01-01T00:09:40Z" in page
    assert "17.2%" in page  # the worked example's MPG, 100/580


@pytest.mark.parametrize("measures, interval, save_cost, mtbf", [
    # one disruption losing 600 s of a 1200 s interval, 6 saves of 40 s in 7800 s of steps
    (ClassMeasures(1, 240, 600, 7800, 120, 8580, 8580 * 32), 1200, 240 * 1200 / 7800, 8580),
    (ClassMeasures(4, 400, 1000, 40_000, 200, 50_000, 50_000 * 8), 500, 5, 12_500),
])
def test_advice_estimates(measures, interval, save_cost, mtbf):
    advice = advise(measures)
    assert advice.interval_s == pytest.approx(interval)
    assert advice.save_cost_s == pytest.approx(save_cost)
    assert advice.mtbf_s == pytest.approx(mtbf)
    assert advice.best_interval_s == pytest.approx(math.sqrt(2 * save_cost * mtbf))
    assert advice.rg_best >= advice.rg_now
    assert advice.recoverable_chip_h == pytest.approx(
        (advice.rg_best - advice.rg_now) * measures.all_allocated_chip_s / 3600)


def test_model_rg_is_best_at_the_young_daly_interval():
    s, m, t_rm = 30.0, 14_400.0, 120.0
    best = best_interval(s, m)
    assert all(model_rg(best, s, m, t_rm) >= model_rg(best * k, s, m, t_rm) for k in (0.5, 0.8, 1.25, 2.0))
    assert model_rg(2 * m, s, m, t_rm) == 0.0


def test_no_disruption_gives_no_estimate():
    advice = advise(ClassMeasures(0, 100, 0, 10_000, 0, 12_000, 96_000))
    assert advice.best_interval_s is None and advice.recoverable_chip_h == 0.0
    assert advice.save_overhead == pytest.approx(0.01)
