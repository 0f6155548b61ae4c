"""Running the suites with Great Expectations and summarising what they found.

Each period gets its own GX project, OUTPUT/quality/<period>/gx/, recreated on
every run so a rerun replaces the period's results. The frames the suites
check are written to OUTPUT/quality/<period>/batches/<suite>.parquet, and the
project holds everything GX needs to check them again with its own API: a
pandas filesystem data source over that folder, one Parquet asset, suite,
validation definition and checkpoint per suite:

    context = gx.get_context(project_root_dir="OUTPUT/quality/<period>")
    context.checkpoints.get("jobs").run()

The Data Docs site (gx/uncommitted/data_docs/local_site/) renders through
gx_views.py, which escapes data, drops remote assets and shows statuses as
text. OUTPUT/quality/<period>/index.html lists every check with links into
them, and summary.json keeps every check's outcome for the report.
"""

from __future__ import annotations

import dataclasses
import numbers
import shutil
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import great_expectations as gx

from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.quality import batches
from fleet_goodput.quality.checked_run import CheckedRun
from fleet_goodput.quality.docs import write_index
from fleet_goodput.quality.gx_views import DATA_DOCS_SITE
from fleet_goodput.quality.period import Period
from fleet_goodput.quality.suites import CRITICAL, SuiteInputs, build_suites
from fleet_goodput.safe_text import json_text

QUALITY_DIR = "quality"
SUMMARY_FILE = "summary.json"
GX_SITE = Path("gx/uncommitted/data_docs/local_site")
BATCHES_DIR = "batches"
INDEX_FILE = "index.html"
_RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 5}


@dataclass(frozen=True)
class Check:
    suite: str
    title: str
    severity: str
    success: bool
    observed: str
    why: str
    expectation: str


@dataclass(frozen=True)
class QualityResult:
    period: str
    checks: tuple[Check, ...]
    docs_index: Path

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.success and c.severity == CRITICAL]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if not c.success and c.severity != CRITICAL]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def verdict(self) -> str:
        return (
            f"Data quality for {self.period}: {'PASSED' if self.passed else 'FAILED'} ({len(self.checks)} checks, "
            f"{len(self.failures)} critical failure(s), {len(self.warnings)} warning(s))"
        )

    def describe(self) -> str:
        suites = sorted({c.suite for c in self.checks}, key=[c.suite for c in self.checks].index)
        lines = [self.verdict]
        for suite in suites:
            checks = [c for c in self.checks if c.suite == suite]
            bad = [c for c in checks if not c.success]
            lines.append(f"  {suite:<18} {len(checks) - len(bad):>3}/{len(checks)} passed")
            for check in bad:
                label = "FAIL" if check.severity == CRITICAL else "warn"
                lines.append(f"    {label} [{check.severity}] {check.title}")
                lines.append(f"         {check.observed}")
        lines.append(f"Data Docs: {self.docs_index}")
        return "\n".join(lines)


def quality_dir(output_dir: str | Path, period: Period) -> Path:
    return Path(output_dir) / QUALITY_DIR / period.name


def _job_days(jobs, period: Period, as_of_us: int | None) -> tuple[str, ...]:
    """The days of `period` some job of `jobs` (the jobs frame: alive in the period) was alive on: from its
    SUBMIT to its end, or to the as-of time while it runs (a life ending at midnight does not reach the day)."""
    alive = set()
    for submit, end in zip(jobs["submit_time"], jobs["end_time"]):
        last_us = as_of_us if end is None or end != end else int(end.timestamp() * 1_000_000)  # NaT != NaT
        if last_us is None:
            continue
        day = max(submit.date(), period.first)
        last = min(datetime.fromtimestamp((last_us - 1) / 1e6, tz=timezone.utc).date(), period.last)
        while day <= last:
            alive.add(day.isoformat())
            day += timedelta(days=1)
    return tuple(sorted(alive))


