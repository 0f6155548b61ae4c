"""Hostile strings in the telemetry reach the report and its Data Docs as text, never as markup, script or formula.

A one-day fleet whose job ids and teams are HTML, attribute breakouts, paths
and spreadsheet formulas goes through the real pipeline and `mpg report`;
the tests open every page and CSV it wrote (issue 10: "every generated HTML
page and CSV is safe for hostile strings"), and a headless browser checks
that none of the hostile scripts ran.

The fleet also holds two rejected events whose `event_id` is hostile HTML (a
script, an image with an event handler, a remote image, a stylesheet import):
the `rejected` suite's uniqueness warning lists them, which is how a
`<script>` once ran in the Data Docs page the report links to. Every Data
Docs page the report's validation wrote is parsed: no script element, no
event handler, nothing fetched from outside the site; the hostile value shows
as text. One fleet and one report serve both, since a report costs seconds of
Great Expectations.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fleet_goodput.avro_io import write_events
from fleet_goodput.cli import main
from fleet_goodput.quality.docs import sanitize
from fleet_goodput.report.spreadsheet import spreadsheet_safe
from test_quality import _Fleet, _training
from test_report import _browser, _chromium

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
HOSTILE_EVENT_ID = ('<script>document.title="PWNED"</script><img src=x onerror="document.title=\'PWNED\'">'
                    '<img src="http://evil.example/p.png"><style>@import url(http://evil.example/s.css);</style>'
                    '"><svg onload="document.title=\'PWNED\'"></td></table>')
PERIOD = "2026-01-01"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    fleet = _Fleet()
    fleet.scheduler(None, 0, "CAPACITY", 96, "tpu-v5e", "c1")
    jobs = {**HOSTILE_JOBS, **{f"team-job-{i}": team for i, team in enumerate(HOSTILE_TEAMS)}}
    for i, (job_id, team) in enumerate(jobs.items()):
        _training(fleet, job_id, 600 * i, chips=8, team=team, cycles=2, preempt_after=0 if i % 2 else None)
    fleet.scheduler(None, 86_400, "CAPACITY", 96, "tpu-v5e", "c1")
    # Rejected (an accelerator nobody has), under one hostile event id twice: a duplicate the rejected suite lists.
    for job_id in ("x1", "x2"):
        fleet.scheduler(job_id, 60, "SUBMIT", 8, "h900", team=HOSTILE_EVENT_ID)
        fleet.records["scheduler"][-1]["event_id"] = HOSTILE_EVENT_ID
    telemetry, output = tmp_path_factory.mktemp("hostile_in"), tmp_path_factory.mktemp("hostile_out")
    for stream, records in fleet.records.items():
        write_events(telemetry / stream / "part-0.avro", stream, records)
    assert main(["run", "--input", str(telemetry), "--output", str(output)]) == 0
    assert main(["report", "--output", str(output), "--date", PERIOD]) == 0
    return output / "reports" / PERIOD


@pytest.fixture(scope="module")
def quality(report) -> Path:
    """The GX project and Data Docs the report's validation wrote, which the report links to."""
    return report.parents[1] / "quality" / PERIOD


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


