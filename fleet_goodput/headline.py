"""The figures people read first, queried from the views and printed as text."""

from __future__ import annotations

import duckdb

FACTORS = ("sg", "rg", "pg", "mpg")


def _fmt(value) -> str:
    return "   n/a" if value is None else f"{value:6.1%}"


def fleet_totals(connection: duckdb.DuckDBPyConnection) -> dict:
    """Fleet MPG over the whole output, on the capacity base (ratios of sums),
    over the windows whose capacity covers the chips held (fleet_daily's rule)."""
    row = connection.execute("""
        select
            unnest(goodput_factors(sum(all_allocated_chip_s), sum(productive_chip_s), sum(ideal_chip_s),
                                   sum(profiled_productive_chip_s), sum(capacity_chip_s))),
            sum(capacity_chip_s) / 3600 as capacity_chip_hours
        from fleet_daily
    """).fetchone()
    return dict(zip(("sg", "rg", "pg", "mpg", "pg_coverage", "capacity_chip_hours"), row))


def capacity_gap_lines(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """The clusters left out of the fleet figures because their capacity does not cover the chips held."""
    rows = connection.execute("""
        select cluster, accelerator, problem, windows, held_chip_s / 3600
        from capacity_gaps order by held_chip_s desc, cluster, accelerator
    """).fetchall()
    if not rows:
        return []
    problems = {"no_capacity": "no CAPACITY level", "over_capacity": "more chips held than online"}
    return ["Left out of the fleet figures (chips held that capacity does not cover):"] + [
        f"  {cluster}/{accelerator}: {problems[problem]} in {windows} window(s), {chip_hours:,.1f} chip-h held"
        for cluster, accelerator, problem, windows, chip_hours in rows
    ]


def segment_table(connection: duckdb.DuckDBPyConnection, dimension: str) -> list[str]:
    rows = connection.execute(f"""
        select {dimension}, jobs, sg, rg, pg, mpg, pg_coverage, lifetime_chip_s / 3600
        from goodput_by_{dimension} order by lifetime_chip_s desc
    """).fetchall()
    lines = [f"  {dimension:<16} {'jobs':>6} {'SG':>7} {'RG':>7} {'PG':>7} {'MPG':>7} {'PG cov':>7} {'chip-h':>10}"]
    for name, jobs, sg, rg, pg, mpg, coverage, chip_hours in rows:
        lines.append(f"  {str(name):<16} {jobs:>6} {_fmt(sg)} {_fmt(rg)} {_fmt(pg)} {_fmt(mpg)} {_fmt(coverage)} {chip_hours:>10,.0f}")
    return lines


def badput_lines(connection: duckdb.DuckDBPyConnection, top: int = 6) -> list[str]:
    rows = connection.execute(f"""
        select category, base, chip_hours, share from badput_breakdown
        where category != 'productive' and chip_hours > 0
        order by chip_hours desc limit {int(top)}
    """).fetchall()
    return [f"  {category:<20} {chip_hours:>12,.1f} chip-h  {share:6.1%} of {base}" for category, base, chip_hours, share in rows]


def render(connection: duckdb.DuckDBPyConnection) -> str:
    totals = fleet_totals(connection)
    lines = [
        "Fleet ML Productivity Goodput (capacity base, ratios of sums)",
        f"  MPG {_fmt(totals['mpg'])} = SG {_fmt(totals['sg'])} x RG {_fmt(totals['rg'])} x PG {_fmt(totals['pg'])}"
        f"   (PG coverage {_fmt(totals['pg_coverage'])}, capacity {totals['capacity_chip_hours'] or 0:,.0f} chip-h)",
        *capacity_gap_lines(connection),
        "",
        "By accelerator (demand base: requested chips x job lifetime)",
        *segment_table(connection, "accelerator"),
        "",
        "By workload (demand base)",
        *segment_table(connection, "workload"),
        "",
        "Top badput (chip-hours)",
        *badput_lines(connection),
    ]
    return "\n".join(lines)
