"""The report as one self-contained HTML page: inline CSS, inline SVG charts, no network.

One small inline script (no library) runs after layout and records on
<body> how many charts the browser drew with a non-empty box, so a headless
browser test can tell that the charts rendered, not just that markup exists.
"""

from __future__ import annotations

from html import escape

from fleet_goodput.report import svg
from fleet_goodput.report.figures import BADPUT, DIMENSIONS

FACTORS = ("sg", "rg", "pg", "mpg")
LEVERS = {  # MPG.md section 6
    "queued": "reservations and hot spares; topology-aware packing and defragmentation; preemption policy by job size",
    "partial": "reservations and hot spares; topology-aware packing and defragmentation; preemption policy by job size",
    "idle_capacity": "packing small jobs into fragments; capacity planning per accelerator generation",
    "init": "persistent compilation cache, ahead-of-time compilation, container/model pre-loading",
    "compile": "persistent compilation cache, ahead-of-time compilation, container/model pre-loading",
    "checkpoint_save": "asynchronous checkpointing; interval near C* (see checkpoint advice)",
    "checkpoint_restore": "auto-checkpoint on the preemption signal; a shorter interval; faster restore",
    "lost": "auto-checkpoint on the preemption signal; a shorter interval; faster restore",
    "data_wait": "asynchronous, prefetching input pipelines; more host CPU per chip",
    "idle": "chips held while the job reports nothing: check its runtime telemetry, release idle allocations",
    "pending": "step time not yet preserved at the as-of time: neither good nor bad yet",
}
_CSS = """
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1em 2em;color:#222}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:right}
td:first-child,th:first-child,td.text,th.text{text-align:left}th{background:#f5f5f5}
.headline{display:flex;gap:2em;flex-wrap:wrap}.factor{font-size:28px;font-weight:600}.label{color:#666;font-size:13px}
.pass{color:#1b7f3b}.fail{color:#b00020}.warn{color:#9a6700}.note{color:#555;font-size:13px}
.charts{display:flex;flex-wrap:wrap;gap:1em}
"""
_DRAW_CHECK = """<script>
window.addEventListener('load', function () {
  var charts = document.querySelectorAll('svg.chart'), drawn = 0;
  charts.forEach(function (chart) {
    var marks = Array.prototype.filter.call(chart.querySelectorAll('.mark'), function (mark) {
      var box = mark.getBBox(); return box.width > 0 || box.height > 0;
    });
    chart.setAttribute('data-drawn-marks', marks.length);
    if (marks.length > 0) drawn += 1;
  });
  document.body.setAttribute('data-charts', charts.length);
  document.body.setAttribute('data-charts-drawn', drawn);
});
</script>"""


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _num(value, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}" if isinstance(value, float) else escape(str(value))


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """columns: (key, heading, kind) with kind 'text', 'pct', 'num' or 'int'."""
    if not rows:
        return '<p class="note">No rows for this period.</p>'
    head = "".join(f'<th class="{kind}">{escape(heading)}</th>' for _, heading, kind in columns)
    body = []
    for row in rows:
        cells = []
        for key, _, kind in columns:
            value = row.get(key)
            text = {"pct": _pct, "num": _num, "int": lambda v: _num(v, 0)}.get(kind, lambda v: escape(str(v)))(value)
            cells.append(f'<td class="{kind}">{text}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_FACTOR_COLUMNS = [("sg", "SG", "pct"), ("rg", "RG", "pct"), ("pg", "PG", "pct"), ("mpg", "MPG", "pct"),
                   ("pg_coverage", "PG coverage", "pct")]


def _headline(total: dict) -> str:
    cells = [f'<div><div class="label">{label}</div><div class="factor">{_pct(total.get(key))}</div></div>'
             for key, label in (("mpg", "Fleet MPG"), ("sg", "SG"), ("rg", "RG"), ("pg", "PG"),
                                ("pg_coverage", "PG coverage"))]
    return (f'<div class="headline">{"".join(cells)}</div><p class="note">MPG = SG × RG × PG on the capacity base '
            f'({_num(total.get("capacity_chip_h"), 0)} chip-hours online); every factor is a ratio of sums. '
            f'PG covers only the productive time with a profile (PG coverage).</p>')