def _dom(page: Path, tmp_path: Path, *flags: str) -> str:
    """The page's DOM after headless Chromium ran it (test_report's flags: offline, no first-run work)."""
    return subprocess.run([*_chromium(tmp_path), *flags, "--dump-dom", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120, check=True).stdout


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (Debian package `chromium`)")
def test_no_hostile_script_runs_in_a_browser(report, tmp_path):
    for path in _pages(report)[:3]:
        dom = _dom(path, tmp_path)
        body = re.search(r"<body[^>]*>", dom).group(0)
        assert "data-charts-drawn" in body and "data-pwned" not in body, (path.name, body)


class _Page(HTMLParser):
    """What a browser would run or fetch, and the text it would show."""

    URL_ATTRIBUTES = {"href", "src", "action", "formaction", "srcset", "poster", "background", "data", "xlink:href"}

    def __init__(self):
        super().__init__()
        self.scripts, self.handlers, self.remote, self.loaders, self.text = 0, [], [], [], []
        self._tag = None

    def handle_starttag(self, tag, attrs):
        self._tag = tag
        self.scripts += tag == "script"
        if tag in ("link", "iframe", "object", "embed", "base") or (tag == "meta" and dict(attrs).get("http-equiv")):
            self.loaders.append(tag)
        for name, value in attrs:
            if name.startswith("on"):
                self.handlers.append(f"{tag} {name}")
            if name in self.URL_ATTRIBUTES and re.match(r"^\s*([a-zA-Z][a-zA-Z0-9+.-]*:|//)", value or ""):
                self.remote.append(f"{tag} {name}={value}")
            if name == "style" and re.search(r"url\s*\(|@import", value or "", re.IGNORECASE):
                self.remote.append(f"{tag} style={value}")

    def handle_data(self, data):
        if self._tag == "style" and re.search(r"url\s*\(|@import", data, re.IGNORECASE):
            self.remote.append(f"style: {data[:80]}")
        self.text.append(data)


def _parse(page: Path) -> _Page:
    parser = _Page()
    parser.feed(page.read_text())
    return parser


def test_no_data_docs_page_runs_a_script_or_loads_anything_remote(quality):
    pages = sorted(quality.rglob("*.html"))
    assert len(pages) > 10
    for page in pages:
        parsed = _parse(page)
        assert (parsed.scripts, parsed.handlers, parsed.remote, parsed.loaders) == (0, [], [], []), page


def test_the_hostile_event_id_shows_as_text_in_the_rejected_page(quality):
    (page,) = quality.glob("gx/uncommitted/data_docs/local_site/validations/rejected/*/*/*.html")
    text = "".join(_parse(page).text)
    assert HOSTILE_EVENT_ID in text
    index_text = "".join(_parse(quality / "index.html").text)
    assert '<script>document.title="PWNED"</script>' in index_text


def test_the_gx_index_lists_every_validation_with_its_status_as_text(quality):
    site = quality / "gx" / "uncommitted" / "data_docs" / "local_site"
    rows = re.findall(r'<tr>\s*<td><a href="(validations/[^"]+)">(\w+)</a></td>', (site / "index.html").read_text())
    suites = {link.split("/")[1]: status for link, status in rows}
    # GX marks a suite Failed on any unmet expectation, warnings too: here the duplicated hostile id
    # (rejected), the rejected share (manifest), and jobs that end hours before the as-of (job_window).
    checks = json.loads((quality / "summary.json").read_text())["checks"]
    assert suites == {suite: "Success" if all(c["success"] for c in checks if c["suite"] == suite) else "Failed"
                      for suite in {c["suite"] for c in checks}}
    assert sorted(suite for suite, status in suites.items() if status == "Failed") == ["job_window", "manifest", "rejected"]
    for link, _ in rows:
        assert (site / link).is_file()


@pytest.mark.parametrize("name, page, kept, dropped", [
    ("script element", "<p>a</p><script>alert(1)</script><p>b</p>", "<p>a</p><p>b</p>", "alert"),
    ("event handler", '<img src="x.png" onerror="alert(1)">', '<img src="x.png">', "onerror"),
    ("remote image", '<img src="https://evil.example/p.png" alt="p">', '<img alt="p">', "evil"),
    ("protocol-relative", '<img src="//evil.example/p.png">', "<img>", "evil"),
    ("javascript link", '<a href="javascript:alert(1)">x</a>', "<a>x</a>", "javascript"),
    ("stylesheet link", '<link rel="stylesheet" href="https://cdn.example/b.css"><p>x</p>', "<p>x</p>", "cdn"),
    ("css import and url", "<style>@import url(https://cdn.example/b.css); .a{background:url('https://x.example/i.png')}"
     "</style>", "<style> .a{background:}</style>", "example"),
    ("meta refresh", '<meta http-equiv="refresh" content="0;url=https://evil.example"><meta charset="utf-8">',
     '<meta charset="utf-8">', "refresh"),
    ("entities stay text", "<p>&lt;script&gt; &amp; &#39;</p>", "<p>&lt;script&gt; &amp; &#39;</p>", "<script>"),
    ("local links stay", '<a href="validations/a.html#x">a</a>', '<a href="validations/a.html#x">a</a>', "http"),
])
def test_sanitize(name, page, kept, dropped):
    clean = sanitize(page)
    assert clean == kept, name
    assert dropped not in clean


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (Debian package `chromium`)")
def test_chromium_does_not_run_the_hostile_script_of_the_data_docs(quality, tmp_path):
    (page,) = quality.glob("gx/uncommitted/data_docs/local_site/validations/rejected/*/*/*.html")
    dom = _dom(page, tmp_path, "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=2000")
    title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    assert "PWNED" not in title
    assert "&lt;script&gt;document.title=" in dom
