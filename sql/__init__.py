"""DuckDB views over the Parquet tables, one object per file.

Layers: `raw` views over Parquet (generated from the table definitions in
fleet_goodput/store/tables.py), `derived` views that join and classify, and the
`marts` people query. `VIEW_FILES` is the registry: the order views are
created in, each after the views it reads.
"""

from importlib import resources

SQL_DIR = resources.files(__name__)

VIEW_FILES = (
    "derived/macros.sql",
    "derived/job_attributes.sql",
    "derived/pg_set_aside.sql",
    "derived/job_profiles.sql",
    "derived/job_window_enriched.sql",
    "derived/capacity_window.sql",
    "derived/queue_quota_levels.sql",
    "derived/cluster_window.sql",
    "derived/job_waits.sql",
    "marts/job_goodput.sql",
    "marts/fleet_daily.sql",
    "marts/capacity_gaps.sql",
    "marts/fleet_by_window.sql",
    "marts/segment_daily.sql",
    "marts/badput_daily.sql",
    "marts/goodput_by_segment.sql",
    "marts/goodput_by_workload.sql",
    "marts/goodput_by_size_class.sql",
    "marts/goodput_by_accelerator.sql",
    "marts/goodput_by_team.sql",
    "marts/goodput_by_framework.sql",
    "marts/goodput_by_queue.sql",
    "marts/goodput_by_cluster_queue.sql",
    "marts/badput_breakdown.sql",
    "marts/interruptions.sql",
    "marts/interruptions_by_cause.sql",
    "marts/interruptions_by_queue.sql",
    "marts/reliability_daily.sql",
    "marts/queue_waits.sql",
    "marts/queue_daily.sql",
    "marts/kueue_quota_daily.sql",
)


def view_sql(relative_path: str) -> str:
    return (SQL_DIR / relative_path).read_text()
