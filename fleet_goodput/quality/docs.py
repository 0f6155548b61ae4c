"""Making GX's Data Docs readable offline, and an index of the period's checks beside them.

GX renders its pages with Bootstrap, jQuery and Vega from CDNs, and its own
index lists validation runs with a JavaScript table that stays empty without
them. The validation and suite pages themselves are static HTML, so dropping
the remote references and inlining a small stylesheet keeps them readable;
OUTPUT/quality/<period>/index.html (written here, no scripts) lists every
check with its severity, outcome and reason and links to those pages.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

_REMOTE_ASSET = re.compile(
    r"<script[^>]*\ssrc=\"https?://[^\"]*\"[^>]*>\s*</script>"
    r"|<link[^>]*\shref=\"https?://[^\"]*\"[^>]*>"
    r"|<img[^>]*\ssrc=\"https?://[^\"]*\"[^>]*>", re.IGNORECASE)
_STYLE = """<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left}
.fail,.text-danger,.fa-times{color:#b00020}.pass,.text-success,.fa-check-circle{color:#1b7f3b}.warn{color:#9a6700}
.collapse:not(.show){display:block}
</style>"""


def make_offline(site_dir: Path) -> None:
    """Drop CDN scripts, stylesheets and remote images from GX's Data Docs; inline a small stylesheet."""
    for page in site_dir.rglob("*.html"):
        text = _REMOTE_ASSET.sub("", page.read_text())
        page.write_text(text.replace("</head>", f"{_STYLE}\n</head>", 1))


def write_index(result, path: Path, site_dir: Path) -> None:
    """A static page: the verdict, every check, and links to GX's validation and suite pages."""
    def link(target: Path, text: str) -> str:
        return f'<a href="{html.escape(os.path.relpath(target, path.parent))}">{html.escape(text)}</a>'

    rows = []
    for check in result.checks:
        outcome = "pass" if check.success else ("fail" if check.severity == "critical" else "warn")
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in (
            html.escape(check.suite), f'<span class="{outcome}">{outcome.upper()}</span>', html.escape(check.severity),
            html.escape(check.title), html.escape(check.observed), html.escape(check.why))) + "</tr>")
    pages = [link(page, f"{page.parent.parent.parent.name} validation")
             for page in sorted(site_dir.glob("validations/*/*/*/*.html"))]
    pages += [link(page, f"{page.stem} suite") for page in sorted(site_dir.glob("expectations/*.html"))]
    verdict = "PASSED" if result.passed else "FAILED"
    path.write_text(f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Data quality {html.escape(result.period)}: {verdict}</title>{_STYLE}</head>
<body>
<h1>Data quality for {html.escape(result.period)}: <span class="{'pass' if result.passed else 'fail'}">{verdict}</span></h1>
<p>{len(result.checks)} checks, {len(result.failures)} critical failure(s), {len(result.warnings)} warning(s).
A critical failure stops <code>mpg report</code> from publishing; a warning is shown in the report.</p>
<p>Great Expectations Data Docs: {' · '.join(pages)}</p>
<table><thead><tr><th>suite</th><th>outcome</th><th>severity</th><th>check</th><th>observed</th><th>why, and why this threshold</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
</body></html>
""")
