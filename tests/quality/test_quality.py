"""`mpg validate`: the suites pass on real pipeline output and name what breaks.

Outputs come from the real pipeline on small data: the worked example of
docs/metric.md section 4, and a three-day fleet (two clusters, training
with checkpoints and a preemption, serving across midnight, a job without a
team, an event on an unknown accelerator). Corruptions are made on copies.
They are built by tests/quality_outputs.py, shared with test_report.py so the pipeline runs once per test worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import io
import json
import logging
import re
from datetime import date
from pathlib import Path

import pytest

from fleet_goodput.cli import main
from fleet_goodput.quality.checked_run import open_checked_run
from fleet_goodput.quality.period import Period, PeriodBusy, period_lock
from fleet_goodput.store.views import connect
from quality_outputs import build_outputs, pristine_copy, rewrite_partition, set_capacity_over_day

pytestmark = pytest.mark.slow  # end to end, tens of seconds: scheduled first (tests/conftest.py)


@pytest.fixture(scope="session")
def outputs(tmp_path_factory, worked_example_run) -> dict[str, Path]:
    return build_outputs(tmp_path_factory, worked_example_run)


def _summary(output: Path, period: str) -> dict:
    return json.loads((output / "quality" / period / "summary.json").read_text())


@dataclasses.dataclass(frozen=True)
class Validation:
    code: int
    printed: str
    output: Path  # the pristine copy that was validated: its quality/ folder holds the GX project
    summary: dict


@pytest.fixture(scope="module")
def validated(outputs, tmp_path_factory):
    """`validated(name, *argv, period=…)`: `mpg validate` on a pristine copy of an output, run once per
    output and arguments and shared by the tests that read what it printed and wrote (a validation
    costs seconds of Great Expectations)."""
    done: dict[tuple, Validation] = {}

    def validate(name: str, *argv: str, period: str) -> Validation:
        if (name, argv) not in done:
            output = pristine_copy(outputs[name], tmp_path_factory.mktemp(f"validated_{name}") / "out")
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                code = main(["validate", "--output", str(output), *argv])
            done[(name, argv)] = Validation(code, printed.getvalue(), output, _summary(output, period))
        return done[(name, argv)]

    return validate


@pytest.mark.parametrize(
    "name, argv, period",
    [
        # No period: the whole output's, which the fleet's as-of (midnight after its last day) completes.
        ("fleet", ["--require-complete"], "2026-01-01_2026-01-03"),
        ("worked", ["--date", "2026-01-01"], "2026-01-01"),
    ],
)
def test_clean_outputs_pass_every_critical_check(validated, name, argv, period):
    validation = validated(name, *argv, period=period)
    assert validation.code == 0
    assert f"Data quality for {period}: PASSED" in validation.printed
    summary = validation.summary
    assert summary["passed"] and len(summary["checks"]) > 60
    assert {c["suite"] for c in summary["checks"]} == {
        "job_window",
        "jobs",
        "capacity_window",
        "capacity_coverage",
        "rejected",
        "manifest",
        "views",
    }


def test_warnings_are_reported_but_do_not_fail(validated):
    """The fleet has a job without a team and a rejected event: both below their thresholds, both warnings."""
    validation = validated("fleet", "--require-complete", period="2026-01-01_2026-01-03")
    assert validation.code == 0
    warned = {c["title"] for c in validation.summary["checks"] if not c["success"]}
    assert "at least 95% of jobs name their team" in warned
    assert "at most 1% of a stream's events are rejected" in warned


def test_a_period_past_the_data_fails_on_completeness_when_required_and_on_missing_days(validated, outputs, capsys):
    """The worked example ends at 00:09:40 on its only day: a partial day only warns (the shared validation
    passes), but a period that must be complete fails on it, and days with no data at all always fail."""
    assert validated("worked", "--date", "2026-01-01", period="2026-01-01").code == 0
    assert (
        main(
            [
                "validate",
                "--output",
                str(outputs["worked"]),
                "--from",
                "2026-01-01",
                "--to",
                "2026-01-05",
                "--require-complete",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert "FAIL [critical] the data covers the whole period" in out
    # No job lived past the first day, so job_window needs no later partition; capacity is online every day.
    assert "FAIL [critical] capacity_window has a partition for every day of the period" in out
    assert "job_window has a partition" not in out
    assert "missing: 2026-01-02, 2026-01-03, 2026-01-04, 2026-01-05" in out


def test_every_expectation_says_why_and_how_bad(outputs):
    from fleet_goodput.core.config import load_settings
    from fleet_goodput.quality.suites import SuiteInputs, build_suites

    settings = load_settings()
    inputs = SuiteInputs(
        Period(date(2026, 1, 1), date(2026, 1, 2)),
        as_of_s=1.8e9,
        window_s=3600,
        accelerators=tuple(settings.accelerators),
    )
    suites = build_suites(inputs)
    assert set(suites) == {
        "job_window",
        "jobs",
        "capacity_window",
        "capacity_coverage",
        "rejected",
        "manifest",
        "views",
    }
    for suite in suites.values():
        for expectation in suite.expectations:
            assert expectation.severity.value in ("critical", "warning"), expectation
            assert len(expectation.notes) > 20 and expectation.description, expectation


def test_gx_api_reruns_the_persisted_checkpoints(validated):
    """The period's GX project holds the suites, checkpoints and batches: GX alone re-runs them, same verdicts."""
    import great_expectations as gx

    validation = validated("worked", "--date", "2026-01-01", period="2026-01-01")
    assert validation.code == 0
    root = validation.output / "quality" / "2026-01-01"
    recorded = [(c["suite"], c["expectation"], c["success"]) for c in validation.summary["checks"]]
    context = gx.get_context(project_root_dir=str(root))
    assert {c.name for c in context.checkpoints.all()} == {suite for suite, _, _ in recorded}
    rerun = []
    for name in dict.fromkeys(suite for suite, _, _ in recorded):
        outcome = context.checkpoints.get(name).run()
        rerun += [(name, r.expectation_config.type, r.success) for v in outcome.run_results.values() for r in v.results]
    assert rerun == recorded
    assert context.checkpoints.get("jobs").run().success


