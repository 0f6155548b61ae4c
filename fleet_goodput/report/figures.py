"""The report's figures for a period, read from the day-grain marts.

The factors have one definition, the `goodput_factors` macro of
sql/derived/macros.sql. A period's factors are that macro applied to the sums
of the marts' chip-seconds over the period's days (ratios of sums, docs/metric.md
section 1); per-day and per-window rows are the marts' own rows. Fleet and
cluster figures use the capacity base (fleet_daily, fleet_by_window,
badput_daily's capacity rows), segment and job figures the demand base
(segment_daily, badput_daily's demand rows, job_window_enriched). Each
figure is a list of row dicts, written as CSV beside the report and drawn in it.
"""

from __future__ import annotations

from datetime import timedelta

from fleet_goodput.core.figure_vector import CATEGORIES
from fleet_goodput.quality.period import Period
from fleet_goodput.report.advice import ClassMeasures, advise
from fleet_goodput.report.headline import days_with_runtime

QUEUE_DIMENSIONS = ("queue", "cluster_queue")  # shown where the scheduler names queues (Kueue: docs/kubernetes.md)
DIMENSIONS = ("accelerator", "workload", "size_class", "team", *QUEUE_DIMENSIONS)
# The job categories the views show: the timeline's, and `unmeasured`, the held time of a job whose runtime
# was not measured (a scheduler alone), which the views keep apart from `idle` (sql/derived/job_profiles.sql).
SHOWN_CATEGORIES = (*CATEGORIES, "unmeasured")
BADPUT = tuple(c for c in SHOWN_CATEGORIES if c != "productive")
# What a job's ranking counts as lost: not its productive steps, not steps still pending at the as-of time
# (neither good nor bad yet), and not held time nothing measured (unknown, not lost).
RANKED_BADPUT = tuple(c for c in BADPUT if c not in ("pending", "unmeasured"))
FACTORS = ("sg", "rg", "pg", "mpg")
TOP_JOBS = 10


def _factors(base: str) -> str:
    """The period's factors from summed mart columns, through the one macro."""
    return (
        f"unnest(goodput_factors(sum(all_allocated_chip_s), sum(productive_chip_s), sum(ideal_chip_s), "
        f"sum(profiled_productive_chip_s), sum({base}), sum(runtime_measured_chip_s)))"
    )


def _rows(connection, query: str, parameters: list | dict) -> list[dict]:
    cursor = connection.execute(query, parameters)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def previous_period(period: Period) -> Period:
    """The period of the same length that ends the day before this one starts."""
    length = timedelta(days=len(period.days))
    return Period(period.first - length, period.last - length)


def fleet_total(connection, period: Period) -> dict:
    return _rows(
        connection,
        f"""
        select {_factors("capacity_chip_s")},
               sum(capacity_chip_s) / 3600 as capacity_chip_h, sum(held_chip_s) / 3600 as held_chip_h,
               sum(idle_capacity_chip_s) / 3600 as idle_capacity_chip_h,
               sum(all_allocated_chip_s) / 3600 as all_allocated_chip_h
        from fleet_daily where day between ? and ?""",
        [period.first, period.last],
    )[0]


def fleet_by_day(connection, period: Period) -> list[dict]:
    return _rows(
        connection,
        f"""
        select strftime(day, '%Y-%m-%d') as day, {_factors("capacity_chip_s")},
               sum(capacity_chip_s) / 3600 as capacity_chip_h, sum(all_allocated_chip_s) / 3600 as all_allocated_chip_h
        from fleet_daily where day between ? and ? group by day order by day""",
        [period.first, period.last],
    )


def fleet_by_window(connection, period: Period) -> list[dict]:
    """The trend within the period's days, one row per event-time window (an hour by default)."""
    return _rows(
        connection,
        f"""
        select strftime(window_start, '%Y-%m-%dT%H:%MZ') as window_start, {_factors("capacity_chip_s")},
               sum(capacity_chip_s) / 3600 as capacity_chip_h, sum(all_allocated_chip_s) / 3600 as all_allocated_chip_h
        from fleet_by_window where day between ? and ? group by window_start order by window_start""",
        [period.first, period.last],
    )


def clusters(connection, period: Period) -> list[dict]:
    """Capacity-base figures per cluster and accelerator: chips online, held, idle, and the factors."""
    return _rows(
        connection,
        f"""
        select cluster, accelerator, {_factors("capacity_chip_s")},
               sum(capacity_chip_s) / 3600 as capacity_chip_h, sum(held_chip_s) / 3600 as held_chip_h,
               sum(idle_capacity_chip_s) / 3600 as idle_capacity_chip_h,
               ratio(sum(idle_capacity_chip_s), sum(capacity_chip_s)) as idle_share
        from fleet_daily where day between ? and ?
        group by cluster, accelerator order by capacity_chip_h desc, cluster, accelerator""",
        [period.first, period.last],
    )