def _trend(days: list[dict]) -> str:
    labels = [d["day"] for d in days]
    chart = svg.line_chart("fleet_trend", "Fleet SG, RG, PG and MPG per day", labels,
                           {f.upper(): [d[f] for d in days] for f in FACTORS},
                           colours=[svg.FACTOR_COLOURS[f.upper()] for f in FACTORS])
    return chart + table(days, [("day", "day", "text"), *_FACTOR_COLUMNS, ("capacity_chip_h", "capacity chip-h", "num"),
                                ("all_allocated_chip_h", "all-allocated chip-h", "num")])


def _segment(dimension: str, rows: list[dict], by_day: list[dict], days: list[str]) -> str:
    groups = [str(r[dimension]) for r in rows]
    parts = [f"<h3>By {dimension.replace('_', ' ')}</h3>", '<div class="charts">',
             svg.grouped_bars(f"by_{dimension}", f"SG, RG, PG, MPG by {dimension.replace('_', ' ')} (demand base)",
                              groups, {f.upper(): [r[f] for r in rows] for f in FACTORS})]
    if len(days) > 1:
        series = {g: [next((r["mpg"] for r in by_day if str(r[dimension]) == g and r["day"] == d), None) for d in days]
                  for g in groups}
        parts.append(svg.line_chart(f"by_{dimension}_trend", f"MPG per day by {dimension.replace('_', ' ')}",
                                    days, series))
    parts.append("</div>")
    parts.append(table(rows, [(dimension, dimension, "text"), ("jobs", "jobs", "int"), *_FACTOR_COLUMNS,
                              ("lifetime_chip_h", "demand chip-h", "num"), ("productive_chip_h", "productive chip-h", "num")]))
    return "\n".join(parts)


def _badput(rows: list[dict]) -> str:
    shown = [r for r in rows if r["chip_h"] > 0]
    chart = svg.stacked_bars("badput", "Where the chip-hours went (badput)", [r["category"] for r in shown],
                             [{r["category"]: r["chip_h"]} for r in shown], [r["category"] for r in shown], legend=False)
    rows = [{**row, "lever": LEVERS.get(row["category"], "")} for row in rows]
    return chart + table(rows, [("category", "category", "text"), ("chip_h", "chip-hours", "num"),
                                ("share", "share of base", "pct"), ("base", "base", "text"), ("lever", "levers (MPG.md §6)", "text")])


def _top_jobs(rows: list[dict]) -> str:
    chart = svg.stacked_bars("top_jobs", "Jobs that lost the most chip-hours, by cause", [r["job_id"] for r in rows],
                             rows, list(BADPUT))
    return chart + table(rows, [("job_id", "job", "text"), ("team", "team", "text"), ("workload", "workload", "text"),
                                ("accelerator", "accelerator", "text"), ("chips", "chips", "int"),
                                ("badput_chip_h", "badput chip-h", "num"), ("lifetime_chip_h", "demand chip-h", "num"),
                                ("top_cause", "mostly to", "text")])


def _advice(rows: list[dict]) -> str:
    minutes = ("interval_s", "mtbf_s", "best_interval_s")
    rows = [{**row, **{f"{k}_min": None if row[k] is None else row[k] / 60 for k in minutes}} for row in rows]
    note = ("<p class=\"note\">Per training class, from whole job lives of the jobs alive in the period "
            "(MPG.md §5): C* ≈ √(2·s·M) and RG ≈ (1 − s/C)(M − C/2)/(M + t<sub>rm</sub>). Measured: save time, lost "
            "time, step time, restore time, all-allocated time. <b>Estimated</b>, because the tables keep chip-time "
            "and not counts of saves: disruptions = restarts (allocations − 1) + failed jobs; the current interval "
            "C ≈ 2 × lost time / disruptions (a disruption loses half an interval on average); s = save time × C / "
            "step time; M = all-allocated time / disruptions; t<sub>rm</sub> = restore time / disruptions. "
            "Recoverable chip-hours = all-allocated chip-hours × (RG(C*) − RG(C)).</p>")
    return note + table(rows, [
        ("accelerator", "accelerator", "text"), ("size_class", "size class", "text"), ("jobs", "jobs", "int"),
        ("disruptions", "disruptions", "int"), ("save_cost_s", "s (s)", "num"), ("interval_s_min", "C now ≈ (min)", "num"),
        ("mtbf_s_min", "M (min)", "num"), ("resume_s", "t_rm (s)", "num"), ("best_interval_s_min", "C* (min)", "num"),
        ("rg_now", "model RG now", "pct"), ("rg_best", "model RG at C*", "pct"),
        ("recoverable_chip_h", "recoverable chip-h", "num"), ("save_overhead", "save / step time", "pct"),
        ("advice", "advice", "text")])


