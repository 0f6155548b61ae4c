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

Teams, a framework, a job id, an event id and the input folder's name also
carry terminal control sequences (ESC[2J, an OSC 8 hyperlink, BEL, the
one-byte C1 CSI, DEL): no raw control character may reach the report's pages
and CSVs, the Data Docs, or what `mpg run`, `mpg runs` and `mpg sql` (every
format) print; each shows as \\xNN (fleet_goodput/safe_text.py), and
`mpg sql --csv-raw` writes the exact values.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

from fleet_goodput import console
from fleet_goodput.cli import main
from fleet_goodput.quality.docs import sanitize
from fleet_goodput.report import headline
from fleet_goodput.safe_text import csv_cell, printable, spreadsheet_safe
from fleet_goodput.telemetry.avro_io import write_events
from quality_outputs import _Fleet, _training
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
    "+SUM(1,2)",
    "-2+3",
    "@SUM(1,1)",
    "\tTAB",
    "\rCR",
)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
HOSTILE_EVENT_ID = (
    '<script>document.title="PWNED"</script><img src=x onerror="document.title=\'PWNED\'">'
    '<img src="http://evil.example/p.png"><style>@import url(http://evil.example/s.css);</style>'
    '"><svg onload="document.title=\'PWNED\'"></td></table>'
)
PERIOD = "2026-01-01"

CLEAR_SCREEN = "\x1b[2J\x1b[H"
HYPERLINK = "\x1b]8;;http://evil.example/\x1b\\innocent\x1b]8;;\x1b\\"  # OSC 8: text hiding a link
BEL, C1_CSI, DEL = "\x07", "\x9b", "\x7f"
RLO, PDI = "\u202e", "\u2069"  # right-to-left override, pop directional isolate (Trojan Source)
# Each as the report and the terminal show it: every control character as \xNN.
ESCAPE_TEAMS = {
    f"{CLEAR_SCREEN}wiped": "\\x1b[2J\\x1b[Hwiped",
    HYPERLINK: "\\x1b]8;;http://evil.example/\\x1b\\innocent\\x1b]8;;\\x1b\\",
    f"ring{BEL}": "ring\\x07",
    f"{C1_CSI}31mred{DEL}": "\\x9b31mred\\x7f",
    f"ops{RLO}nimda{PDI}": "ops\\u202enimda\\u2069",
}
ESCAPE_FRAMEWORK = f"jax{CLEAR_SCREEN}{C1_CSI}2J"
FRAMED_JOB = list(HOSTILE_JOBS)[1]  # preempted: one of the worst jobs, which have pages
ESCAPE_JOB = f"job{BEL}{C1_CSI}2J"
ESCAPE_EVENT_ID = f"{HYPERLINK}{CLEAR_SCREEN}{BEL}{C1_CSI}2J"
ESCAPE_INPUT = f"in\x1b]0;title{BEL}{C1_CSI}2J"  # the telemetry folder (OSC 0 sets a window title): `mpg runs` lists it
# Hostile teams as the report's CSV writes them: formulas quoted, control characters shown.
TEAMS_IN_CSV = {
    '=HYPERLINK("http://evil.example/","click")': '\'=HYPERLINK("http://evil.example/","click")',
    f'<img src=x onerror="{PWN.format("team")}">': f'<img src=x onerror="{PWN.format("team")}">',
    "+SUM(1,2)": "'+SUM(1,2)",
    "-2+3": "'-2+3",
    "@SUM(1,1)": "'@SUM(1,1)",
    "\tTAB": "\\x09TAB",
    "\rCR": "\\x0dCR",
    **ESCAPE_TEAMS,
}
CONTROL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)  # what no output may carry raw (a newline may)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> tuple[Path, str]:
    """The output of `mpg run` over the hostile fleet, and all it printed (stdout and stderr)."""
    fleet = _Fleet()
    fleet.scheduler(None, 0, "CAPACITY", 96, "tpu-v5e", "c1")
    jobs = {**HOSTILE_JOBS, **{f"team-job-{i}": team for i, team in enumerate(HOSTILE_TEAMS)}}
    for i, (job_id, team) in enumerate(jobs.items()):
        _training(fleet, job_id, 600 * i, chips=8, team=team, cycles=2, preempt_after=0 if i % 2 else None)
    # Escape sequences: a framework on one of the worst jobs (they have pages), teams on jobs too small to be
    # among them, and a job id the pipeline rejects (control characters: not an identifier).
    submit = next(r for r in fleet.records["scheduler"] if r["job_id"] == FRAMED_JOB and r["type"] == "SUBMIT")
    submit["framework"] = ESCAPE_FRAMEWORK
    for i, team in enumerate(ESCAPE_TEAMS):
        _training(fleet, f"escape-job-{i}", 600 * i, chips=1, team=team, cycles=2)
    _training(fleet, ESCAPE_JOB, 0, chips=1, team="research", cycles=2)
    fleet.scheduler(None, 86_400, "CAPACITY", 96, "tpu-v5e", "c1")
    # Rejected (an accelerator nobody has), under two hostile event ids twice: duplicates the rejected suite lists.
    for job_id, event_id in (
        ("x1", HOSTILE_EVENT_ID),
        ("x2", HOSTILE_EVENT_ID),
        ("x3", ESCAPE_EVENT_ID),
        ("x4", ESCAPE_EVENT_ID),
    ):
        fleet.scheduler(job_id, 60, "SUBMIT", 8, "h900", team=event_id)
        fleet.records["scheduler"][-1]["event_id"] = event_id
    telemetry, output = tmp_path_factory.mktemp("hostile_in") / ESCAPE_INPUT, tmp_path_factory.mktemp("hostile_out")
    for stream, records in fleet.records.items():
        write_events(telemetry / stream / "part-0.avro", stream, records)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        assert main(["run", "--input", str(telemetry), "--output", str(output)]) == 0
    return output, printed.getvalue()


