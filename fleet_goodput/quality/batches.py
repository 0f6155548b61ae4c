"""The data each suite validates: one pandas frame per suite, read with DuckDB.

Every suite reads the views `mpg sql` uses, rebuilt in memory so validation
never touches OUTPUT/goodput.duckdb. A keyed table's view is the table's rows
as stored (one per key: fleet_goodput/store/keyed_tables.py), so a duplicated key
or file shows in them; the table suites of `rejected` read its settled rows
(the table `rejected`, not the provisional `rejected_pending`). Frames carry derived check columns. A derived column turns a
rule GX has no built-in expectation for (conservation within a tolerance, a
row's day matching its partition) into a plain column expectation, so the rule
reads in SQL here and its threshold and reason in suites.py.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from fleet_goodput.core.figure_vector import ALL_ALLOCATED
from fleet_goodput.quality.checked_run import CheckedRun
from fleet_goodput.quality.period import Period
from fleet_goodput.store.views import create_views


def open_views(run: CheckedRun) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with every view of the checked run (its store checked whole, and a
    killed run's tables undone, where it was opened: checked_run.py)."""
    connection = duckdb.connect()
    connection.execute("set timezone = 'UTC'")
    create_views(connection, run.store, run.settings, run_id=run.committed().run_id, defer_binding=True)
    return connection


def _chip_s(name: str) -> str:
    return f"{name}_chip_s"


# Relative conservation error of one row: |lhs - rhs| / lifetime (1 chip-second
# at least, so an empty row divides safely).
_LIFETIME_ERROR = (
    f"abs({_chip_s('lifetime')} - ({_chip_s('queued')} + {_chip_s('partial')} + "
    f"{_chip_s('all_allocated')})) / greatest({_chip_s('lifetime')}, 1)"
)
_ALL_ALLOCATED_ERROR = (
    f"abs({_chip_s('all_allocated')} - ("
    + " + ".join(_chip_s(c) for c in ALL_ALLOCATED)
    + f")) / greatest({_chip_s('lifetime')}, 1)"
)


def job_window_frame(connection, period: Period, window_s: int) -> pd.DataFrame:
    return connection.execute(
        f"""
        with known_jobs as (select distinct job_id as known_job_id from jobs)
        select
            job_window.* exclude (date),
            strftime(job_window.date, '%Y-%m-%d') as partition_date,
            strftime(make_timestamp(epoch_us(window_start)), '%Y-%m-%d') as window_date,
            epoch_us(window_start) // 1000000 as window_start_s,
            (epoch_us(window_start) // 1000000) % {int(window_s)} as window_offset_s,
            {_LIFETIME_ERROR} as lifetime_conservation_error,
            {_ALL_ALLOCATED_ERROR} as all_allocated_conservation_error,
            ratio(ideal_chip_s, profiled_productive_chip_s) as window_pg,
            known_job_id
        from job_window
        left join known_jobs on job_window.job_id = known_jobs.known_job_id
        where job_window.date between ? and ?
    """,
        [period.first, period.last],
    ).df()


def jobs_frame(connection, period: Period) -> pd.DataFrame:
    """Jobs alive at some time in the period (submitted before its end, not ended before its start)."""
    return connection.execute(
        """
        select
            jobs.* exclude (date),
            strftime(jobs.date, '%Y-%m-%d') as partition_date,
            strftime(make_timestamp(epoch_us(submit_time)), '%Y-%m-%d') as submit_date,
            (end_time is null) = (status in ('RUNNING', 'PENDING')) as end_matches_status,
            epoch_us(end_time) / 1e6 as end_time_s,
            job_goodput.job_id as goodput_job_id
        from jobs
        left join (select job_id from job_goodput) as job_goodput using (job_id)
        where submit_time < make_timestamptz(?::bigint * 1000000)
          and (end_time is null or end_time >= make_timestamptz(?::bigint * 1000000))
    """,
        [period.end_s, period.start_s],
    ).df()