def clusters_by_day(connection, period: Period) -> list[dict]:
    return _rows(
        connection,
        f"""
        select strftime(day, '%Y-%m-%d') as day, cluster, {_factors("capacity_chip_s")}
        from fleet_daily where day between ? and ? group by day, cluster order by day, cluster""",
        [period.first, period.last],
    )


def segments(connection, period: Period, dimension: str) -> list[dict]:
    """Demand-base figures per segment over the period; jobs are counted once however many days they span."""
    return _rows(
        connection,
        f"""
        with days as (
            select segment, {_factors("lifetime_chip_s")},
                   sum(lifetime_chip_s) / 3600 as lifetime_chip_h, sum(productive_chip_s) / 3600 as productive_chip_h
            from segment_daily where dimension = ? and day between ? and ? group by segment
        ),
        jobs as (
            select {dimension} as segment, count(distinct job_id) as jobs
            from job_window_enriched where day between ? and ? group by all
        )
        select days.segment as {dimension}, jobs.jobs, days.* exclude (segment)
        from days join jobs using (segment) order by lifetime_chip_h desc, days.segment""",
        [dimension, period.first, period.last, period.first, period.last],
    )


def segments_by_day(connection, period: Period, dimension: str) -> list[dict]:
    """The rows of segment_daily, as they are."""
    return _rows(
        connection,
        f"""
        select strftime(day, '%Y-%m-%d') as day, segment as {dimension}, sg, rg, pg, mpg, pg_coverage,
               lifetime_chip_s / 3600 as lifetime_chip_h
        from segment_daily where dimension = ? and day between ? and ? order by day, segment""",
        [dimension, period.first, period.last],
    )


def demand_breakdown(connection, period: Period) -> list[dict]:
    """Where the jobs' demand chip-hours went, every category (productive too); shares of the demand base."""
    return _rows(
        connection,
        """
        select category, sum(chip_s) / 3600 as chip_h, ratio(sum(chip_s), sum(base_chip_s)) as share
        from badput_daily where base = 'demand' and day between ? and ?
        group by category order by chip_h desc, category""",
        [period.first, period.last],
    )


def capacity_breakdown(connection, period: Period) -> list[dict]:
    """Capacity no job held, per cluster and accelerator; shares of the capacity base."""
    return _rows(
        connection,
        """
        select cluster, accelerator, sum(base_chip_s) / 3600 as capacity_chip_h,
               (sum(base_chip_s) - sum(chip_s)) / 3600 as held_chip_h, sum(chip_s) / 3600 as idle_capacity_chip_h,
               ratio(sum(chip_s), sum(base_chip_s)) as idle_share
        from badput_daily where base = 'capacity' and day between ? and ?
        group by cluster, accelerator order by capacity_chip_h desc, cluster, accelerator""",
        [period.first, period.last],
    )


def top_jobs(connection, period: Period, limit: int = TOP_JOBS) -> list[dict]:
    """The jobs whose demand lost the most chip-hours in the period, by category: everything but productive
    time, steps still pending and held time no runtime telemetry describes (`RANKED_BADPUT`). A store with a
    scheduler alone so ranks its jobs by queueing and partial allocation, not by how long they ran. Each
    says how many runs of its runtime stopped without an end mark (`jobs.unended_runs`)."""
    sums = ", ".join(f"sum({c}_chip_s) / 3600 as {c}" for c in BADPUT)
    lost = " + ".join(f"sum({c}_chip_s)" for c in RANKED_BADPUT)
    rows = _rows(
        connection,
        f"""
        select job_id, any_value(team) as team, any_value(workload) as workload, any_value(cluster) as cluster,
               any_value(accelerator) as accelerator, any_value(requested_chips) as chips,
               sum(lifetime_chip_s) / 3600 as lifetime_chip_h,
               ({lost}) / 3600 as badput_chip_h, {sums}, any_value(coalesce(unended_runs, 0)) as unended_runs
        from job_window_enriched left join (select job_id, unended_runs from jobs) using (job_id)
        where day between ? and ?
        group by job_id order by badput_chip_h desc, job_id limit {int(limit)}""",
        [period.first, period.last],
    )
    for row in rows:
        row["top_cause"] = max(RANKED_BADPUT, key=lambda c: row[c] or 0.0)
    return rows


