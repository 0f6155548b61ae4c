"""The metric's specification, docs/metric.md, as a page published beside each report.

The report's pages link to its sections (the levers of each loss, the what-if
model of RG). docs/metric.md ships in the package (`fleet_goodput.docs`), and
each report gets its own copy rendered to HTML, so the links work for an
installed package as for a checkout, and wherever the report folder is
copied or served. Its headings get the anchors GitHub gives them, so one link
works on both.
"""

from __future__ import annotations

import re
from importlib import resources

import mistune
from mistune.toc import add_toc_hook

SPECIFICATION_PAGE = "metric.html"
LEVERS_SECTION = "6-what-each-loss-points-to"
MODEL_SECTION = "5-what-if-model-of-runtime-goodput"


def section_id(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def specification_markdown() -> str:
    return resources.files("fleet_goodput.docs").joinpath("metric.md").read_text(encoding="utf-8")


def specification_html() -> str:
    """The specification's body as HTML; any raw HTML in the Markdown shows as text."""
    markdown = mistune.create_markdown(escape=True, plugins=["table"])
    add_toc_hook(markdown, min_level=1, max_level=3, heading_id=lambda token, _index: section_id(token["text"]))
    return markdown(specification_markdown())
