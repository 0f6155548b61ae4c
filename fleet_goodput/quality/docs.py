"""Data Docs that are safe for hostile data and load nothing from the network.

`sanitize` is the last step of every Data Docs page (gx_views.py calls it on
what GX renders): it re-writes the page through an HTML parser, keeping text
and markup but dropping every script, event handler, embedded object and
reference to anything outside the site (stylesheets, images, CSS `url()`,
links to the web). A hostile value that a renderer left unescaped therefore
cannot run or fetch anything; it stays inert. Control characters in the text
and attributes (a terminal escape sequence in an event id) are written visibly
as `\\xNN` (safe_text.py), as in every other output of `mpg`.

`write_index` writes OUTPUT/quality/<period>/index.html, our own static page
(no scripts) listing every check with its severity, outcome and reason, with
links to GX's validation and suite pages.
"""

from __future__ import annotations

import html
import os
import re
from html.parser import HTMLParser
from pathlib import Path

from fleet_goodput.safe_text import printable

OFFLINE_STYLE = """<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left}
.fail,.text-danger,.fa-times{color:#b00020}.pass,.text-success,.fa-check-circle{color:#1b7f3b}.warn{color:#9a6700}
.collapse:not(.show){display:block}
</style>"""

# Elements dropped with their content (a script's text is code), and elements
# dropped alone (they load or run something, or redirect the page).
_DROPPED_WITH_CONTENT = {"script", "noscript", "template"}
_DROPPED = {"iframe", "frame", "frameset", "object", "embed", "applet", "base", "link", "form"}
_URL_ATTRIBUTES = {
    "href",
    "src",
    "action",
    "formaction",
    "srcset",
    "poster",
    "background",
    "xlink:href",
    "data",
    "ping",
    "cite",
    "longdesc",
    "manifest",
    "codebase",
    "lowsrc",
    "dynsrc",
}
# A relative reference inside the site: no scheme and not protocol-relative.
_LOCAL_URL = re.compile(r"^(?![a-zA-Z][a-zA-Z0-9+.-]*:)(?!//)(?!\\)")
_CSS_REMOTE = re.compile(r"@import[^;]*;?|url\s*\([^)]*\)|expression\s*\(", re.IGNORECASE)


class _Sanitiser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.out: list[str] = []
        self.skipping: str | None = None  # the element whose content is being dropped
        self.in_style = False

    def _attributes(self, attrs) -> str:
        kept = []
        for name, value in attrs:
            name = name.lower()
            value = value or ""
            unquoted = html.unescape(value).strip()
            if name.startswith("on") or (name in _URL_ATTRIBUTES and not _LOCAL_URL.match(unquoted)):
                continue
            if name == "style" and _CSS_REMOTE.search(unquoted):
                continue
            kept.append(f' {name}="{html.escape(printable(unquoted, keep_newlines=True), quote=True)}"')
        return "".join(kept)

    @staticmethod
    def _dropped(tag, attrs) -> bool:
        # <meta charset> stays; <meta http-equiv="refresh"> would navigate away.
        return tag in _DROPPED or (tag == "meta" and any(name.lower() == "http-equiv" for name, _ in attrs))

    def handle_starttag(self, tag, attrs) -> None:
        if self.skipping:
            return
        if tag in _DROPPED_WITH_CONTENT:
            self.skipping = tag
            return
        if self._dropped(tag, attrs):
            return
        self.in_style = tag == "style"
        self.out.append(f"<{tag}{self._attributes(attrs)}>")

    def handle_startendtag(self, tag, attrs) -> None:
        if not self.skipping and tag not in _DROPPED_WITH_CONTENT and not self._dropped(tag, attrs):
            self.out.append(f"<{tag}{self._attributes(attrs)}/>")

    def handle_endtag(self, tag) -> None:
        if self.skipping:
            if tag == self.skipping:
                self.skipping = None
            return
        if tag in _DROPPED_WITH_CONTENT | _DROPPED:
            return
        self.in_style = False
        self.out.append(f"</{tag}>")

    def handle_data(self, data) -> None:
        if self.skipping:
            return
        if self.in_style:
            self.out.append(_CSS_REMOTE.sub("", data).replace("</", "<\\/"))
        else:
            self.out.append(html.escape(printable(data, keep_newlines=True), quote=False))

    def handle_entityref(self, name) -> None:
        if not self.skipping:
            self.out.append(f"&{name};")

    def handle_charref(self, name) -> None:
        if not self.skipping:
            self.out.append(f"&#{name};")

    def handle_decl(self, decl) -> None:
        if decl.lower().startswith("doctype"):
            self.out.append(f"<!{decl}>")


def sanitize(page: str) -> str:
    """The page with its text and markup, minus scripts, event handlers and references outside the site."""
    parser = _Sanitiser()
    parser.feed(page)
    parser.close()
    return "".join(parser.out)


def _text(value: str) -> str:
    """A value as HTML text: escaped, its control characters shown."""
    return html.escape(printable(value, keep_newlines=True))


def write_index(result, path: Path, site_dir: Path) -> None:
    """A static page: the verdict, every check, and links to GX's validation and suite pages."""

    def link(target: Path, text: str) -> str:
        return f'<a href="{html.escape(os.path.relpath(target, path.parent))}">{_text(text)}</a>'

    rows = []
    for check in result.checks:
        outcome = "pass" if check.success else ("fail" if check.severity == "critical" else "warn")
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{cell}</td>"
                for cell in (
                    _text(check.suite),
                    f'<span class="{outcome}">{outcome.upper()}</span>',
                    _text(check.severity),
                    _text(check.title),
                    _text(check.observed),
                    _text(check.why),
                )
            )
            + "</tr>"
        )
    pages = [
        link(page, f"{page.parent.parent.parent.name} validation")
        for page in sorted(site_dir.glob("validations/*/*/*/*.html"))
    ]
    pages += [link(page, f"{page.stem} suite") for page in sorted(site_dir.glob("expectations/*.html"))]
    verdict = "PASSED" if result.passed else "FAILED"
    path.write_text(f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Data quality {_text(result.period)}: {verdict}</title>{OFFLINE_STYLE}</head>
<body>
<h1>Data quality for {_text(result.period)}: <span class="{"pass" if result.passed else "fail"}">{verdict}</span></h1>
<p>{len(result.checks)} checks, {len(result.failures)} critical failure(s), {len(result.warnings)} warning(s).
A critical failure stops <code>mpg report</code> from publishing; a warning is shown in the report.</p>
<p>Great Expectations Data Docs: {" · ".join(pages)}</p>
<table><thead><tr><th>suite</th><th>outcome</th><th>severity</th><th>check</th><th>observed</th><th>why, and why this threshold</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
</body></html>
""")
