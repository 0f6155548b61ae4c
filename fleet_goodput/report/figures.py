"""The report's figures for a period, queried from the views.

Every factor is a ratio of sums over the period's windows (MPG.md section 1),
with the same `ratio` and `mpg` macros the views use: fleet figures on the
capacity base (fleet_daily), segment and job figures on the demand base
(job_window_enriched). Each figure is a list of row dicts, written as CSV
beside the report and drawn in it.
"""

from __future__ import annotations

from fleet_goodput.quality.period import Period
from fleet_goodput.report.advice import ClassMeasures, advise
from fleet_goodput.timeline import CATEGORIES

DIMENSIONS = ("accelerator", "workload", "size_class", "team")
BADPUT = tuple(c for c in CATEGORIES if c != "productive")
_CAPACITY_FACTORS = """
    ratio(sum(all_allocated_chip_s), sum(capacity_chip_s)) as sg,
    ratio(sum(productive_chip_s), sum(all_allocated_chip_s)) as rg,
    ratio(sum(ideal_chip_s), sum(profiled_productive_chip_s)) as pg,
    mpg(sum(ideal_chip_s), sum(productive_chip_s), sum(profiled_productive_chip_s), sum(capacity_chip_s)) as mpg,
    ratio(sum(profiled_productive_chip_s), sum(productive_chip_s)) as pg_coverage,
    sum(capacity_chip_s) / 3600 as capacity_chip_h,
    sum(all_allocated_chip_s) / 3600 as all_allocated_chip_h"""
_DEMAND_FACTORS = """
    ratio(sum(all_allocated_chip_s), sum(lifetime_chip_s)) as sg,
    ratio(sum(productive_chip_s), sum(all_allocated_chip_s)) as rg,
    ratio(sum(ideal_chip_s), sum(profiled_productive_chip_s)) as pg,
    mpg(sum(ideal_chip_s), sum(productive_chip_s), sum(profiled_productive_chip_s), sum(lifetime_chip_s)) as mpg,
    ratio(sum(profiled_productive_chip_s), sum(productive_chip_s)) as pg_coverage,
    sum(lifetime_chip_s) / 3600 as lifetime_chip_h,
    sum(productive_chip_s) / 3600 as productive_chip_h"""


def _rows(connection, query: str, parameters: list) -> list[dict]:
    cursor = connection.execute(query, parameters)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def fleet_total(connection, period: Period) -> dict:
    return _rows(connection, f"select {_CAPACITY_FACTORS} from fleet_daily where day between ? and ?",
                 [period.first, period.last])[0]


def fleet_by_day(connection, period: Period) -> list[dict]:
    return _rows(connection, f"""
        select strftime(day, '%Y-%m-%d') as day, {_CAPACITY_FACTORS}
        from fleet_daily where day between ? and ? group by day order by day""", [period.first, period.last])


def segments(connection, period: Period, dimension: str) -> list[dict]:
    return _rows(connection, f"""
        select {dimension}, count(distinct job_id) as jobs, {_DEMAND_FACTORS}
        from job_window_enriched where day between ? and ?
        group by {dimension} order by lifetime_chip_h desc, {dimension}""", [period.first, period.last])


def segments_by_day(connection, period: Period, dimension: str) -> list[dict]:
    return _rows(connection, f"""
        select strftime(day, '%Y-%m-%d') as day, {dimension}, {_DEMAND_FACTORS}
        from job_window_enriched where day between ? and ?
        group by day, {dimension} order by day, {dimension}""", [period.first, period.last])


def badput(connection, period: Period) -> list[dict]:
    """Chip-hours per non-productive category (demand base) and idle capacity (capacity base)."""
    sums = ", ".join(f"sum({c}_chip_s) / 3600 as {c}" for c in BADPUT)
    demand = _rows(connection, f"""
        select {sums}, sum(lifetime_chip_s) / 3600 as lifetime
        from job_window_enriched where day between ? and ?""", [period.first, period.last])[0]
    capacity = _rows(connection, """
        select sum(capacity_chip_s) / 3600 as capacity, sum(idle_capacity_chip_s) / 3600 as idle
        from fleet_daily where day between ? and ?""", [period.first, period.last])[0]
    rows = [{"category": c, "base": "demand", "chip_h": demand[c] or 0.0,
             "share": (demand[c] or 0.0) / demand["lifetime"] if demand["lifetime"] else None} for c in BADPUT]
    rows.append({"category": "idle_capacity", "base": "capacity", "chip_h": capacity["idle"] or 0.0,
                 "share": (capacity["idle"] or 0.0) / capacity["capacity"] if capacity["capacity"] else None})
    return sorted(rows, key=lambda row: -row["chip_h"])