@pytest.fixture(scope="module")
def report(hostile_run) -> Path:
    output = hostile_run[0]
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
    assert teams == {"research", *TEAMS_IN_CSV.values()}


@pytest.mark.parametrize(
    "value, written",
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("team", "team"),
        ("a=b", "a=b"),
        ("", ""),
        (-1.5, -1.5),
        (None, None),
        (3, 3),
    ],
)
def test_spreadsheet_safe(value, written):
    assert spreadsheet_safe(value) == written


@pytest.mark.parametrize(
    "name, text, shown, shown_keeping_newlines",
    [
        ("ESC starts CSI", "\x1b[2Jx", "\\x1b[2Jx", "\\x1b[2Jx"),
        (
            "OSC 8 ended by BEL",
            "\x1b]8;;http://e.example/\x07x",
            "\\x1b]8;;http://e.example/\\x07x",
            "\\x1b]8;;http://e.example/\\x07x",
        ),
        ("C1 CSI", "\x9b2J", "\\x9b2J", "\\x9b2J"),
        ("DEL, NUL, tab, CR", "a\x7fb\x00c\td\re", "a\\x7fb\\x00c\\x09d\\x0de", "a\\x7fb\\x00c\\x09d\\x0de"),
        ("newline", "a\nb", "a\\x0ab", "a\nb"),
        ("printable text stays", "équipe ✓ <b> \\x1b", "équipe ✓ <b> \\x1b", "équipe ✓ <b> \\x1b"),
        ("U+00A0 is past C1", "a\u00a0b", "a\u00a0b", "a\u00a0b"),
        ("a file name's byte that is not UTF-8", "in\udc9b", "in\\x9b", "in\\x9b"),
        ("another lone surrogate", "a\ud800", "a\\ud800", "a\\ud800"),
        (
            "bidirectional overrides and isolates",
            "a\u202eb\u2066c\u200fd",
            "a\\u202eb\\u2066c\\u200fd",
            "a\\u202eb\\u2066c\\u200fd",
        ),
    ],
)
def test_printable(name, text, shown, shown_keeping_newlines):
    assert printable(text) == shown, name
    assert printable(text, keep_newlines=True) == shown_keeping_newlines, name


@pytest.mark.parametrize(
    "value, written",
    [
        ("\tTAB", "\\x09TAB"),
        ("\x1b[2J=1", "\\x1b[2J=1"),
        ("=\x1b[2J", "'=\\x1b[2J"),
        ("a\nb", "a\nb"),
        ("-2+3", "'-2+3"),
        (-2, -2),
        (None, None),
    ],
)
def test_csv_cell_shows_control_characters_then_guards_formulas(value, written):
    assert csv_cell(value) == written


