"""The figures people read first, queried from the views and printed as text.

The headline says what it covers: the whole store (its days and as-of time),
then the part a run (or a stream's runs) changed, day by day, so a daily run
shows the day it just added. Where no runtime span covers the chip-time held,
RG is 0 only because nothing was reported: the headline says that RG, PG and
MPG cannot be measured instead of printing 0.0% (imports of scheduler traces
such as Philly and OpenB have no runtime stream). What is left out so that no
factor passes 100% is said too: clusters whose capacity does not cover the
chips held, and profiler samples and jobs left out of PG. Names from the telemetry
(segments, clusters) show their control characters as \\xNN (safe_text.py). A store without any
CAPACITY level (a job imported alone, a recorder stating its own scheduling) has no fleet to divide by:
the headline then gives the jobs' factors on the demand base and says in one line why.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import NamedTuple

import duckdb

from fleet_goodput.core.profile_checks import ABOVE_PEAK
from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.report.units import chip_time, column_unit
from fleet_goodput.safe_text import printable
from fleet_goodput.store.runs_table import RunRecord

FACTORS = ("sg", "rg", "pg", "mpg")
# A run that changed more days than this shows them as one range, not a line each.
DAYS_SHOWN = 7
NO_RUNTIME = "RG, PG and MPG cannot be measured: no runtime event"
NO_CAPACITY = (
    "  No fleet factors: no source states the chips online (a CAPACITY level; a job's own telemetry "
    "has none), so these are the jobs' own"
)


def _fmt(value) -> str:
    return "   n/a" if value is None else f"{value:6.1%}"


class Base(NamedTuple):
    """What the headline's factors divide by: the fleet's capacity, or the jobs' demand where no capacity
    is known (docs/metric.md section 1, "The base: capacity or demand")."""

    name: str  # as the headline prints it
    view: str  # the day-grain rows summed
    chip_s: str  # the column of the base


CAPACITY = Base("capacity", "fleet_daily", "capacity_chip_s")
DEMAND = Base("demand", "job_window_enriched", "lifetime_chip_s")
_TOTALS = ("sg", "rg", "pg", "mpg", "pg_coverage", "base_chip_s")


def _totals_sql(base: Base) -> str:
    return f"""
    unnest(goodput_factors(sum(all_allocated_chip_s), sum(productive_chip_s), sum(ideal_chip_s),
                           sum(profiled_productive_chip_s), sum({base.chip_s}), sum(runtime_measured_chip_s))),
    sum({base.chip_s}) as base_chip_s