def capacity_window_frame(connection, period: Period, window_s: int) -> pd.DataFrame:
    return connection.execute(
        f"""
        select
            * exclude (date),
            strftime(date, '%Y-%m-%d') as partition_date,
            strftime(make_timestamp(epoch_us(window_start)), '%Y-%m-%d') as window_date,
            epoch_us(window_start) // 1000000 as window_start_s,
            (epoch_us(window_start) // 1000000) % {int(window_s)} as window_offset_s
        from capacity_window
        where date between ? and ?
    """,
        [period.first, period.last],
    ).df()


def capacity_coverage_frame(connection, period: Period) -> pd.DataFrame:
    """One row per cluster, accelerator and window where jobs held chips in the period, beside its capacity.

    Read from the tables' own views (job_window joined to jobs for the cluster,
    and capacity_window), not the marts, so the check does not depend on how a
    mart treats a cluster without capacity. `window_without_capacity` names the
    window when its capacity is missing or zero, and is null otherwise.
    """
    return connection.execute(
        """
        with usage as (
            select jobs.cluster, jobs.accelerator, job_window.window_start,
                   sum(job_window.held_chip_s) as held_chip_s,
                   sum(job_window.all_allocated_chip_s) as all_allocated_chip_s
            from job_window
            join jobs using (job_id)
            where job_window.date between ? and ?
            group by all
            having sum(job_window.held_chip_s) > 0 or sum(job_window.all_allocated_chip_s) > 0
        )
        select
            usage.*,
            capacity_window.capacity_chip_s,
            case when coalesce(capacity_window.capacity_chip_s, 0) > 0 then null
                 else concat_ws(' / ', usage.cluster, usage.accelerator,
                                strftime(usage.window_start, '%Y-%m-%dT%H:%M:%SZ'))
            end as window_without_capacity
        from usage
        left join capacity_window using (cluster, accelerator, window_start)
    """,
        [period.first, period.last],
    ).df()


def rejected_frame(connection, period: Period) -> pd.DataFrame:
    return connection.execute(
        """
        select * exclude (date, provisional), strftime(date, '%Y-%m-%d') as partition_date
        from rejected
        where not provisional and date between ? and ?
    """,
        [period.first, period.last],
    ).df()


def manifest_frame(connection, manifest: dict) -> pd.DataFrame:
    """One row per stream: the manifest's counts beside what the rejected tables hold (whole run).

    The manifest counts every rejection, settled or provisional (an event still
    inside the allowed lateness), so it is compared with the view `rejected`,
    which shows both tables' rows.
    """
    in_table = dict(connection.execute("select stream, sum(records) from rejected group by stream").fetchall())
    rows = []
    for stream, counts in manifest.get("streams", {}).items():
        fates = {k: counts.get(k, 0) for k in ("accepted", "duplicate", "rejected", "late", "waiting")}
        rows.append(
            {
                "stream": stream,
                "read": counts.get("read"),
                **fates,
                "unaccounted": counts["read"] - sum(fates.values()),
                "rejected_in_table": int(in_table.get(stream) or 0),
                "rejected_share": counts["rejected"] / counts["read"] if counts["read"] else 0.0,
                "schema_version": manifest.get("schema_version"),
                "as_of_s": (manifest.get("as_of_us") or 0) / 1e6,
                "window_s": manifest.get("window_s"),
            }
        )
    return pd.DataFrame(rows)


def views_frame(connection, period: Period) -> pd.DataFrame:
    """Goodput factors of every row of the views people read, for the period where a view has days."""
    return connection.execute(
        """
        with rows as (
            select 'fleet_daily' as view, concat_ws('/', day, cluster, accelerator) as row_key,
                   sg, rg, pg, mpg, pg_coverage
            from fleet_daily where day between ? and ?
            union all
            select 'goodput_by_segment', concat_ws('/', dimension, segment), sg, rg, pg, mpg, pg_coverage
            from goodput_by_segment
            union all
            select 'job_goodput', job_id, sg, rg, pg, mpg, pg_coverage
            from job_goodput
            where submit_time < make_timestamptz(?::bigint * 1000000)
              and (end_time is null or end_time >= make_timestamptz(?::bigint * 1000000))
        )
        select *, abs(sg * rg * pg - mpg) as factor_product_error
        from rows
    """,
        [period.first, period.last, period.end_s, period.start_s],
    ).df()