def _dom(page: Path, tmp_path: Path, *flags: str) -> str:
    """The page's DOM after headless Chromium ran it (test_report's flags: offline, no first-run work)."""
    return subprocess.run(
        [*_chromium(tmp_path), *flags, "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout


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
    assert suites == {
        suite: "Success" if all(c["success"] for c in checks if c["suite"] == suite) else "Failed"
        for suite in {c["suite"] for c in checks}
    }
    assert sorted(suite for suite, status in suites.items() if status == "Failed") == [
        "job_window",
        "manifest",
        "rejected",
    ]
    for link, _ in rows:
        assert (site / link).is_file()


@pytest.mark.parametrize(
    "name, page, kept, dropped",
    [
        ("script element", "<p>a</p><script>alert(1)</script><p>b</p>", "<p>a</p><p>b</p>", "alert"),
        ("event handler", '<img src="x.png" onerror="alert(1)">', '<img src="x.png">', "onerror"),
        ("remote image", '<img src="https://evil.example/p.png" alt="p">', '<img alt="p">', "evil"),
        ("protocol-relative", '<img src="//evil.example/p.png">', "<img>", "evil"),
        ("javascript link", '<a href="javascript:alert(1)">x</a>', "<a>x</a>", "javascript"),
        ("stylesheet link", '<link rel="stylesheet" href="https://cdn.example/b.css"><p>x</p>', "<p>x</p>", "cdn"),
        (
            "css import and url",
            "<style>@import url(https://cdn.example/b.css); .a{background:url('https://x.example/i.png')}</style>",
            "<style> .a{background:}</style>",
            "example",
        ),
        (
            "meta refresh",
            '<meta http-equiv="refresh" content="0;url=https://evil.example"><meta charset="utf-8">',
            '<meta charset="utf-8">',
            "refresh",
        ),
        ("entities stay text", "<p>&lt;script&gt; &amp; &#39;</p>", "<p>&lt;script&gt; &amp; &#39;</p>", "<script>"),
        ("local links stay", '<a href="validations/a.html#x">a</a>', '<a href="validations/a.html#x">a</a>', "http"),
    ],
)
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


def _control_characters(text: str) -> list[str]:
    return sorted({repr(c) for c in CONTROL.findall(text)})


def test_no_report_page_csv_or_summary_holds_a_raw_control_character(report):
    files = sorted(p for p in report.rglob("*") if p.is_file())
    assert len(files) > 12
    for path in files:
        assert _control_characters(path.read_text(encoding="utf-8")) == [], path.name
    index = (report / "index.html").read_text()
    for shown in ESCAPE_TEAMS.values():
        assert shown in index
    (job_page,) = [p for p in (report / "jobs").glob("*.html") if "jax\\x1b[2J\\x1b[H\\x9b2J" in p.read_text()]
    assert "onmouseover=&#34;" in job_page.read_text(), "the page of FRAMED_JOB"


def test_no_data_docs_page_holds_a_raw_control_character(quality):
    pages = sorted(quality.rglob("*.html"))
    for page in pages:
        assert _control_characters(page.read_text(encoding="utf-8")) == [], page
    (rejected,) = quality.glob("gx/uncommitted/data_docs/local_site/validations/rejected/*/*/*.html")
    assert printable(ESCAPE_EVENT_ID) in "".join(_parse(rejected).text)
    assert "\\x1b]8;;http://evil.example/\\x1b" in "".join(_parse(quality / "index.html").text)


def test_sanitize_shows_control_characters_in_text_and_attributes():
    page = '<p title="a\x1b[2J">b\x9b2J\n&#65;</p>'
    assert sanitize(page) == '<p title="a\\x1b[2J">b\\x9b2J\n&#65;</p>'


def test_mpg_run_prints_the_input_folder_with_its_control_characters_shown(hostile_run):
    printed = hostile_run[1]
    assert "Committed run 1" in printed and "Fleet ML Productivity Goodput" in printed
    assert _control_characters(printed) == []
    assert printable(ESCAPE_INPUT) in printed


def test_mpg_runs_shows_control_characters_in_the_input_path(hostile_run, capsys):
    output = str(hostile_run[0])
    assert main(["runs", "--output", output]) == 0
    table = capsys.readouterr()
    assert _control_characters(table.out + table.err) == []
    assert printable(ESCAPE_INPUT) in table.out
    assert main(["runs", "--output", output, "--format", "json"]) == 0
    printed = capsys.readouterr().out
    assert _control_characters(printed) == []
    assert json.loads(printed)[0]["input"].endswith(ESCAPE_INPUT), "json keeps the exact path, escaped as JSON"


TEAMS_QUERY = "select team from goodput_by_team order by team"


@pytest.mark.parametrize("format_", ["table", "markdown", "csv", "json"])
def test_mpg_sql_prints_no_raw_control_character_in_any_format(hostile_run, capsys, format_):
    assert main(["sql", "--output", str(hostile_run[0]), "--format", format_, TEAMS_QUERY]) == 0
    printed = capsys.readouterr()
    # CSV ends its lines with CRLF (RFC 4180): that CR, just before a newline, is the only one.
    assert _control_characters(printed.out.replace("\r\n", "\n") + printed.err) == []
    if format_ == "json":
        assert {row["team"] for row in json.loads(printed.out)} >= set(ESCAPE_TEAMS), "json keeps exact values"
    elif format_ == "csv":
        assert {row["team"] for row in csv.DictReader(io.StringIO(printed.out))} == {"research", *TEAMS_IN_CSV.values()}
    else:
        for shown in ESCAPE_TEAMS.values():
            assert shown.replace("\\", "\\\\" if format_ == "markdown" else "\\") in printed.out


def test_mpg_sql_table_columns_stay_aligned_with_control_characters(hostile_run, capsys):
    query = "select team, jobs from goodput_by_team order by team"
    assert main(["sql", "--output", str(hostile_run[0]), query]) == 0
    lines = capsys.readouterr().out.splitlines()[:-1]  # but the row count
    assert len({len(line) for line in lines}) == 1, lines


def test_mpg_sql_csv_raw_writes_the_exact_values(hostile_run, capsys):
    assert main(["sql", "--output", str(hostile_run[0]), "--format", "csv", "--csv-raw", TEAMS_QUERY]) == 0
    printed = capsys.readouterr().out
    assert {row["team"] for row in csv.DictReader(io.StringIO(printed, newline=""))} == {"research", *TEAMS_IN_CSV}


def test_mpg_sql_csv_raw_goes_with_csv_only(hostile_run, capsys):
    assert main(["sql", "--output", str(hostile_run[0]), "--csv-raw", TEAMS_QUERY]) == 2
    assert capsys.readouterr().err == "mpg sql: --csv-raw goes with --format csv only\n"


@pytest.mark.parametrize(
    "name, argv, shown",
    [
        (
            "a missing output",
            ["sql", "--output", f"/nonexistent/{CLEAR_SCREEN}", "select 1"],
            "/nonexistent/\\x1b[2J\\x1b[H",
        ),
        (
            "a query DuckDB cannot parse",
            ["sql", "--output", "{output}", f"select '{CLEAR_SCREEN}{C1_CSI}2J"],
            "\\x1b[2J\\x1b[H\\x9b2J",
        ),
        ("an unknown table", ["sql", "--output", "{output}", f'select * from "t{BEL}{HYPERLINK}"'], "t\\x07\\x1b]8;;"),
        (
            "a format argparse refuses",
            ["sql", "--output", "{output}", "--format", f"csv{CLEAR_SCREEN}", "select 1"],
            "csv\\x1b[2J\\x1b[H",
        ),
        ("mpg runs of a missing output", ["runs", "--output", f"/nonexistent/{C1_CSI}2J"], "/nonexistent/\\x9b2J"),
        (
            "a file name whose bytes are not UTF-8",
            ["sql", "--output", "{output}", "-f", "/nonexistent/\udc9b2J.sql"],
            "cannot read the SQL file /nonexistent/\\x9b2J.sql",
        ),
    ],
)
def test_an_error_that_echoes_input_shows_its_control_characters(hostile_run, capsys, name, argv, shown):
    argv = [arg.replace("{output}", str(hostile_run[0])) for arg in argv]
    with contextlib.suppress(SystemExit):
        assert main(argv) != 0, name
    printed = capsys.readouterr()
    assert _control_characters(printed.out + printed.err) == [], name
    assert shown in printed.err, (name, printed.err)


def test_mpg_sql_shows_the_rejected_job_id_and_its_reason_with_control_characters_shown(hostile_run, capsys):
    query = "select job_id, reason from rejected where job_id like 'job%' limit 1"
    assert main(["sql", "--output", str(hostile_run[0]), query]) == 0
    printed = capsys.readouterr().out
    assert _control_characters(printed) == []
    assert "job\\x07\\x9b2J" in printed and "holds control characters" in printed


def test_printable_streams_show_control_characters_and_give_the_streams_back(capsys):
    with console.printable_streams():
        print(f"a{CLEAR_SCREEN}b\tc\rd")
        print(f"x{C1_CSI}y{DEL}", file=sys.stderr)
        console.unescaped(sys.stdout).write(f"meant{BEL}\n")
    print(f"after{BEL}")
    printed = capsys.readouterr()
    assert printed.out == f"a\\x1b[2J\\x1b[Hb\\x09c\\x0dd\nmeant{BEL}\nafter{BEL}\n"
    assert printed.err == "x\\x9by\\x7f\n"


def test_the_headline_shows_control_characters_in_segment_and_cluster_names():
    connection = duckdb.connect()
    connection.execute(
        "create table goodput_by_segment as select 'team' as dimension, $1 as segment, 2 as jobs, "
        "0.5 as sg, 0.5 as rg, 0.5 as pg, 0.125 as mpg, 1.0 as pg_coverage, 7200.0 as lifetime_chip_s",
        [f"{CLEAR_SCREEN}t"],
    )
    connection.execute(
        "create table capacity_gaps as select $1 as cluster, 'tpu-v5e' as accelerator, "
        "'no_capacity' as problem, 3 as windows, 3600.0 as held_chip_s",
        [f"c{C1_CSI}2J"],
    )
    lines = headline.segment_table(connection, "team") + headline.capacity_gap_lines(connection)
    assert lines[1] == "  \\x1b[2J\\x1b[Ht        2  50.0%  50.0%  50.0%  12.5% 100.0%        2.0"
    assert lines[3] == "  c\\x9b2J/tpu-v5e: no CAPACITY level in 3 window(s), 1.0 chip-h held"