"""


def fleet_totals(
    connection: duckdb.DuckDBPyConnection, days: Sequence[date] | None = None, base: Base = CAPACITY
) -> dict:
    """Fleet MPG over the whole output (or the given days), on the capacity base (ratios of sums),
    over the windows whose capacity covers the chips held (fleet_daily's rule); or the jobs' on the
    demand base."""
    row = connection.execute(
        f"""
        select {_totals_sql(base)}
        from {base.view}
        where $days is null or list_contains($days, day)
    """,
        {"days": None if days is None else list(days)},
    ).fetchone()
    return dict(zip(_TOTALS, row))


def fleet_totals_by_day(connection: duckdb.DuckDBPyConnection, base: Base = CAPACITY) -> tuple[dict, dict[date, dict]]:
    """`fleet_totals` of the whole output, and of each of its days, in one pass over the base's view
    (each query of a mart computes the views under it again)."""
    rows = connection.execute(f"""
        select grouping(day) = 1 as whole, day, {_totals_sql(base)}
        from {base.view}
        group by grouping sets ((), (day))
        order by whole desc, day
    """).fetchall()
    whole, *days = [(day, dict(zip(_TOTALS, figures))) for _, day, *figures in rows]
    return whole[1], dict(days)


def has_capacity(connection: duckdb.DuckDBPyConnection) -> bool:
    """Whether any source stated chips online (a CAPACITY level): without one there is no fleet to divide
    by, only the jobs' demand (a job imported alone, a recorder's own statement of its scheduling)."""
    return connection.execute("select count(*) > 0 from capacity_level").fetchone()[0]


def days_with_runtime(connection: duckdb.DuckDBPyConnection) -> set[date]:
    """The days on which a job whose runtime is measured held chips, or reported runtime outside its
    allocation (RG is measured there). On any other day no job reported anything, and the views give
    RG, PG and MPG as unknown (sql/derived/macros.sql, `runtime_known`)."""
    rows = connection.execute("""
        select distinct day from job_window_enriched
        where runtime_measured_chip_s > 0 or clipped_runtime_chip_s > 0
    """).fetchall()
    return {day for (day,) in rows}


def changed_days(connection: duckdb.DuckDBPyConnection, after_version_us: int | None) -> list[date]:
    """The days with a job or capacity window of a version later than `after_version_us`
    (every day when None): the days the runs since then changed."""
    rows = connection.execute(
        """
        select date from job_window where $after is null or epoch_us(version) > $after
        union
        select date from capacity_window where $after is null or epoch_us(version) > $after
        order by 1
    """,
        {"after": after_version_us},
    ).fetchall()
    return [day for (day,) in rows]


def _factor_line(totals: dict, runtime: bool, why_no_runtime: str, base: Base = CAPACITY) -> str:
    """MPG = SG x RG x PG, saying why a factor is missing rather than printing 0 or n/a alone."""
    capacity = f"{base.name} {chip_time(totals['base_chip_s'] or 0, digits=None)}"
    if not runtime:
        return f"SG {_fmt(totals['sg'])}; {NO_RUNTIME} {why_no_runtime}   ({capacity})"
    if totals["pg"] is None and totals["rg"]:  # productive time, none of it profiled
        return (
            f"MPG unknown = SG {_fmt(totals['sg'])} x RG {_fmt(totals['rg'])} x PG unknown   "
            f"(no productive step has a profiler sample: PG coverage 0%; {capacity})"
        )
    return (
        f"MPG {_fmt(totals['mpg'])} = SG {_fmt(totals['sg'])} x RG {_fmt(totals['rg'])} x PG {_fmt(totals['pg'])}"
        f"   (PG coverage {_fmt(totals['pg_coverage'])}, {capacity})"
    )


def _days_text(days: Sequence[date]) -> str:
    if not days:
        return "no day"
    span = f"{days[0]}" if len(days) == 1 else f"{days[0]} .. {days[-1]}"
    return f"{len(days)} day{'s' if len(days) != 1 else ''}, {span}"


def coverage_lines(
    connection: duckdb.DuckDBPyConnection,
    runs: Sequence[RunRecord],
    since_run: int | None,
    runtime_days: set[date],
    base: Base = CAPACITY,
) -> list[str]:
    """The whole store's figures on `base`, saying what they cover; then those of the days that the runs
    from `since_run` (default: the latest) to the latest changed."""
    whole, of_day = fleet_totals_by_day(connection, base)
    store_days = list(of_day)
    latest = runs[-1] if runs else None
    accepted_runtime = latest.manifest.get("streams", {}).get("runtime", {}).get("accepted") if latest else None
    why = "(the input has no runtime stream)" if accepted_runtime == 0 else "covers these days"
    as_of = f", as of {format_time_us(latest.as_of_us)} (run {latest.run_id})" if latest else ""
    lines = [
        f"  Whole store, {_days_text(store_days)}{as_of}:",
        f"    {_factor_line(whole, bool(runtime_days), why, base)}",
    ]
    if latest is not None:
        lines += clock_lines(latest.manifest)
    if latest is None:
        return lines
    first = since_run or latest.run_id
    part = [run for run in runs if run.run_id >= first]
    before = [run for run in runs if run.run_id < first]
    days = changed_days(connection, before[-1].manifest.get("version_us") if before else None)
    read = sum(counts.get("read", 0) for run in part for counts in run.manifest.get("this_run", {}).values())
    label = f"This run (run {first})" if first == latest.run_id else f"These runs ({first} .. {latest.run_id})"
    lines.append(
        f"  {label} read {read:,} new events and changed {_days_text(days)}"
        + (":" if days and days != store_days else (" (the whole store, above)" if days else "."))
    )
    if days == store_days:
        return lines
    groups = [[day] for day in days] if len(days) <= DAYS_SHOWN else [days]
    for group in groups:
        name = str(group[0]) if len(group) == 1 else f"{group[0]} .. {group[-1]}"
        runtime = bool(runtime_days.intersection(group))
        totals = of_day[group[0]] if len(group) == 1 else fleet_totals(connection, group, base)
        lines.append(f"    {name}  {_factor_line(totals, runtime, why, base)}")
    return lines


def clock_lines(manifest: dict) -> list[str]:
    """How far the run's sources reached, and on what word: each cluster's stated observed period, or that
    the as-of time was inferred from event times (a guess) and which events it set aside; and how many
    events wait for a later as-of time."""
    clock = manifest.get("clock") or {}
    lines = []
    if clock.get("basis") == "stated":
        periods = clock["observed"]
        earliest = min(period["to_us"] for period in periods.values())
        for cluster, period in periods.items():
            mark = "  <- the as-of time: the earliest end" if len(periods) > 1 and period["to_us"] == earliest else ""
            lines.append(f"    {printable(cluster)}: observed {period['from']} .. {period['to']}{mark}")
        lines.insert(0, "  As of what the sources state they observed:")
    elif clock.get("basis") == "inferred":
        lines.append(
            "  As-of time inferred from the scheduler's event times (no file states what its source observed): a guess"
        )
        aside = clock.get("set_aside") or []
        if aside:
            keys = sorted({item["key"] for item in aside})
            lines.append(
                f"    set aside as a clock ahead: {len(aside)} event(s) of {', '.join(map(printable, keys))} "
                f"after a silence of over an hour, the latest at {aside[0]['time']}"
            )
    waiting = {stream: counts.get("waiting", 0) for stream, counts in (manifest.get("streams") or {}).items()}
    if any(waiting.values()):
        lines.append(
            "    waiting for a later as-of time: "
            + ", ".join(f"{count:,} {stream}" for stream, count in waiting.items() if count)
        )
    return lines


def capacity_gap_lines(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """The clusters left out of the fleet figures because their capacity does not cover the chips held."""
    rows = connection.execute("""
        select cluster, accelerator, problem, windows, held_chip_s
        from capacity_gaps order by held_chip_s desc, cluster, accelerator
    """).fetchall()
    if not rows:
        return []
    problems = {"no_capacity": "no CAPACITY level", "over_capacity": "more chips held than online"}
    return ["Left out of the fleet figures (chips held that capacity does not cover):"] + [
        f"  {printable(str(cluster))}/{printable(str(accelerator))}: {problems[problem]} in {windows} window(s), "
        f"{chip_time(held_chip_s)} held"
        for cluster, accelerator, problem, windows, held_chip_s in rows
    ]


def pg_set_aside_lines(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """What PG leaves out rather than show a figure above 100% (docs/metric.md section 3): profiler
    samples above their precision's peak (rejected) and jobs whose steps claim more ideal chip-time
    than they ran in (the view pg_set_aside), each with its reason in the store."""
    samples, sampled_jobs = connection.execute(
        """
        select coalesce(sum(records), 0), count(distinct job_id) from rejected
        where stream = 'profiler' and contains(reason, $above_peak)
    """,
        {"above_peak": ABOVE_PEAK},
    ).fetchone()
    jobs, productive_chip_s = connection.execute(
        "select count(*), coalesce(sum(profiled_productive_chip_s), 0) from pg_set_aside"
    ).fetchone()
    lines = []
    if samples:
        lines.append(
            f"  {samples:,} profiler sample(s) of {sampled_jobs:,} job(s) rejected: {ABOVE_PEAK} "
            "(mpg sql \"select * from rejected where stream = 'profiler'\")"
        )
    if jobs:
        lines.append(
            f"  {jobs:,} job(s) whose steps claim more ideal chip-time than they ran in: PG unknown, "
            f'{chip_time(productive_chip_s)} productive counted as unprofiled (mpg sql "select * from pg_set_aside")'
        )
    return ["Left out of PG (each would show a PG above 100%):", *lines] if lines else []


def segment_table(connection: duckdb.DuckDBPyConnection, dimension: str, runtime: bool = True) -> list[str]:
    """One line per segment; without `runtime` (no runtime event in the store) RG, PG and MPG show as -."""
    return segment_tables(connection, (dimension,), runtime)[dimension]


def segment_tables(
    connection: duckdb.DuckDBPyConnection, dimensions: Sequence[str], runtime: bool = True
) -> dict[str, list[str]]:
    """`segment_table` of each dimension, from one query of goodput_by_segment (each query of a mart
    computes the views under it again)."""
    rows = connection.execute(
        """
        select dimension, segment, jobs, sg, rg, pg, mpg, pg_coverage, lifetime_chip_s
        from goodput_by_segment where list_contains($dimensions, dimension)
        order by dimension, lifetime_chip_s desc
    """,
        {"dimensions": list(dimensions)},
    ).fetchall()
    tables = {}
    for dimension in dimensions:
        unit, size = column_unit(row[-1] for row in rows if row[0] == dimension)
        tables[dimension] = [
            f"  {dimension:<16} {'jobs':>6} {'SG':>7} {'RG':>7} {'PG':>7} {'MPG':>7} {'PG cov':>7} {unit:>10}"
        ]
        for _, name, jobs, sg, *runtime_factors, chip_s in (row for row in rows if row[0] == dimension):
            measured = " ".join(_fmt(value) if runtime else f"{'-':>6}" for value in runtime_factors)
            tables[dimension].append(
                f"  {printable(str(name)):<16} {jobs:>6} {_fmt(sg)} {measured} {float(chip_s) / size:>10,.1f}"
            )
    return tables


def badput_lines(connection: duckdb.DuckDBPyConnection, top: int = 6) -> list[str]:
    rows = connection.execute(f"""
        select category, base, chip_hours * 3600, share from badput_breakdown
        where category != 'productive' and chip_hours > 0
        order by chip_hours desc limit {int(top)}
    """).fetchall()
    return [
        f"  {category:<20} {chip_time(chip_s):>18}  {share:6.1%} of {base}" for category, base, chip_s, share in rows
    ]


def render(connection: duckdb.DuckDBPyConnection, runs: Sequence[RunRecord] = (), since_run: int | None = None) -> str:
    """The headline. `runs` are the store's runs, oldest first (Store.runs(), from the one before
    `since_run` at least), whose last the views show; `since_run` starts the part the headline
    calls this run's (default: the last run)."""
    runtime_days = days_with_runtime(connection)
    unmeasured = "" if runtime_days else f"; {NO_RUNTIME}"
    segments = segment_tables(connection, ("accelerator", "workload"), bool(runtime_days))
    if has_capacity(connection):
        title, base, gaps = ["Fleet ML Productivity Goodput (capacity base, ratios of sums)"], CAPACITY, True
    else:
        title, base, gaps = (
            [
                "ML Productivity Goodput of the jobs (demand base: requested chips x job lifetime, ratios of sums)",
                NO_CAPACITY,
            ],
            DEMAND,
            False,
        )
    lines = [
        *title,
        *coverage_lines(connection, runs, since_run, runtime_days, base),
        *(capacity_gap_lines(connection) if gaps else ()),
        *pg_set_aside_lines(connection),
        "",
        f"By accelerator (demand base: requested chips x job lifetime{unmeasured})",
        *segments["accelerator"],
        "",
        f"By workload (demand base{unmeasured})",
        *segments["workload"],
        "",
        "Top badput (chip-time)"
        + ("" if runtime_days else ": with no runtime event, all-allocated time is unmeasured, not idle"),
        *badput_lines(connection),
    ]
    return "\n".join(lines)
