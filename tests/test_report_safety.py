"""Hostile strings in the telemetry reach the report as text, never as markup, script or formula.

A one-day fleet whose job ids and teams are HTML, attribute breakouts, paths
and spreadsheet formulas goes through the real pipeline and `mpg report`;
the tests open every page and CSV it wrote (issue 10: "every generated HTML
page and CSV is safe for hostile strings"), and a headless browser checks
that none of the hostile scripts ran.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fleet_goodput.avro_io import write_events
from fleet_goodput.cli import main
from fleet_goodput.report.spreadsheet import spreadsheet_safe
from test_quality import _Fleet, _training

PWN = "document.body.setAttribute('data-pwned','{}')"
HOSTILE_JOBS = {
    f"<script>{PWN.format('job')}</script>": "research",
    f'x" onmouseover="{PWN.format("attribute")}" y="': "research",
    "../../../../tmp/evil": "research",
    "=cmd|' /C calc'!A0": "research",
}
HOSTILE_TEAMS = (
    '=HYPERLINK("http://evil.example/","click")',
    f'<img src=x onerror="{PWN.format("team")}">',
    "+SUM(1,2)", "-2+3", "@SUM(1,1)", "\tTAB", "\rCR",
)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    fleet = _Fleet()
    fleet.scheduler(None, 0, "CAPACITY", 96, "tpu-v5e", "c1")
    jobs = {**HOSTILE_JOBS, **{f"team-job-{i}": team for i, team in enumerate(HOSTILE_TEAMS)}}
    for i, (job_id, team) in enumerate(jobs.items()):
        _training(fleet, job_id, 600 * i, chips=8, team=team, cycles=2, preempt_after=0 if i % 2 else None)
    fleet.scheduler(None, 86_400, "CAPACITY", 96, "tpu-v5e", "c1")
    telemetry, output = tmp_path_factory.mktemp("hostile_in"), tmp_path_factory.mktemp("hostile_out")
    for stream, records in fleet.records.items():
        write_events(telemetry / stream / "part-0.avro", stream, records)
    assert main(["run", "--input", str(telemetry), "--output", str(output)]) == 0
    assert main(["report", "--output", str(output), "--date", "2026-01-01"]) == 0
    return output / "reports" / "2026-01-01"


def _pages(report: Path) -> list[Path]:
    return [report / "index.html", *sorted((report / "jobs").glob("*.html"))]


def test_every_page_shows_hostile_strings_as_text(report):
    pages = _pages(report)
    assert len(pages) == 1 + 10, "the ten worst jobs each have a page"
    for path in pages:
        page = path.read_text()
        assert page.count("<script") == 1, f"{path.name}: only the page's own script"
        assert not re.search(r"<img|\son\w+=\"|\sdata-pwned=", page), path.name
    index = pages[0].read_text()
    assert "&lt;script&gt;document.body.setAttribute(&#39;data-pwned&#39;,&#39;job&#39;)&lt;/script&gt;" in index
    assert "&lt;img src=x onerror=&#34;" in index
    assert "=HYPERLINK(&#34;http://evil.example/&#34;,&#34;click&#34;)" in index


def test_job_pages_stay_in_their_folder_whatever_the_job_id(report):
    written = sorted(p.relative_to(report).as_posix() for p in report.rglob("*") if p.is_file())
    assert all(re.fullmatch(r"[\w.-]+\.(html|csv|json)|jobs/[\w.-]+\.html", name) for name in written), written
    assert not (report.parents[3] / "tmp" / "evil").exists()


def test_no_csv_cell_starts_a_formula(report):
    cells = []
    for path in sorted(report.glob("*.csv")):
        with open(path, newline="", encoding="utf-8") as handle:
            cells += [cell for row in csv.reader(handle) for cell in row]
    for cell in cells:
        if cell.startswith(FORMULA_STARTS):
            float(cell)  # only numbers (a negative change) may start with '-'
    with open(report / "by_team.csv", newline="", encoding="utf-8") as handle:
        teams = {row["team"] for row in csv.DictReader(handle)}
    assert teams == {"research", *(("'" if team.startswith(FORMULA_STARTS) else "") + team for team in HOSTILE_TEAMS)}


@pytest.mark.parametrize("value, written", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@x", "'@x"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("team", "team"), ("a=b", "a=b"), ("", ""), (-1.5, -1.5), (None, None), (3, 3),
])
def test_spreadsheet_safe(value, written):
    assert spreadsheet_safe(value) == written


def _browser() -> str | None:
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (Debian package `chromium`)")
def test_no_hostile_script_runs_in_a_browser(report, tmp_path):
    flags = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    for path in _pages(report)[:3]:
        dom = subprocess.run([*flags, "--dump-dom", path.resolve().as_uri()], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        body = re.search(r"<body[^>]*>", dom).group(0)
        assert "data-charts-drawn" in body and "data-pwned" not in body, (path.name, body)
