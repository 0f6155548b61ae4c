"""Data Docs are safe for hostile data and load nothing from the network.

The worked example runs with two rejected events whose `event_id` is hostile
HTML (a script, an image with an event handler, a remote image, a stylesheet
import): the `rejected` suite's uniqueness warning lists them, which is how a
`<script>` once ran in the page the report links to. Every page `mpg validate`
writes is parsed: no script element, no event handler, nothing fetched from
outside the site; the hostile value shows as text. Where Debian's chromium is
installed, the page is also loaded headless and the script must not have run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import worked_example
from fleet_goodput.avro_io import write_events
from fleet_goodput.cli import main
from fleet_goodput.quality.docs import sanitize

HOSTILE = ('<script>document.title="PWNED"</script><img src=x onerror="document.title=\'PWNED\'">'
           '<img src="http://evil.example/p.png"><style>@import url(http://evil.example/s.css);</style>'
           '"><svg onload="document.title=\'PWNED\'"></td></table>')
PERIOD = "2026-01-01"


@pytest.fixture(scope="module")
def quality(tmp_path_factory) -> Path:
    root, output = tmp_path_factory.mktemp("in"), tmp_path_factory.mktemp("out")
    records = worked_example.records()
    for stream, stream_records in records.items():
        write_events(root / stream / "part-0.avro", stream, stream_records)
    hostile = [{**records["scheduler"][0], "event_id": HOSTILE, "job_id": job_id, "accelerator": "h900", "team": HOSTILE}
               for job_id in ("x1", "x2")]
    write_events(root / "scheduler" / "hostile.avro", "scheduler", hostile)
    assert main(["run", "--input", str(root), "--output", str(output)]) == 0
    assert main(["validate", "--output", str(output), "--date", PERIOD]) == 0
    return output / "quality" / PERIOD


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


def _pages(quality: Path) -> list[Path]:
    return sorted(quality.rglob("*.html"))


def test_no_page_runs_a_script_or_loads_anything_remote(quality):
    pages = _pages(quality)
    assert len(pages) > 10
    for page in pages:
        parsed = _parse(page)
        assert (parsed.scripts, parsed.handlers, parsed.remote, parsed.loaders) == (0, [], [], []), page


def test_the_hostile_event_id_shows_as_text_in_the_rejected_page(quality):
    (page,) = quality.glob("gx/uncommitted/data_docs/local_site/validations/rejected/*/*/*.html")
    text = "".join(_parse(page).text)
    assert HOSTILE in text
    index_text = "".join(_parse(quality / "index.html").text)
    assert '<script>document.title="PWNED"</script>' in index_text


def test_the_gx_index_lists_every_validation_with_its_status_as_text(quality):
    site = quality / "gx" / "uncommitted" / "data_docs" / "local_site"
    rows = re.findall(r'<tr>\s*<td><a href="(validations/[^"]+)">(\w+)</a></td>', (site / "index.html").read_text())
    suites = {link.split("/")[1]: status for link, status in rows}
    assert suites == {"job_window": "Success", "jobs": "Success", "capacity_window": "Success",
                      "capacity_coverage": "Success", "rejected": "Failed", "manifest": "Failed", "views": "Success"}
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


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_chromium_does_not_run_the_hostile_script(quality, tmp_path):
    (page,) = quality.glob("gx/uncommitted/data_docs/local_site/validations/rejected/*/*/*.html")
    dom = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=2000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True).stdout
    title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    assert "PWNED" not in title
    assert "&lt;script&gt;document.title=" in dom
