"""The report's pages from jinja2 templates (templates/), with autoescaping on.

`render_report` lays out the period's figures; `render_job` one job's page;
`render_specification` the metric's specification that both link to.
Both only arrange rows and chart geometry (charts.py) for the templates:
every string from the data reaches the page through autoescaping, so a job id
or team like `<script>` shows as text. Pages are self-contained: inline CSS,
inline SVG, a few lines of inline script, nothing fetched. Autoescaping
leaves control characters alone, so every value first shows them as `\\xNN`
(safe_text.py): the page's text and its source, read in a terminal, obey none.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from datetime import timezone
from importlib.metadata import version

import jinja2
import markupsafe

from fleet_goodput.report import charts
from fleet_goodput.report.figures import BADPUT, DIMENSIONS, FACTORS, QUEUE_DIMENSIONS, SHOWN_CATEGORIES
from fleet_goodput.report.specification import LEVERS_SECTION, MODEL_SECTION, SPECIFICATION_PAGE, specification_html
from fleet_goodput.report.units import chip_time
from fleet_goodput.safe_text import printable

LEVERS = {  # docs/metric.md section 6
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
    "unmeasured": "held time no runtime telemetry describes (a scheduler alone): add the runtime stream (the recorder, "
    "training logs) to see what the chips did; meanwhile the scheduling levers above apply",
    "productive": "",
}
FACTOR_COLUMNS = [
    ("sg", "SG", "pct"),
    ("rg", "RG", "pct"),
    ("pg", "PG", "pct"),
    ("mpg", "MPG", "pct"),
    ("pg_coverage", "PG coverage", "pct"),
]


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _pp(value) -> str:
    """A change of a ratio in percentage points."""
    return "n/a" if value is None else f"{value * 100:+.1f} pp"


def _trend(value) -> str:
    return "" if value is None or abs(value) < 5e-4 else ("up" if value > 0 else "down")


def _utc(value) -> str:
    return "n/a" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _num(value, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else str(value)


def _chip_h(chip_hours) -> str:
    """Chip-hours in the unit of their size (fleet_goodput/report/units.py): a small job's few chip-minutes
    do not print as 0.0 chip-hours."""
    return chip_time(None if chip_hours is None else chip_hours * 3600)


def _shown(value):
    """Every value a template prints (jinja2's `finalize`), its control characters shown; markup stays markup."""
    if isinstance(value, markupsafe.Markup):
        return markupsafe.Markup(printable(value, keep_newlines=True))
    return printable(value) if isinstance(value, str) else value


_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("fleet_goodput.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    finalize=_shown,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENVIRONMENT.filters.update(pct=_pct, pp=_pp, trend=_trend, num=_num, utc=_utc, shell=shlex.quote, chip_h=_chip_h)


def job_page_name(job_id: str) -> str:
    """A file name for a job's page that no job id can turn into a path or a clash: a readable
    slug plus a hash of the id."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", job_id).strip("._")[:48] or "job"
    return f"jobs/{slug}-{hashlib.sha256(job_id.encode()).hexdigest()[:10]}.html"


def _factor_series(rows: list[dict]) -> dict[str, list]:
    return {f.upper(): [r[f] for r in rows] for f in FACTORS}


def _trend_section(figures: dict, days: list[str]) -> dict:
    if len(days) == 1:
        rows = figures["fleet_by_window"]
        labels = [r["window_start"][11:16] for r in rows]
        heading, key, title = "Trend per hour", "window_start", "Fleet SG, RG, PG and MPG per window (UTC)"
    else:
        rows = figures["fleet_by_day"]
        labels = [r["day"] for r in rows]
        heading, key, title = "Trend per day", "day", "Fleet SG, RG, PG and MPG per day"
    chart = charts.line_chart(
        "fleet_trend", title, labels, _factor_series(rows), colours=[charts.FACTOR_COLOURS[f.upper()] for f in FACTORS]
    )
    columns = [
        (key, key.replace("_", " "), "text"),
        *FACTOR_COLUMNS,
        ("capacity_chip_h", "capacity", "chip_h"),
        ("all_allocated_chip_h", "all-allocated", "chip_h"),
    ]
    return {"trend_heading": heading, "trend_chart": chart, "trend_rows": rows, "trend_columns": columns}


def _by_day_lines(name: str, title: str, rows: list[dict], key: str, days: list[str]) -> charts.Chart | None:
    """MPG per day, one line per group; None for a one-day period (a line needs two days)."""
    if len(days) < 2:
        return None
    groups = sorted({str(r[key]) for r in rows})
    mpg = {(str(r[key]), r["day"]): r["mpg"] for r in rows}
    return charts.line_chart(name, title, days, {g: [mpg.get((g, d)) for d in days] for g in groups}, width=charts.HALF)


def _bar_width(days: list[str]) -> int:
    """Bars share the row with a trend of days; a one-day period has no such trend, so they take the row."""
    return charts.HALF if len(days) > 1 else charts.FULL


def _cluster_section(figures: dict, days: list[str]) -> dict:
    rows = [{**r, "where": f"{r['cluster']} / {r['accelerator']}"} for r in figures["by_cluster"]]
    labels = [r["where"] for r in rows]
    return {
        "clusters": rows,
        "cluster_bars": charts.bar_groups(
            "by_cluster",
            "SG, RG, PG, MPG by cluster (capacity base)",
            labels,
            _factor_series(rows),
            width=_bar_width(days),
        ),
        "cluster_trend": _by_day_lines(
            "by_cluster_trend", "MPG per day by cluster (capacity base)", figures["by_cluster_by_day"], "cluster", days
        ),
        "cluster_columns": [
            ("cluster", "cluster", "text"),
            ("accelerator", "accelerator", "text"),
            *FACTOR_COLUMNS,
            ("mpg_change", "Δ MPG", "pp"),
            ("capacity_chip_h", "capacity", "chip_h"),
            ("held_chip_h", "held", "chip_h"),
            ("idle_capacity_chip_h", "idle capacity", "chip_h"),
            ("idle_share", "idle share", "pct"),
        ],
    }


def _segment_sections(figures: dict, days: list[str]) -> list[dict]:
    sections = []
    for dimension in DIMENSIONS:
        words = dimension.replace("_", " ")
        rows = figures[f"by_{dimension}"]
        if dimension in QUEUE_DIMENSIONS and all(r[dimension] == "UNKNOWN" for r in rows):
            continue  # a fleet whose scheduler names no queue: a section of one UNKNOWN row says nothing
        sections.append(
            {
                "dimension": dimension,
                "heading": f"By {words}",
                "rows": rows,
                "bars": charts.bar_groups(
                    f"by_{dimension}",
                    f"SG, RG, PG, MPG by {words} (demand base)",
                    [str(r[dimension]) for r in rows],
                    _factor_series(rows),
                    width=_bar_width(days),
                ),
                "trend": _by_day_lines(
                    f"by_{dimension}_trend",
                    f"MPG per day by {words}",
                    figures[f"by_{dimension}_by_day"],
                    dimension,
                    days,
                ),
                "columns": [
                    (dimension, words, "text"),
                    ("jobs", "jobs", "int"),
                    *FACTOR_COLUMNS,
                    ("mpg_change", "Δ MPG", "pp"),
                    ("lifetime_chip_h", "demand", "chip_h"),
                    ("productive_chip_h", "productive", "chip_h"),
                ],
            }
        )
    return sections


def _breakdown_sections(figures: dict) -> dict:
    demand = [{**r, "lever": LEVERS.get(r["category"], "")} for r in figures["demand_breakdown"]]
    shown = [r for r in demand if (r["chip_h"] or 0) > 0]
    capacity = figures["capacity_breakdown"]
    return {
        "demand_chart": charts.stacked_bars(
            "demand_breakdown",
            "Jobs' chip-hours by category (demand base)",
            [r["category"] for r in shown],
            [{r["category"]: r["chip_h"]} for r in shown],
            [r["category"] for r in shown],
            legend=False,
        ),
        "demand_rows": demand,
        "demand_columns": [
            ("category", "category", "text"),
            ("chip_h", "chip-time", "chip_h"),
            ("share", "share of demand", "pct"),
            ("lever", "levers (§6)", "wide"),
        ],
        "capacity_chart": charts.stacked_bars(
            "capacity_breakdown",
            "Chips online by cluster: held and idle capacity (capacity base)",
            [f"{r['cluster']} / {r['accelerator']}" for r in capacity],
            [{"held": r["held_chip_h"], "idle_capacity": r["idle_capacity_chip_h"]} for r in capacity],
            ["held", "idle_capacity"],
        ),
        "capacity_rows": [{**r, "lever": LEVERS["idle_capacity"]} for r in capacity],
        "capacity_columns": [
            ("cluster", "cluster", "text"),
            ("accelerator", "accelerator", "text"),
            ("capacity_chip_h", "capacity", "chip_h"),
            ("held_chip_h", "held", "chip_h"),
            ("idle_capacity_chip_h", "idle capacity", "chip_h"),
            ("idle_share", "idle share", "pct"),
            ("lever", "levers (§6)", "wide"),
        ],
    }


def _top_jobs_section(figures: dict) -> dict:
    rows = [{**r, "page": job_page_name(r["job_id"])} for r in figures["top_jobs"]]
    return {
        "top_jobs": rows,
        "top_jobs_chart": charts.stacked_bars(
            "top_jobs", "Jobs that lost the most chip-hours, by cause", [r["job_id"] for r in rows], rows, list(BADPUT)
        ),
        "top_job_columns": [
            ("job_id", "job", "job"),
            ("team", "team", "text"),
            ("workload", "workload", "text"),
            ("cluster", "cluster", "text"),
            ("accelerator", "accelerator", "text"),
            ("chips", "chips", "int"),
            ("badput_chip_h", "badput", "chip_h"),
            ("lifetime_chip_h", "demand", "chip_h"),
            ("top_cause", "mostly to", "text"),
            ("unended_runs", "runs without an end", "int"),
        ],
    }


def _advice_section(figures: dict) -> dict:
    minutes = ("interval_s", "mtbf_s", "best_interval_s")
    rows = [
        {**r, **{f"{k}_min": None if r[k] is None else r[k] / 60 for k in minutes}}
        for r in figures["checkpoint_advice"]
    ]
    return {
        "advice": rows,
        "advice_columns": [
            ("accelerator", "accelerator", "text"),
            ("size_class", "size class", "text"),
            ("jobs", "jobs", "int"),
            ("disruptions", "disruptions", "int"),
            ("mtbf_s_min", "M (min)", "num"),
            ("interval_s_min", "C now (min)", "num"),
            ("best_interval_s_min", "C* (min)", "num"),
            ("recoverable_chip_h", "recoverable", "chip_h"),
            ("advice", "advice", "wide"),
        ],
        "advice_model_columns": [
            ("accelerator", "accelerator", "text"),
            ("size_class", "size class", "text"),
            ("interval_source", "C and s from", "text"),
            ("saves", "saves", "int"),
            ("save_cost_s", "s (s)", "num"),
            ("resume_s", "t_rm (s)", "num"),
            ("rg_now", "model RG at C now", "pct"),
            ("rg_best", "model RG at C*", "pct"),
            ("save_overhead", "save / step time", "pct"),
        ],
    }


def _quality_section(quality: dict) -> dict:
    suites: dict[str, dict] = {}
    for check in quality["checks"]:
        counts = suites.setdefault(check["suite"], {"suite": check["suite"], "checks": 0, "passed": 0})
        counts["checks"] += 1
        counts["passed"] += int(check["success"])
    failed = [
        {k: c[k] for k in ("suite", "severity", "title", "observed")} for c in quality["checks"] if not c["success"]
    ]
    return {"quality_suites": list(suites.values()), "quality_failed": failed}


def render_report(
    figures: dict[str, list[dict]],
    *,
    period_name: str,
    previous_name: str,
    days: list[str],
    as_of: str,
    complete: bool,
    output: str,
    quality: dict,
    quality_link: str,
    run_id: int | None,
    csv_files: list[str],
    clock: dict | None = None,
    dashboards: tuple[tuple[str, str], ...] = (),
) -> str:
    clock = clock or {}
    context = {
        "dashboards": [{"title": title, "url": url} for title, url in dashboards],
        "period_name": period_name,
        "previous_name": previous_name,
        "as_of": as_of,
        "complete": complete,
        "clock_basis": clock.get("basis"),
        "observed": [
            {"cluster": cluster, "from": period["from"], "to": period["to"]}
            for cluster, period in sorted((clock.get("observed") or {}).items())
        ],
        "run_id": run_id,
        "output": output,
        "quality": quality,
        "quality_link": quality_link,
        "csv_files": csv_files,
        "levers_link": f"{SPECIFICATION_PAGE}#{LEVERS_SECTION}",
        "model_link": f"{SPECIFICATION_PAGE}#{MODEL_SECTION}",
        "specification_link": SPECIFICATION_PAGE,
        "total": figures["fleet_total"][0],
        "pg_coverage": figures["pg_coverage"],
        "pg_coverage_columns": [
            ("accelerator", "accelerator", "text"),
            ("workload", "workload", "text"),
            ("jobs", "jobs", "int"),
            ("productive_chip_h", "productive", "chip_h"),
            ("profiled_chip_h", "profiled", "chip_h"),
            ("pg_coverage", "PG coverage", "pct"),
            ("pg", "PG", "pct"),
        ],
        "interruptions": figures["interruptions"],
        "interruption_columns": [
            ("cause", "cause", "text"),
            ("reason", "reason", "wide"),
            ("queue", "queue", "text"),
            ("cluster", "cluster", "text"),
            ("accelerator", "accelerator", "text"),
            ("interruptions", "interruptions", "int"),
            ("jobs", "jobs", "int"),
            ("mean_run_s", "mean run before (s)", "num"),
            ("mean_restart_s", "mean time to restart (s)", "num"),
            ("p90_restart_s", "p90 time to restart (s)", "num"),
            ("lost_chip_h", "work lost", "chip_h"),
            ("recovery_chip_h", "recovery", "chip_h"),
            ("cost_chip_h", "cost", "chip_h"),
        ],
        # Shown where the scheduler names queues (a Slurm partition, a Kueue queue): one UNKNOWN row says nothing.
        "queues": [] if all(r["queue"] == "UNKNOWN" for r in figures["queues"]) else figures["queues"],
        "queue_columns": [
            ("cluster_queue", "cluster queue", "text"),
            ("queue", "queue", "text"),
            ("submitted", "submitted", "int"),
            ("started", "started", "int"),
            ("mean_wait_s", "mean wait (s)", "num"),
            ("p50_wait_s", "median wait (s)", "num"),
            ("p90_wait_s", "p90 wait (s)", "num"),
            ("waiting", "waiting at the as-of time", "int"),
            ("interruptions", "interruptions", "int"),
            ("cost_chip_h", "their cost", "chip_h"),
        ],
        "segments": _segment_sections(figures, days),
        **_trend_section(figures, days),
        **_cluster_section(figures, days),
        **_breakdown_sections(figures),
        **_top_jobs_section(figures),
        **_advice_section(figures),
        **_quality_section(quality),
    }
    return _ENVIRONMENT.get_template("report.html.j2").render(context)


def render_job(detail: dict, *, period_name: str, window_s: int) -> str:
    """One job's page: its whole-life factors, its timeline strip and its chip-hours by category in the period."""
    life, spent = detail["life"], detail["in_period"]
    demand = sum(spent.values())
    where = [
        {"category": c, "chip_h": spent[c], "share": spent[c] / demand if demand else None, "lever": LEVERS.get(c, "")}
        for c in sorted(SHOWN_CATEGORIES, key=lambda c: -spent[c])
        if spent[c] > 0
    ]
    context = {
        "job": life,
        "period_name": period_name,
        "levers_link": f"../{SPECIFICATION_PAGE}#{LEVERS_SECTION}",
        "interruptions": detail.get("interruptions", []),
        "window_label": f"{window_s // 60}-minute" if window_s % 3600 else f"{window_s // 3600}-hour",
        "timeline": charts.timeline(
            "job_timeline", "Categories over time (UTC)", detail["windows"], list(SHOWN_CATEGORIES)
        ),
        "where_chart": charts.stacked_bars(
            "job_where",
            "Chip-hours by category in the period",
            [r["category"] for r in where],
            [{r["category"]: r["chip_h"]} for r in where],
            [r["category"] for r in where],
            legend=False,
        ),
        "where_rows": where,
    }
    return _ENVIRONMENT.get_template("job.html.j2").render(context)


def render_specification(*, period_name: str) -> str:
    """docs/metric.md as the page the report's links point to (specification.py)."""
    return _ENVIRONMENT.get_template("specification.html.j2").render(
        period_name=period_name, version=version("fleet-goodput"), body=markupsafe.Markup(specification_html())
    )