def validate_output(run: CheckedRun, period: Period, require_complete: bool = False) -> QualityResult:
    """Run every suite on the checked run for the period (StoreError if the store held none); write GX
    results, Data Docs and summary.json."""
    record, settings = run.committed(), run.settings
    manifest, window_s = record.manifest, settings.window_s
    inputs = SuiteInputs(
        period=period,
        as_of_s=(manifest.get("as_of_us") or 0) / 1e6,
        window_s=window_s,
        accelerators=tuple(sorted(settings.accelerators)),
        require_complete=require_complete,
    )
    with batches.open_views(run) as connection:
        frames = {
            "job_window": batches.job_window_frame(connection, period, window_s),
            "jobs": batches.jobs_frame(connection, period),
            "capacity_window": batches.capacity_window_frame(connection, period, window_s),
            "capacity_coverage": batches.capacity_coverage_frame(connection, period),
            "rejected": batches.rejected_frame(connection, period),
            "manifest": batches.manifest_frame(connection, manifest),
            "views": batches.views_frame(connection, period),
        }
    inputs = dataclasses.replace(inputs, job_days=_job_days(frames["jobs"], period, manifest.get("as_of_us")))
    root = quality_dir(run.output, period)
    shutil.rmtree(root, ignore_errors=True)
    (root / BATCHES_DIR).mkdir(parents=True)
    for name, frame in frames.items():
        frame.to_parquet(root / BATCHES_DIR / f"{name}.parquet", index=False)
    context = gx.get_context(mode="file", project_root_dir=str(root))
    # The `progress_bars` section of great_expectations.yml, as that file spells it.
    context.variables.progress_bars = {"globally": False}
    context.variables.data_docs_sites = {"local_site": DATA_DOCS_SITE}
    context.variables.save()
    # Absolute: GX reads a relative base_directory against the working directory.
    source = context.data_sources.add_pandas_filesystem("mpg_output", base_directory=(root / BATCHES_DIR).resolve())
    checks = []
    for name, suite in build_suites(inputs).items():
        batch_definition = source.add_parquet_asset(name).add_batch_definition_path(period.name, f"{name}.parquet")
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch_definition, suite=context.suites.add(suite))
        )
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(name=name, validation_definitions=[definition], result_format=_RESULT_FORMAT)
        )
        outcome = checkpoint.run(run_id=gx.RunIdentifier(run_name=period.name))
        for validation in outcome.run_results.values():
            checks.extend(_check(name, result) for result in validation.results)
    context.build_data_docs()
    result = QualityResult(period=period.name, checks=tuple(checks), docs_index=root / INDEX_FILE)
    write_index(result, root / INDEX_FILE, root / GX_SITE)
    (root / SUMMARY_FILE).write_text(
        json_text(
            {
                "period": period.name,
                "passed": result.passed,
                "docs_index": str(result.docs_index),
                "checks": [asdict(c) for c in checks],
            },
            indent=2,
        )
        + "\n"
    )
    return result


def _check(suite: str, result) -> Check:
    config = result.expectation_config
    severity = getattr(config.severity, "value", config.severity) or CRITICAL
    return Check(
        suite=suite,
        title=(config.meta or {}).get("title") or config.type,
        severity=str(severity),
        success=bool(result.success),
        observed=_observed(config, result),
        why=config.notes or "",
        expectation=config.type,
    )


def _observed(config, result) -> str:
    if result.exception_info and result.exception_info.get("raised_exception"):
        return f"could not be evaluated: {result.exception_info.get('exception_message')}"
    found = result.result or {}
    if found.get("partial_missing_list"):
        # GX lists them in set order: sorted, two runs print the same line.
        return f"missing: {', '.join(sorted(map(str, found['partial_missing_list'])))}"
    if "unexpected_count" in found:
        examples = found.get("partial_unexpected_list") or []
        text = f"{found['unexpected_count']} of {found.get('element_count')} rows unexpected"
        return text + (f"; e.g. {examples[:3]}" if examples and not result.success else "")
    if "observed_value" in found:
        return f"observed {_readable(config.kwargs.get('column', ''), found['observed_value'])}"
    return "ok" if result.success else "failed"


def _readable(column: str, value) -> str:
    if column.endswith("_s") and isinstance(value, numbers.Real) and value > 1e9:
        return format_time_us(int(value * 1_000_000))  # epoch seconds: show the UTC time
    return str(value)