def _quality(quality: dict, quality_link: str) -> str:
    checks = quality["checks"]
    failed = [c for c in checks if not c["success"]]
    verdict = '<span class="pass">PASSED</span>' if quality["passed"] else '<span class="fail">FAILED</span>'
    rows = [{"suite": c["suite"], "severity": c["severity"], "title": c["title"], "observed": c["observed"]} for c in failed]
    suites = {}
    for check in checks:
        counts = suites.setdefault(check["suite"], {"suite": check["suite"], "checks": 0, "passed": 0})
        counts["checks"] += 1
        counts["passed"] += int(check["success"])
    return (f"<p>Checked against {len(checks)} Great Expectations checks: {verdict}, {len(failed)} not met "
            f"(warnings do not block publishing). Details: <a href=\"{escape(quality_link)}\">data-quality index</a>.</p>"
            + table(list(suites.values()), [("suite", "suite", "text"), ("checks", "checks", "int"), ("passed", "passed", "int")])
            + ("<h3>Warnings</h3>" + table(rows, [("suite", "suite", "text"), ("severity", "severity", "text"),
                                                    ("title", "check", "text"), ("observed", "observed", "text")])
               if rows else ""))


def render(figures: dict[str, list[dict]], *, period_name: str, days: list[str], as_of: str, complete: bool,
           output: str, quality: dict, quality_link: str, csv_files: list[str]) -> str:
    total = figures["fleet_total"][0]
    partial = "" if complete else (f'<p class="warn"><b>Partial period:</b> the data runs to {escape(as_of)}, '
                                   f'before the end of the period.</p>')
    sections = [
        f"<h1>Fleet goodput report: {escape(period_name)}</h1>",
        f'<p class="note">Data as of {escape(as_of)} from <code>{escape(output)}</code>. '
        f'Data quality: {"passed" if quality["passed"] else "FAILED"} (see the last section).</p>', partial,
        "<h2>Fleet ML Productivity Goodput</h2>", _headline(total),
        "<h2>Trend per day</h2>", _trend(figures["fleet_by_day"]),
        "<h2>By segment</h2>",
        '<p class="note">Segments use the demand base (requested chips × job lifetime), so SG blames queueing and '
        'partial allocation of the jobs in the segment, not idle fleet capacity.</p>',
        *(_segment(d, figures[f"by_{d}"], figures[f"by_{d}_by_day"], days) for d in DIMENSIONS),
        "<h2>Badput breakdown</h2>", _badput(figures["badput"]),
        "<h2>Jobs that lost the most chip-hours</h2>", _top_jobs(figures["top_jobs"]),
        "<h2>Checkpoint-interval advice</h2>", _advice(figures["checkpoint_advice"]),
        "<h2>PG coverage</h2>",
        '<p class="note">PG is measured only on productive time with a profiler sample; where coverage is low, '
        'PG (and MPG) describe a minority of the work.</p>',
        table(figures["pg_coverage"], [("accelerator", "accelerator", "text"), ("workload", "workload", "text"),
                                       ("jobs", "jobs", "int"), ("productive_chip_h", "productive chip-h", "num"),
                                       ("profiled_chip_h", "profiled chip-h", "num"), ("pg_coverage", "PG coverage", "pct"),
                                       ("pg", "PG", "pct")]),
        "<h2>Data quality</h2>", _quality(quality, quality_link),
        "<h2>Figures as CSV</h2>",
        "<p>" + " · ".join(f'<a href="{escape(name)}">{escape(name)}</a>' for name in csv_files) + "</p>",
    ]
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<title>Fleet goodput {escape(period_name)}</title><style>{_CSS}</style></head>\n<body>\n'
            + "\n".join(sections) + f"\n{_DRAW_CHECK}\n</body></html>\n")