def test_a_changed_batch_changes_the_rerun_verdict(validated):
    """The re-run reads the persisted batch for real: break it, and GX's own run fails."""
    import great_expectations as gx
    import pandas as pd

    validation = validated("worked", "--date", "2026-01-01", period="2026-01-01")
    assert validation.code == 0
    root = validation.output / "quality" / "2026-01-01"
    batch = root / "batches" / "jobs.parquet"
    original = batch.read_bytes()
    frame = pd.read_parquet(batch)
    frame.loc[0, "requested_chips"] = 0
    frame.to_parquet(batch, index=False)
    try:
        assert not gx.get_context(project_root_dir=str(root)).checkpoints.get("jobs").run().success
    finally:
        batch.write_bytes(original)  # the validation is shared: leave its batch as validate wrote it


def test_a_locked_period_is_refused_with_a_retry_code(outputs, capsys):
    period = Period(date(2026, 1, 1), date(2026, 1, 1))
    with period_lock(outputs["worked"], period):
        assert main(["validate", "--output", str(outputs["worked"]), "--date", "2026-01-01"]) == 75
        assert main(["report", "--output", str(outputs["worked"]), "--date", "2026-01-01"]) == 75
        with pytest.raises(PeriodBusy):
            with period_lock(outputs["worked"], period):
                pass
    assert capsys.readouterr().err.count("is being validated or reported by pid") == 2