def job_detail(connection, period: Period, job_id: str) -> dict:
    """One job: its whole-life row of job_goodput, and its windows in the period (its categories over time)."""
    (life,) = _rows(connection, "select * from job_goodput where job_id = ?", [job_id])
    categories = ", ".join(f"{c}_chip_s / 3600 as {c}" for c in SHOWN_CATEGORIES)
    windows = _rows(
        connection,
        f"""
        select window_start, strftime(window_start, '%Y-%m-%dT%H:%MZ') as window, {categories},
               lifetime_chip_s / 3600 as lifetime_chip_h
        from job_window_enriched where job_id = ? and day between ? and ? order by window_start""",
        [job_id, period.first, period.last],
    )
    in_period = {c: sum(w[c] or 0.0 for w in windows) for c in SHOWN_CATEGORIES}
    # Every interruption of its life (docs/metric.md, "Why jobs stopped"), not only the period's: a page is
    # where an operator looks for why the job stopped.
    stops = _rows(
        connection,
        """
        select strftime(time, '%Y-%m-%dT%H:%M:%SZ') as time, event, cause, reason, run_s,
               coalesce(recovered_s, reallocated_s) as restart_s, lost_chip_s / 3600 as lost_chip_h,
               cost_chip_s / 3600 as cost_chip_h
        from interruptions where job_id = ? order by interruptions.time""",
        [job_id],
    )
    return {"life": life, "windows": windows, "in_period": in_period, "interruptions": stops}


def _wall_s(category: str) -> str:
    return f"sum({category}_chip_s / requested_chips)"


def checkpoint_advice(connection, period: Period) -> list[dict]:
    """Checkpoint-interval advice per training class (accelerator x size class), see advice.py.

    Uses whole job lives (job_goodput and jobs) of the training jobs alive in
    the period: disruptions are counted per job, not per day, by the job's
    timeline from the events that cut or restarted a running attempt
    (`jobs.disruptions`). The failure interval M is measured (all-allocated
    time per disruption), and so is the save count (`jobs.checkpoint_saves`).
    Wall seconds are chip-seconds / requested chips.
    """
    step = " + ".join(f"{c}_chip_s" for c in ("productive", "lost", "pending"))
    rows = _rows(
        connection,
        f"""
        select accelerator, size_class, count(*) as jobs,
               sum(disruptions) as disruptions,
               sum(checkpoint_saves) as saves,
               {_wall_s("checkpoint_save")} as save_s, {_wall_s("lost")} as lost_s,
               sum(({step}) / requested_chips) as step_s, {_wall_s("productive")} as productive_s,
               {_wall_s("checkpoint_restore")} as restore_s,
               {_wall_s("all_allocated")} as all_allocated_s, sum(all_allocated_chip_s) as all_allocated_chip_s
        from job_goodput join (select job_id, disruptions, checkpoint_saves from jobs) using (job_id)
        where workload = 'TRAINING'
          and job_goodput.submit_time < make_timestamptz(?::bigint * 1000000)
          and (job_goodput.end_time is null or job_goodput.end_time >= make_timestamptz(?::bigint * 1000000))
        group by accelerator, size_class order by all_allocated_chip_s desc""",
        [period.end_s, period.start_s],
    )
    return [
        {
            "accelerator": row["accelerator"],
            "size_class": row["size_class"],
            "jobs": row["jobs"],
            "saves": row["saves"],
            **advise(ClassMeasures(**{k: row[k] for k in ClassMeasures.__dataclass_fields__})).as_row(),
        }
        for row in rows
    ]


def pg_coverage(connection, period: Period) -> list[dict]:
    """Share of productive chip-time with a profile, per accelerator and workload (PG covers only that share)."""
    return _rows(
        connection,
        """
        select accelerator, workload, jobs, productive_chip_h, profiled_chip_h, factors.pg_coverage, factors.pg
        from (
            select accelerator, workload, count(distinct job_id) as jobs,
                   sum(productive_chip_s) / 3600 as productive_chip_h,
                   sum(profiled_productive_chip_s) / 3600 as profiled_chip_h,
                   goodput_factors(sum(all_allocated_chip_s), sum(productive_chip_s), sum(ideal_chip_s),
                                   sum(profiled_productive_chip_s), sum(lifetime_chip_s),
                                   sum(runtime_measured_chip_s)) as factors
            from job_window_enriched where day between ? and ? group by all
        ) order by productive_chip_h desc, accelerator, workload""",
        [period.first, period.last],
    )


