"""Great Expectations page views that render Data Docs safe for hostile data and readable offline.

GX renders a table cell that is a plain value (the unexpected values of a
failed expectation: event ids, teams, whatever the data holds) as raw HTML, so
an `event_id` of `<script>...</script>` ran in the `rejected` page. Its pages
also pull Bootstrap, jQuery, Vega and a logo from CDNs, and its index page
lists validation runs with a JavaScript table that stays empty (Status
column blank) without them.

These views replace GX's default ones through the Data Docs site
configuration (`DATA_DOCS_SITE`, stored in the project's great_expectations.yml),
so pages rebuilt later with GX's own `context.build_data_docs()` get the same
treatment:

- a plain value in a table cell is HTML-escaped, so it shows as text;
- two templates are replaced: `js_script_imports.j2` (no CDN scripts or
  stylesheets) and `bootstrap_table.j2` (a static table, the status as text);
- a validation page's Status column says `passed` or `failed` and the
  check's severity in words (`StatusAsTextTable`): GX draws it as a Font
  Awesome icon, an empty element once the icon font is not loaded, so a
  failed check looked like a passed one;
- every rendered page goes through `docs.sanitize`: no script, no event
  handler, no external URL, whatever a renderer let through.
"""

from __future__ import annotations

import html

# GX has no public API for changing how Data Docs pages render: its one hook is a site configuration that
# names view and renderer classes by module and class (DATA_DOCS_SITE below), and such classes can only be
# subclasses of the internals imported here, whose names, signatures and templates GX does not promise
# to keep; pyproject.toml pins the GX versions these were tested with.
from great_expectations.render.components import RenderedStringTemplateContent
from great_expectations.render.renderer.content_block import ValidationResultsTableContentBlockRenderer
from great_expectations.render.view.view import DefaultJinjaIndexPageView, DefaultJinjaPageView
from jinja2 import BytecodeCache, ChoiceLoader, DictLoader, pass_context

from fleet_goodput.quality.docs import OFFLINE_STYLE, sanitize

_TEMPLATES = {
    "js_script_imports.j2": OFFLINE_STYLE,
    # A row's status as text and a link to its page; other cells as the text of
    # what GX rendered for them (their markup is tooltips and links for scripts).
    "bootstrap_table.j2": """{% include 'content_block_header.j2' %}
<table class="table table-sm ge-static-table">
<thead><tr>{% for column in content_block["table_columns"] %}<th>{{ column["title"] | e }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in content_block["table_data"] %}<tr>
{%- for column in content_block["table_columns"] %}
{%- set field = column["field"] %}
{%- if field == "validation_success" %}{% set text = row.get("_validation_success_text", "") %}
{%- elif row.get("_" ~ field ~ "_sort") is string %}{% set text = row["_" ~ field ~ "_sort"] %}
{%- else %}{% set text = (row.get(field, "") | string | striptags) %}{% endif %}
<td>{% if (loop.first or field == "validation_success") and row.get("_table_row_link_path") -%}
<a href="{{ row["_table_row_link_path"] | e }}">{{ text | e }}</a>{% else %}{{ text | e }}{% endif %}</td>
{%- endfor %}</tr>
{% endfor %}</tbody>
</table>
""",
}


class _CompiledTemplates(BytecodeCache):
    """GX makes a Jinja environment for every page it renders, so each page compiled its templates again;
    this keeps each template's compiled code for the process (keyed by Jinja on the template's source)."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket) -> None:
        if bucket.key in self._code:
            bucket.bytecode_from_string(self._code[bucket.key])

    def dump_bytecode(self, bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_COMPILED = _CompiledTemplates()


def _is_content_block(value) -> bool:
    return isinstance(value, dict) and "content_block_type" in value


class OfflinePageView(DefaultJinjaPageView):
    """GX's page view with plain values escaped, no remote assets, and every page sanitised."""

    def __init__(self, custom_styles_directory=None, custom_views_directory=None) -> None:
        super().__init__(custom_styles_directory, custom_views_directory)
        self.env.loader = ChoiceLoader([DictLoader(_TEMPLATES), self.env.loader])
        self.env.bytecode_cache = _COMPILED
        self.env.filters["render_content_block"] = self.render_content_block

    @pass_context
    def render_content_block(
        self, jinja_context, content_block, index=None, content_block_id=None, render_to_markdown: bool = False
    ):
        # A string or a list of non-block values reaching a cell is data (GX
        # builds its own markup as content blocks): escape it, and let GX wrap it.
        if isinstance(content_block, str):
            content_block = html.escape(content_block)
        elif isinstance(content_block, list | tuple):
            content_block = [
                value
                if _is_content_block(value) or not isinstance(value, str | list | tuple | dict)
                else html.escape(str(value))
                for value in content_block
            ]
        return super().render_content_block(jinja_context, content_block, index, content_block_id, render_to_markdown)

    def render(self, document, template=None, **kwargs) -> str:
        return sanitize(super().render(document, template, **kwargs))


class OfflineIndexPageView(OfflinePageView):
    _template = DefaultJinjaIndexPageView._template


def status_text(result) -> tuple[str, str]:
    """(text, style class) of one validation result: its outcome and its expectation's severity."""
    severity = getattr(result.expectation_config.severity, "value", result.expectation_config.severity)
    if any(info.get("raised_exception") for info in _exception_infos(result)):
        return f"error ({severity})", "fail"
    if result.success:
        return f"passed ({severity})", "pass"
    return f"failed ({severity})", "fail" if severity == "critical" else "warn"


def _exception_infos(result) -> list[dict]:
    # GX keeps one exception_info, or one per metric when several were computed.
    info = result.exception_info or {}
    return [info] if "raised_exception" in info else [v for v in info.values() if isinstance(v, dict)]


class StatusAsTextTable(ValidationResultsTableContentBlockRenderer):
    """GX's table of a validation page, its Status cell the outcome and severity in words."""

    @classmethod
    def _get_content_block_fn(cls, expectation_type, expectation_config=None):
        row_fn = super()._get_content_block_fn(expectation_type, expectation_config)

        def row_with_status_text(configuration=None, result=None, runtime_configuration=None, **kwargs):
            rows = row_fn(
                configuration=configuration, result=result, runtime_configuration=runtime_configuration, **kwargs
            )
            text, style = status_text(result)
            rows[0][0] = RenderedStringTemplateContent(
                content_block_type="string_template",
                string_template={
                    "template": "$status",
                    "params": {"status": text},
                    "styling": {"params": {"status": {"classes": [style]}}},
                },
            )
            return rows

        return row_with_status_text


def _view(class_name: str) -> dict:
    return {"module_name": __name__, "class_name": class_name}


DATA_DOCS_SITE = {
    "class_name": "SiteBuilder",
    "show_how_to_buttons": False,
    "store_backend": {
        "class_name": "TupleFilesystemStoreBackend",
        "base_directory": "uncommitted/data_docs/local_site/",
    },
    "site_index_builder": {"class_name": "DefaultSiteIndexBuilder", "view": _view("OfflineIndexPageView")},
    "site_section_builders": {
        "expectations": {"view": _view("OfflinePageView")},
        # GX merges this into its default section: the same page renderer, with our table.
        "validations": {
            "view": _view("OfflinePageView"),
            "renderer": {
                "class_name": "ValidationResultsPageRenderer",
                "column_section_renderer": {
                    "class_name": "ValidationResultsColumnSectionRenderer",
                    "table_renderer": _view("StatusAsTextTable"),
                },
            },
        },
        "profiling": {"view": _view("OfflinePageView")},
    },
}