def test_quiet_prints_the_verdict_verbose_every_check_and_only_vv_the_libraries_logs(outputs, tmp_path, capsys, caplog):
    output = pristine_copy(outputs["worked"], tmp_path / "out")
    argv = ["validate", "--output", str(output), "--date", "2026-01-01"]
    assert main(["-q", *argv]) == 0
    quiet = capsys.readouterr()
    assert (
        re.fullmatch(
            r"Data quality for 2026-01-01: PASSED \(\d+ checks, 0 critical failure\(s\), "
            r"\d+ warning\(s\)\)\n",
            quiet.out,
        )
        and quiet.err == ""
    ), quiet
    checks = int(re.search(r"\((\d+) checks", quiet.out).group(1))

    assert main(["-v", *argv]) == 0
    verbose = capsys.readouterr().out
    assert verbose.startswith(quiet.out) and verbose.count("\n  pass [") > checks // 2
    libraries = [r for r in caplog.records if not r.name.startswith("fleet_goodput")]
    assert all(r.levelno >= logging.WARNING for r in libraries), libraries[:3]

    caplog.clear()
    assert main(["-vv", *argv]) == 0
    assert any(r.name.startswith("great_expectations") and r.levelno == logging.INFO for r in caplog.records)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--date", "2026-02-30"], "not a date"),
        (["--from", "2026-01-03", "--to", "2026-01-01"], "ends (2026-01-01) before it starts"),
        (["--from", "2026-01-01"], "--from and --to go together"),
        (["--date", "2026-01-01", "--to", "2026-01-02"], "either --date or --from/--to"),
    ],
)
def test_bad_periods_are_usage_errors(outputs, capsys, argv, message):
    assert main(["validate", "--output", str(outputs["worked"]), *argv]) == 2
    assert message in capsys.readouterr().err


def test_whole_output_period_ends_the_day_before_a_midnight_as_of(outputs):
    from fleet_goodput.quality.period import whole_output_period

    assert whole_output_period(open_checked_run(outputs["fleet"])).name == "2026-01-01_2026-01-03"
    assert whole_output_period(open_checked_run(outputs["worked"])).name == "2026-01-01"


def test_a_conservation_break_and_chip_time_held_without_capacity_fail_and_are_named(outputs, tmp_path, capsys):
    """Three corruptions on other days or tables of one output, so one validation (seconds of Great
    Expectations) checks them all: on day 2 an hour of one chip appears from nowhere and cluster c2's
    capacity rows are gone (its SG becomes null, which every bound passes); on day 3 c1's capacity reads 0.
    The coverage check must name exactly the windows where jobs held chips on c2 on day 2 and on c1 on day 3."""
    output = pristine_copy(outputs["fleet"], tmp_path / "out")

    def add_lost_time(table):
        lost = table.column("lost_chip_s").to_pylist()
        lost[0] += 3600.0
        return table.set_column(table.schema.get_field_index("lost_chip_s"), "lost_chip_s", [lost])

    rewrite_partition(output, "job_window", "2026-01-02", add_lost_time)
    set_capacity_over_day(output, "c2", "2026-01-02", None)
    set_capacity_over_day(output, "c1", "2026-01-03", 0)
    assert main(["validate", "--output", str(output)]) == 1
    out = capsys.readouterr().out
    assert "1 of " in _observed(out, "FAIL [critical] chip-seconds conserved: all_allocated = productive")
    held = _observed(out, "FAIL [critical] no chip-time is held where no capacity is online")
    with connect(outputs["fleet"]) as connection:  # the uncorrupted output: where jobs held chips
        (expected,) = connection.execute("""
            select count(distinct (jobs.cluster, window_start)) from job_window join jobs using (job_id)
            where (held_chip_s > 0 or all_allocated_chip_s > 0)
              and ((jobs.cluster = 'c2' and job_window.date = '2026-01-02')
                   or (jobs.cluster = 'c1' and job_window.date = '2026-01-03'))""").fetchone()
    assert expected > 4 and held.strip().startswith(f"{expected} of ")
    named = set(re.findall(r"(c\d) / ([\w-]+) / (\d{4}-\d\d-\d\d)T", held))
    assert named and named <= {("c2", "h100", "2026-01-02"), ("c1", "tpu-v5e", "2026-01-03")}
    _assert_data_docs_show_each_status(
        output / "quality" / "2026-01-01_2026-01-03", {"job_window", "capacity_coverage"}
    )