def top_jobs(connection, period: Period, limit: int = 10) -> list[dict]:
    """The jobs whose demand lost the most chip-hours in the period (everything but productive), by category."""
    sums = ", ".join(f"sum({c}_chip_s) / 3600 as {c}" for c in BADPUT)
    rows = _rows(connection, f"""
        select job_id, any_value(team) as team, any_value(workload) as workload,
               any_value(accelerator) as accelerator, any_value(requested_chips) as chips,
               sum(lifetime_chip_s) / 3600 as lifetime_chip_h,
               (sum(lifetime_chip_s) - sum(productive_chip_s)) / 3600 as badput_chip_h, {sums}
        from job_window_enriched where day between ? and ?
        group by job_id order by badput_chip_h desc, job_id limit {int(limit)}""", [period.first, period.last])
    for row in rows:
        row["top_cause"] = max(BADPUT, key=lambda c: row[c] or 0.0)
    return rows


def _wall_s(category: str) -> str:
    return f"sum({category}_chip_s / requested_chips)"


def checkpoint_advice(connection, period: Period) -> list[dict]:
    """Checkpoint-interval advice per training class (accelerator x size class), see advice.py.

    Uses whole job lives (job_goodput and jobs.allocations) of the training jobs
    alive in the period: disruptions and saves are counted per job, not per day.
    Wall seconds are chip-seconds / requested chips, summed over the class.
    """
    step = " + ".join(f"{c}_chip_s" for c in ("productive", "lost", "pending"))
    rows = _rows(connection, f"""
        select accelerator, size_class, count(*) as jobs,
               sum(allocations - 1) + count(*) filter (where status = 'FAILED') as disruptions,
               {_wall_s('checkpoint_save')} as save_s, {_wall_s('lost')} as lost_s,
               sum(({step}) / requested_chips) as step_s, {_wall_s('checkpoint_restore')} as restore_s,
               {_wall_s('all_allocated')} as all_allocated_s, sum(all_allocated_chip_s) as all_allocated_chip_s
        from job_goodput join (select job_id, allocations from jobs) using (job_id)
        where workload = 'TRAINING'
          and job_goodput.submit_time < make_timestamptz(?::bigint * 1000000)
          and (job_goodput.end_time is null or job_goodput.end_time >= make_timestamptz(?::bigint * 1000000))
        group by accelerator, size_class order by all_allocated_chip_s desc""", [period.end_s, period.start_s])
    return [{"accelerator": row["accelerator"], "size_class": row["size_class"], "jobs": row["jobs"],
             **advise(ClassMeasures(**{k: row[k] for k in ClassMeasures.__dataclass_fields__})).as_row()}
            for row in rows]


def pg_coverage(connection, period: Period) -> list[dict]:
    """Share of productive chip-time with a profile, per accelerator and workload (PG covers only that share)."""
    return _rows(connection, """
        select accelerator, workload, count(distinct job_id) as jobs,
               sum(productive_chip_s) / 3600 as productive_chip_h,
               sum(profiled_productive_chip_s) / 3600 as profiled_chip_h,
               ratio(sum(profiled_productive_chip_s), sum(productive_chip_s)) as pg_coverage,
               ratio(sum(ideal_chip_s), sum(profiled_productive_chip_s)) as pg
        from job_window_enriched where day between ? and ?
        group by all order by productive_chip_h desc""", [period.first, period.last])


def collect(connection, period: Period) -> dict[str, list[dict]]:
    """Every figure of the report, by the name of its CSV file."""
    figures = {"fleet_total": [fleet_total(connection, period)], "fleet_by_day": fleet_by_day(connection, period)}
    for dimension in DIMENSIONS:
        figures[f"by_{dimension}"] = segments(connection, period, dimension)
        figures[f"by_{dimension}_by_day"] = segments_by_day(connection, period, dimension)
    figures["badput"] = badput(connection, period)
    figures["top_jobs"] = top_jobs(connection, period)
    figures["checkpoint_advice"] = checkpoint_advice(connection, period)
    figures["pg_coverage"] = pg_coverage(connection, period)
    return figures

