"""Writing a period's report: OUTPUT/reports/<period>/index.html, a page per worst job
under jobs/, the figures as CSV, and the metric's specification (metric.html) the pages link to.

CSV cells are made safe for spreadsheets (spreadsheet.py).

The folder is built beside its final place and swapped in by renames, so a
reader sees the old report or the new one, never half of either, and a rerun
for the same period replaces it. Callers hold the period's lock (period.py),
which keeps two runs of one period from swapping at the same time.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from fleet_goodput.quality.batches import open_views
from fleet_goodput.quality.checked_run import CheckedRun
from fleet_goodput.quality.period import Period, period_lock
from fleet_goodput.quality.run import SUMMARY_FILE, QualityResult, quality_dir, validate_output
from fleet_goodput.report import figures as report_figures
from fleet_goodput.report.figures import job_detail, previous_period
from fleet_goodput.report.render import job_page_name, render_job, render_report, render_specification
from fleet_goodput.report.specification import SPECIFICATION_PAGE
from fleet_goodput.report.spreadsheet import write_csv

REPORTS_DIR = "reports"
REPORT_FILE = "index.html"


def report_dir(output_dir: str | Path, period: Period) -> Path:
    return Path(output_dir) / REPORTS_DIR / period.name


def validate_and_publish(
    run: CheckedRun, period: Period, require_complete: bool = False, dashboards: tuple[tuple[str, str], ...] = ()
) -> tuple[QualityResult, Path | None]:
    """Under the period's lock: validate the checked run, and publish it only if no critical check failed
    (else the path is None)."""
    with period_lock(run.output, period):
        quality = validate_output(run, period, require_complete)
        return quality, (publish_report(run, period, quality, dashboards) if quality.passed else None)


def publish_report(
    run: CheckedRun, period: Period, quality: QualityResult, dashboards: tuple[tuple[str, str], ...] = ()
) -> Path:
    """Compute the checked run's figures, write the page and CSVs to a temporary folder, swap it in;
    returns the page. `dashboards` (title, URL) are named on the page (the settings' `report:` section)."""
    if not quality.passed:
        raise ValueError("refusing to publish a report whose data failed validation")
    record, settings = run.committed(), run.settings
    manifest, run_id = record.manifest, record.run_id
    final = report_dir(run.output, period)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".{period.name}.tmp-{os.getpid()}"
    for stopped in final.parent.glob(f".{period.name}.tmp-*"):  # left by a report stopped (a full disk, Ctrl-C)
        shutil.rmtree(stopped, ignore_errors=True)
    (staging / "jobs").mkdir(parents=True)
    # The report is made from one committed run, named on the page, so it can be made again.
    with open_views(run) as connection:
        figures = report_figures.collect(connection, period)
        for job in figures["top_jobs"]:
            page = render_job(
                job_detail(connection, period, job["job_id"]), period_name=period.name, window_s=settings.window_s
            )
            (staging / job_page_name(job["job_id"])).write_text(page, encoding="utf-8")
    csv_files = []
    for name, rows in figures.items():
        write_csv(staging / f"{name}.csv", rows)
        csv_files.append(f"{name}.csv")
    summary_path = quality_dir(run.output, period) / SUMMARY_FILE
    shutil.copy(summary_path, staging / "quality.json")
    page = render_report(
        figures,
        period_name=period.name,
        previous_name=previous_period(period).name,
        days=period.days,
        as_of=manifest.get("as_of") or "unknown",
        run_id=run_id,
        complete=(manifest.get("as_of_us") or 0) >= period.end_s * 1_000_000,
        output=str(run.output),
        quality=json.loads(summary_path.read_text()),
        quality_link=os.path.relpath(quality.docs_index, final),
        csv_files=csv_files,
        clock=manifest.get("clock"),
        dashboards=dashboards,
    )
    (staging / REPORT_FILE).write_text(page, encoding="utf-8")
    (staging / SPECIFICATION_PAGE).write_text(render_specification(period_name=period.name), encoding="utf-8")
    _swap_in(staging, final)
    return final / REPORT_FILE


def _swap_in(staging: Path, final: Path) -> None:
    retired = final.parent / f".{final.name}.old-{os.getpid()}"
    if final.exists():
        os.replace(final, retired)
    os.replace(staging, final)
    shutil.rmtree(retired, ignore_errors=True)