def _status_cells(page: Path) -> list[tuple[str, str]]:
    """(Status, Expectation) as text, for every row of a Data Docs validation page."""

    def text(cell: str) -> str:
        return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", cell)).split())

    # A check's row: Status, Expectation (which may hold a table of unexpected values), Observed Value.
    rows = re.findall(
        r'<td id="(section-\d+-content-block-\d+-cell-\d+)-1">(.*?)</td>'
        r'<td id="\1-2">(.*?)</td><td id="\1-3">',
        page.read_text(),
        re.S,
    )
    return [(text(status), text(expectation)) for _, status, expectation in rows]


def _assert_data_docs_show_each_status(quality: Path, failing_suites: set[str]) -> None:
    """Every check's row in its suite's Data Docs validation page says passed or failed and its severity in
    words (GX's status icon is empty offline), and the suites named have a critical check shown failed."""
    checks = json.loads((quality / "summary.json").read_text())["checks"]
    site = quality / "gx" / "uncommitted" / "data_docs" / "local_site" / "validations"
    for suite in {c["suite"] for c in checks}:
        (page,) = site.glob(f"{suite}/*/*/*.html")
        shown = _status_cells(page)
        expected = [
            (f"{'passed' if c['success'] else 'failed'} ({c['severity']})", c["title"])
            for c in checks
            if c["suite"] == suite
        ]
        assert len(shown) == len(expected), suite
        for status, title in expected:  # a failed check's Expectation cell goes on with its unexpected values
            assert any(s == status and e.startswith(title) for s, e in shown), (suite, status, title)
        if suite in failing_suites:
            assert "failed (critical)" in {status for status, _ in expected}, suite


def _observed(printed: str, failure: str) -> str:
    """What `mpg validate` printed it observed for a failure: the line under the failure's title."""
    lines = printed.splitlines()
    titles = [number for number, line in enumerate(lines) if failure in line]
    assert titles, f"not named: {failure}"
    return lines[titles[0] + 1]


def _views_outcomes(rows: list[dict]) -> dict[str, bool]:
    """Run the views suite with GX (an ephemeral context) on hand-made view rows; success per check title."""
    import great_expectations as gx
    import pandas as pd
    from fleet_goodput.quality.suites import SuiteInputs, views_suite

    inputs = SuiteInputs(Period(date(2026, 1, 1), date(2026, 1, 1)), as_of_s=1.8e9, window_s=3600, accelerators=())
    context = gx.get_context(mode="ephemeral")
    batch = (
        context.data_sources.add_pandas("rows").add_dataframe_asset("views").add_batch_definition_whole_dataframe("all")
    )
    suite = context.suites.add(gx.ExpectationSuite(name="views", expectations=views_suite(inputs)))
    result = batch.get_batch(batch_parameters={"dataframe": pd.DataFrame(rows)}).validate(suite)
    return {r.expectation_config.meta["title"]: r.success for r in result.results}


def _view_row(sg, rg=0.5, pg=0.4):
    return {
        "view": "fleet_daily",
        "row_key": "k",
        "sg": sg,
        "rg": rg,
        "pg": pg,
        "mpg": sg * rg * pg,
        "pg_coverage": 1.0,
        "factor_product_error": 0.0,
    }


@pytest.mark.parametrize(
    "sg, passes",
    [
        (1.0, True),
        (1.0000000000000002, True),  # one ulp above 1: float noise on a correct, fully allocated row (issue 10)
        (1.0 + 5e-10, True),  # inside the 1e-9 tolerance
        (1.0 + 2e-9, False),  # outside it
        (1.01, False),  # a real overshoot
    ],
)
def test_sg_bound_tolerates_float_noise_only(sg, passes):
    outcomes = _views_outcomes([_view_row(0.5), _view_row(sg)])
    assert outcomes["SG is in [0, 1] on every view row"] is passes
    assert outcomes["RG is in [0, 1] on every view row"]
