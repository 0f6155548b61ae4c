"""What the `mpg` commands print for people: the headline says what it covers and shows the day a daily
run added, RG that no runtime event measured is not shown as 0%, `mpg sql` prints numbers exactly, and
every command's --help lists its exit codes.

(-q, -v and progress: test_cli_options.py and test_quality.py; the busy exit code: test_crash_safety.py
and test_quality.py.)
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import worked_example
from fleet_goodput.cli import build_parser, main
from fleet_goodput.report.headline import NO_RUNTIME
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import split_by_time, write_events

pytestmark = pytest.mark.slow  # pipeline runs end to end

DAY_US = 24 * 3600 * 1_000_000


def _mpg(*argv) -> tuple[int, str]:
    """Run `mpg ARGV` in this process; its exit code and what it printed on stdout."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        code = main([str(arg) for arg in argv])
    return code, printed.getvalue()


@pytest.fixture(scope="module")
def daily(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """A fleet of two days and two hours, cut at midnight, run a day at a time as a daily cron would:
    (the simulated fleet, the output, what each run printed)."""
    root = tmp_path_factory.mktemp("daily")
    simulate(root / "fleet", seed=5, hours=50, jobs=16)
    parts = split_by_time(root / "fleet", [START_US + DAY_US, START_US + 2 * DAY_US], root / "parts")
    printed = []
    for part in parts:
        code, out = _mpg("run", "--input", part, "--output", root / "out")
        assert code == 0
        printed.append(out)
    return root / "fleet", root / "out", printed


def _factors_line(connection, days: list[str]) -> str:
    """The fleet's factors over `days` as the headline prints them, from fleet_daily and the one macro."""
    sg, rg, pg, mpg = connection.execute(
        """
        select unnest(goodput_factors(sum(all_allocated_chip_s), sum(productive_chip_s), sum(ideal_chip_s),
                                      sum(profiled_productive_chip_s), sum(capacity_chip_s),
                                      sum(runtime_measured_chip_s)))
        from fleet_daily where list_contains(?::date[], day)""",
        [days],
    ).fetchone()[:4]
    return f"MPG {mpg:6.1%} = SG {sg:6.1%} x RG {rg:6.1%} x PG {pg:6.1%}"


def _by_cluster_day(connection) -> dict[tuple, tuple]:
    """fleet_daily's figures by (day, cluster, accelerator); sums that DuckDB adds in any order differ in
    their last bits, so they are compared approximately."""
    rows = connection.execute(
        "select * exclude (day, cluster, accelerator), strftime(day, '%Y-%m-%d'), cluster, accelerator from fleet_daily"
    ).fetchall()
    return {tuple(row[-3:]): tuple(0.0 if value is None else value for value in row[:-3]) for row in rows}


def test_the_headline_covers_the_whole_store_then_the_days_this_run_changed(daily):
    _, output, printed = daily
    runs = Store(output).runs()
    latest = runs[-1]
    headline = printed[-1]
    assert f"  Whole store, 3 days, 2026-01-01 .. 2026-01-03, as of {latest.manifest['as_of']} (run 3):" in headline, (
        headline
    )
    this_run = latest.manifest["this_run"]
    read = sum(counts["read"] for counts in this_run.values())
    said = re.search(
        rf"  This run \(run 3\) read {read:,} new events and changed "
        r"(\d) days?, ([\d-]+)(?: \.\. ([\d-]+))?:",
        headline,
    )
    assert said, headline
    first, last = said.group(2), said.group(3) or said.group(2)
    with connect(output) as connection:
        changed = [
            str(day)
            for (day,) in connection.execute(
                "select distinct day from fleet_daily where day between ? and ? order by day", [first, last]
            ).fetchall()
        ]
        # Each changed day on a line of its own, with that day's figures.
        for day in changed:
            assert f"\n    {day}  {_factors_line(connection, [day])}" in headline, day
        assert f"    {_factors_line(connection, ['2026-01-01', '2026-01-02', '2026-01-03'])}" in headline
        now = _by_cluster_day(connection)
    assert int(said.group(1)) == len(changed) and "2026-01-03" in changed
    # Truth independent of versions: every day whose figures differ from run 2's is among those named.
    with connect(output, run=2) as connection:
        before = _by_cluster_day(connection)
    differ = {key[0] for key, row in now.items() if key not in before or row != pytest.approx(before[key], rel=1e-9)}
    assert differ <= set(changed) and "2026-01-03" in differ
    # The first run changed every day it holds: the headline says so rather than repeating them.
    assert re.search(
        r"This run \(run 1\) read [\d,]+ new events and changed \d days?, .*"
        r"\(the whole store, above\)\n",
        printed[0],
    ), printed[0]


def test_sql_prints_chip_seconds_exactly_and_csv_every_digit(daily):
    """The capacity the simulator put online, from its own truth, against what `mpg sql` prints."""
    fleet, output, _ = daily
    truth = pq.read_table(fleet / "truth" / "capacity_window.parquet").column("capacity_chip_s").to_pylist()
    query = "select sum(capacity_chip_s) as capacity_chip_s, sum(capacity_chip_s) / 7 as seventh from capacity_window"
    code, table = _mpg("sql", "--output", output, query)
    assert code == 0
    assert sum(truth) >= 10_000 and sum(truth) == int(sum(truth))  # chips x whole seconds
    cells = table.splitlines()[2].split()
    assert cells[0] == f"{int(sum(truth)):,}"  # whole, grouped, no exponent
    assert cells[1] == f"{sum(truth) / 7:,.6f}"  # six decimals: a chip-microsecond
    code, text = _mpg("sql", "--output", output, "--format", "csv", query)
    assert list(csv.reader(io.StringIO(text)))[1] == [repr(sum(truth)), repr(sum(truth) / 7)]


def test_sql_table_and_markdown_show_the_worked_example_exactly(worked_example_run):
    query = (
        "select job_id, lifetime_chip_s, productive_chip_s, lifetime_chip_s * 1000000 as lifetime_chip_us, mpg, "
        "1e-9 * mpg as tiny from job_goodput"
    )
    code, table = _mpg("sql", "--output", worked_example_run[1], query)
    assert code == 0
    chips, seconds = worked_example.CHIPS, worked_example.EXPECTED_SECONDS
    mpg = worked_example.EXPECTED_RATIOS["mpg"]
    expected = [
        "j1",
        f"{seconds['lifetime'] * chips:g}",
        f"{seconds['productive'] * chips:g}",
        f"{seconds['lifetime'] * chips * 1_000_000:,}",
        f"{mpg:.6f}",
    ]
    assert table.splitlines()[2].split()[:5] == expected
    assert re.fullmatch(r"1\.72\d*e-10", table.splitlines()[2].split()[5])  # not 0.000000
    code, markdown = _mpg("sql", "--output", worked_example_run[1], "--format", "markdown", query)
    assert markdown.splitlines()[1] == "|---|---:|---:|---:|---:|---:|"
    assert markdown.splitlines()[2].startswith(
        f"| j1 | {expected[1]} | {expected[2]} | {expected[3]} | {expected[4]} |"
    )


@pytest.fixture(scope="module")
def scheduler_only(tmp_path_factory) -> Path:
    """The worked example's scheduler events alone, as an import of Philly or OpenB gives: no runtime stream."""
    root = tmp_path_factory.mktemp("scheduler_only")
    write_events(root / "in" / "scheduler" / "part-0.avro", "scheduler", worked_example.records()["scheduler"])
    return root


def test_without_runtime_events_the_headline_says_rg_pg_and_mpg_cannot_be_measured(scheduler_only):
    code, headline = _mpg("run", "--input", scheduler_only / "in", "--output", scheduler_only / "out")
    assert code == 0
    sg = worked_example.EXPECTED_SECONDS["all_allocated"] / worked_example.EXPECTED_SECONDS["lifetime"]
    with connect(scheduler_only / "out") as connection:
        capacity_sg = connection.execute(
            "select sum(all_allocated_chip_s) / sum(capacity_chip_s) from fleet_daily"
        ).fetchone()[0]
    assert f"SG {capacity_sg:6.1%}; {NO_RUNTIME} (the input has no runtime stream)" in headline, headline
    assert re.search(rf"tpu-v5e +1 +{sg:6.1%} +- +- +- +- ", headline), headline  # segments: SG only
    assert "RG   0.0%" not in headline and "MPG   0.0%" not in headline


def test_without_runtime_events_the_reports_headline_says_so_too(scheduler_only):
    output = scheduler_only / "report-out"
    assert _mpg("run", "--input", scheduler_only / "in", "--output", output)[0] == 0
    code, printed = _mpg("report", "--output", output, "--date", "2026-01-01")
    assert code == 0, printed
    page = (output / "reports" / "2026-01-01" / "index.html").read_text()
    headline = page[page.index('<div class="headline">') : page.index("<h2>", page.index('<div class="headline">'))]
    assert headline.count('<div class="factor">not measured</div>') == 3  # MPG, RG and PG; SG is measured
    assert "RG, PG and MPG cannot be measured for 2026-01-01:</b> no runtime event covers it" in headline
    assert "0.0%" not in headline.replace('PG coverage</div><div class="factor">n/a', "")


def test_with_runtime_but_no_profile_pg_and_mpg_read_as_unknown(tmp_path):
    for stream in ("scheduler", "runtime"):
        write_events(tmp_path / "in" / stream / "part-0.avro", stream, worked_example.records()[stream])
    code, headline = _mpg("run", "--input", tmp_path / "in", "--output", tmp_path / "out")
    assert code == 0
    assert re.search(
        r"MPG unknown = SG +[\d.]+% x RG +[\d.]+% x PG unknown +\(no productive step has a profiler "
        r"sample: PG coverage 0%",
        headline,
    ), headline


LOCKING = {"run", "stream", "validate", "report", "demo", "check", "collect", "rollback"}
# The commands that open a store refuse a damaged one with exit 3 (fleet_goodput/store/store_check.py).
OPENING = {"run", "stream", "sql", "runs", "validate", "report", "check", "rollback", "export"}


@pytest.mark.parametrize("command", sorted(build_parser().commands))
def test_every_commands_help_lists_its_exit_codes(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = capsys.readouterr().out
    assert "exit codes:\n  0 done" in help_text and "  2 bad arguments, settings or input" in help_text
    assert ("  75 (EX_TEMPFAIL) " in help_text) == (command in LOCKING), help_text
    # The faults of the machine (tests/commands/test_resource_faults.py) end every command with their own code.
    for code in (
        "73 (EX_CANTCREAT) ",
        "74 (EX_IOERR) ",
        "77 (EX_NOPERM) ",
        "130 interrupted",
        "143 stopped by SIGTERM",
    ):
        assert f"\n  {code}" in help_text, (code, help_text)
    assert ("\n  3 " in help_text) == (command in OPENING), help_text