def queues(connection, period: Period) -> list[dict]:
    """Per ClusterQueue and queue (a Slurm partition, a Kueue LocalQueue path), the jobs submitted in the
    period: how long they waited to start (until they first held all their chips: a Kueue admission),
    how many still wait at the as-of time, and the interruptions of the period (job_waits and
    interruptions_by_queue; percentiles over the period's jobs, not means of days)."""
    return _rows(
        connection,
        """
        with waits as (
            select cluster_queue, queue, count(*) as submitted, count(first_running_time) as started,
                   avg(wait_s) as mean_wait_s, quantile_cont(wait_s, 0.5) as p50_wait_s,
                   quantile_cont(wait_s, 0.9) as p90_wait_s, count(*) filter (where waiting) as waiting
            from job_waits where day between $first and $last group by all
        ),
        cuts as (
            select cluster_queue, queue, sum(interruptions) as interruptions, sum(cost_chip_h) as cost_chip_h
            from interruptions_by_queue where day between $first and $last group by all
        )
        select cluster_queue, queue, coalesce(submitted, 0) as submitted, coalesce(started, 0) as started,
               mean_wait_s, p50_wait_s, p90_wait_s, coalesce(waiting, 0) as waiting,
               coalesce(interruptions, 0) as interruptions, coalesce(cost_chip_h, 0) as cost_chip_h
        from waits full outer join cuts using (cluster_queue, queue)
        order by cluster_queue, queue""",
        {"first": period.first, "last": period.last},
    )


def interruptions(connection, period: Period) -> list[dict]:
    """Why running jobs stopped in the period: per cause, the reason the scheduler gave, queue (a Slurm
    partition, a Kueue queue path), cluster and accelerator (the interruptions view; docs/metric.md, "Why
    jobs stopped"), with the time to restart's mean and 90th percentile (until the job held all its chips
    again, or resumed work with a runtime stream), the costliest first."""
    return _rows(
        connection,
        """
        select cause, coalesce(reason, '') as reason, queue, cluster, accelerator,
               count(*) as interruptions, count(distinct job_id) as jobs, avg(run_s) as mean_run_s,
               avg(coalesce(recovered_s, reallocated_s)) as mean_restart_s,
               quantile_cont(coalesce(recovered_s, reallocated_s), 0.9) as p90_restart_s,
               sum(lost_chip_s) / 3600 as lost_chip_h, sum(recovery_chip_s) / 3600 as recovery_chip_h,
               sum(cost_chip_s) / 3600 as cost_chip_h
        from interruptions where day between ? and ? group by all
        order by cost_chip_h desc, interruptions desc, cause, reason, queue, cluster, accelerator""",
        [period.first, period.last],
    )


def collect(connection, period: Period) -> dict[str, list[dict]]:
    """Every figure of the report, by the name of its CSV file."""
    figures = {
        "fleet_total": [fleet_total(connection, period)],
        "fleet_by_day": fleet_by_day(connection, period),
        "fleet_by_window": fleet_by_window(connection, period),
        "by_cluster": clusters(connection, period),
        "by_cluster_by_day": clusters_by_day(connection, period),
    }
    for dimension in DIMENSIONS:
        figures[f"by_{dimension}"] = segments(connection, period, dimension)
        figures[f"by_{dimension}_by_day"] = segments_by_day(connection, period, dimension)
    figures["demand_breakdown"] = demand_breakdown(connection, period)
    figures["capacity_breakdown"] = capacity_breakdown(connection, period)
    figures["top_jobs"] = top_jobs(connection, period)
    figures["checkpoint_advice"] = checkpoint_advice(connection, period)
    figures["pg_coverage"] = pg_coverage(connection, period)
    figures["interruptions"] = interruptions(connection, period)
    figures["queues"] = queues(connection, period)
    runtime_days = days_with_runtime(connection)
    figures["fleet_total"][0]["runtime_measured"] = _runtime_measured(runtime_days, period)
    _add_changes(figures, connection, previous_period(period), runtime_days)
    return figures


def _runtime_measured(runtime_days: set, period: Period) -> bool:
    """Whether a runtime span covers chip-time in the period: without one RG, PG and MPG cannot be
    measured (every all-allocated second is idle), though the figures say 0."""
    return any(period.first <= day <= period.last for day in runtime_days)


def _add_changes(figures: dict[str, list[dict]], connection, previous: Period, runtime_days: set) -> None:
    """Each factor's change against the previous period of the same length (None where either is unknown,
    or for RG, PG and MPG, not measured)."""
    total = figures["fleet_total"][0]
    before_total = fleet_total(connection, previous)
    if not (total["runtime_measured"] and _runtime_measured(runtime_days, previous)):
        before_total.update(rg=None, pg=None, mpg=None)
    total.update(_change(total, before_total))
    total["previous_period"] = previous.name
    earlier = {
        "by_cluster": (
            {(r["cluster"], r["accelerator"]): r for r in clusters(connection, previous)},
            ("cluster", "accelerator"),
        )
    }
    for dimension in DIMENSIONS:
        earlier[f"by_{dimension}"] = (
            {(r[dimension],): r for r in segments(connection, previous, dimension)},
            (dimension,),
        )
    for name, (rows_before, key) in earlier.items():
        for row in figures[name]:
            row.update(_change(row, rows_before.get(tuple(row[k] for k in key), {})))


def _change(now: dict, before: dict) -> dict:
    return {f"{f}_change": None if now.get(f) is None or before.get(f) is None else now[f] - before[f] for f in FACTORS}
